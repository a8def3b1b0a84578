"""A small MCP client over stdio for sandbox-mcp, for the Python suites that
drive sandboxd through its MCP front (the breakout suite with
SBX_BREAKOUT_FRONT=mcp, bench/mcp_latency.py): newline-delimited JSON-RPC on
the child's stdin/stdout, the initialize handshake, and calls from several
threads at once (a reader thread hands each response to its caller by id).

sandbox_run_equivalent() turns sandbox-run's flags into run_code arguments
and the tool result back into sandbox-run's --json shape, so that a suite
written against sandbox-run checks the same verdicts through the front.
The TypeScript SDK tests (tests/fronts/mcp) are the conformance tests; this
is only a driver.
"""
import base64
import itertools
import json
import os
import re
import subprocess
import threading
import urllib.parse

PROTOCOL_VERSION = "2025-11-25"


class McpError(Exception):
    """A JSON-RPC error response."""

    def __init__(self, error):
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.code = error.get("code")
        self.message = error.get("message")


class McpStdio:
    """sandbox-mcp -e URL [args], initialized; close() ends its stdin."""

    def __init__(self, bin_dir, url, *args):
        self.proc = subprocess.Popen([f"{bin_dir}/sandbox-mcp", "-e", url, *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.pending = {}  # id -> [event, response]
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.stderr = b""
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        init = self.request("initialize", {"protocolVersion": PROTOCOL_VERSION,
                                           "capabilities": {},
                                           "clientInfo": {"name": "sandboxd-tests",
                                                          "version": "1"}})
        if init.get("protocolVersion") != PROTOCOL_VERSION:
            raise RuntimeError(f"sandbox-mcp negotiated {init.get('protocolVersion')}")
        self.notify("notifications/initialized")

    def _drain_stderr(self):
        for line in self.proc.stderr:
            self.stderr += line

    def _read(self):
        for line in self.proc.stdout:
            msg = json.loads(line)
            with self.lock:
                slot = self.pending.pop(msg.get("id"), None)
            if slot is not None:
                slot[1] = msg
                slot[0].set()
        with self.lock:  # sandbox-mcp is gone: wake every caller
            for slot in self.pending.values():
                slot[0].set()

    def _send(self, msg):
        data = json.dumps(msg, separators=(",", ":")).encode() + b"\n"
        with self.lock:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()

    def notify(self, method, params=None):
        self._send({"jsonrpc": "2.0", "method": method, **({"params": params} if params else {})})

    def request(self, method, params, timeout=600):
        rid = next(self.ids)
        slot = [threading.Event(), None]
        with self.lock:
            self.pending[rid] = slot
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        if not slot[0].wait(timeout) or slot[1] is None:
            raise RuntimeError(f"no answer from sandbox-mcp to {method}: "
                               f"{self.stderr[-2000:].decode(errors='replace')}")
        if "error" in slot[1]:
            raise McpError(slot[1]["error"])
        return slot[1]["result"]

    def tool(self, name, arguments, timeout=600):
        return self.request("tools/call", {"name": name, "arguments": arguments}, timeout)

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def texts(result):
    return "\n".join(c["text"] for c in result.get("content", []) if c.get("type") == "text")


def _file_arg(spec):
    """--file LOCAL[:DEST] as a run_code file (content in base64)."""
    local, _, dest = spec.partition(":")
    with open(local, "rb") as f:
        data = f.read()
    return {"path": dest or os.path.basename(local), "content": base64.b64encode(data).decode(),
            "encoding": "base64"}


# sandbox-run's limit flags: (run_code's limits key, factor).
_LIMITS = {"--timeout-ms": ("timeout_ms", 1), "--cpu-time-ms": ("cpu_time_ms", 1),
           "--memory-mb": ("memory_bytes", 1 << 20), "--output-kb": ("output_bytes", 1 << 10),
           "--max-processes": ("max_processes", 1), "--disk-mb": ("disk_bytes", 1 << 20),
           "--open-files": ("open_files", 1)}


class NoEquivalent(Exception):
    """A sandbox-run flag that run_code has no argument for (--run-id)."""


def run_code_arguments(code, flags):
    """sandbox-run's flags as run_code arguments, and the --artifacts-dir.
    Limits pass through as given (negative and huge ones too, as int64), so
    that what refuses them is the front or the server, not this driver."""
    args, adir = {"code": code}, None
    it = iter(flags)
    for flag in it:
        if flag == "--session":
            args["session_id"] = next(it)
        elif flag == "--stdin":
            with open(next(it), "rb") as f:
                args["stdin"] = base64.b64encode(f.read()).decode()
            args["stdin_encoding"] = "base64"
        elif flag == "--file":
            args.setdefault("files", []).append(_file_arg(next(it)))
        elif flag == "--file-url":
            dest, _, url = next(it).partition("=")
            args.setdefault("files", []).append({"path": dest, "url": url})
        elif flag == "--arg":
            args.setdefault("args", []).append(next(it))
        elif flag == "--env":
            k, _, v = next(it).partition("=")
            args.setdefault("env", {})[k] = v
        elif flag == "--requirement":
            args.setdefault("requirements", []).append(next(it))
        elif flag == "--artifacts-dir":
            adir = next(it)
        elif flag in _LIMITS:
            key, factor = _LIMITS[flag]
            args.setdefault("limits", {})[key] = int(next(it)) * factor
        else:
            raise NoEquivalent(flag)
    return args, adir


_FAILED = re.compile(r"^run_code failed: ([A-Z_]+): (.*)", re.S)
_NOT_CALLED = re.compile(r"^run_code was not called \(nothing ran\): (.*)", re.S)


def _save_attachment(adir, uri, data):
    """An attachment saved under adir by its URI's path below output/, as
    sandbox-run saves artifacts: nothing outside adir, no symlink followed."""
    path = urllib.parse.unquote(urllib.parse.urlsplit(uri).path)
    rel = path.split("/output/", 1)[1] if "/output/" in path else None
    parts = rel.split("/") if rel else []
    if not parts or any(p in ("", ".", "..") for p in parts):
        return
    dirfd = os.open(adir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for p in parts[:-1]:
            try:
                os.mkdir(p, 0o755, dir_fd=dirfd)
            except FileExistsError:
                pass
            nfd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dirfd)
            os.close(dirfd)
            dirfd = nfd
        fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644,
                     dir_fd=dirfd)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    finally:
        os.close(dirfd)


def sandbox_run_equivalent(result, adir=None):
    """A run_code result as (exit status, sandbox-run --json's object)."""
    out = {"run_id": "", "status": "OK", "error": "", "stdout": "", "stderr": "",
           "killed_by": "none", "exit_code": 0, "signal": 0, "artifacts": [], "feedback": [],
           "session_id": "", "session_created": False, "mcp_is_error": result.get("isError")}
    sc = result.get("structuredContent")
    if sc is None:  # the call failed: nothing ran, or we cannot know
        text = texts(result)
        m = _FAILED.match(text) or _NOT_CALLED.match(text)
        if m is None:
            out.update(status="UNKNOWN", error=text)
        elif m.re is _FAILED:
            out.update(status=m.group(1), error=m.group(2))
        else:
            out.update(status="INVALID_ARGUMENT", error=m.group(1))
        return 125, out
    for k in ("run_id", "stdout", "stderr", "killed_by", "exit_code", "signal", "feedback",
              "stdout_truncated", "stderr_truncated", "session_created", "wall_time_ms",
              "cpu_time_ms", "peak_memory_bytes"):
        if k in sc:
            out[k] = sc[k]
    out["session_id"] = sc.get("session_id", "")
    out["artifacts"] = [{"relative_path": a["path"][len("output/"):], "size": a["size"],
                         "mime": a["mime"], "attached": a["attached"]} for a in sc["artifacts"]]
    if adir is not None:
        os.makedirs(adir, exist_ok=True)
        for c in result.get("content", []):
            if c.get("type") == "resource":
                r = c["resource"]
                data = r["text"].encode() if "text" in r else base64.b64decode(r["blob"])
                _save_attachment(adir, r["uri"], data)
        images = [c for c in result.get("content", []) if c.get("type") == "image"]
        paths = [a["path"] for a in sc["artifacts"] if a["attached"] == "image"]
        for c, p in zip(images, paths):  # images carry no name: in artifact order
            _save_attachment(adir, "sandbox://x/y/" + urllib.parse.quote(p),
                             base64.b64decode(c["data"]))
    rc = 124 if out["killed_by"] == "timeout" else \
        128 + out["signal"] if out["signal"] else out["exit_code"]
    return rc, out
