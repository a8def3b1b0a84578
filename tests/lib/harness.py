"""What every end-to-end test and benchmark of sandboxd shares: a real
sandboxd started the way users start it (own loopback port, state dir and
a uid range allocated by tests/lib/uids.py, waited for until it logs
event=ready), the soft check (check: prints ok/FAIL and records the failure
so a test goes on and fails at its end, see tests/conftest.py) and raw SP
connections for fault tests.

Imported as the package `lib` (tests/pytest.ini puts tests/ on the path:
`from lib.harness import Server, check`). bench/'s scripts, run as
scripts, put tests/lib itself on sys.path; both work. Nothing in it mocks
the server.
"""
import os
import signal
import socket
import subprocess
import tempfile
import time

try:
    from . import uids
except ImportError:  # imported flat, with tests/lib on sys.path (bench/)
    import uids

# The failed checks of the current test (tests/conftest.py empties it
# before each test and fails the test when it is not empty at its end), or
# of the group run_groups runs. Cleared in place: modules import the list.
FAILURES = []
# This process's servers: their scratch directories (logs, state, scripts)
# are removed by clean_scratch when the tests passed, kept when not.
SERVERS = []
SP_HEADER_REQ = b"\x00SP\x00\x00\x30\x00\x00"  # nng's SP header: protocol 0x30 = REQ


def check(cond, what, detail=""):
    """Prints ok/FAIL for one expectation and records a failure in FAILURES
    (what, then the detail's first 500 characters); returns cond, so a test
    may stop what depends on it. The test goes on after a failure and fails
    at its end, listing every failed check."""
    if cond:
        print(f"ok   {what}")
    else:
        text = detail if isinstance(detail, str) else repr(detail)
        print(f"FAIL {what} {text[:2000]}")
        FAILURES.append(f"{what} {text[:500]}".rstrip())
    return cond


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SandboxdProcess:
    """A sandboxd process writing its log to log_path. spawn() starts it and
    waits for event=ready, in either log format (written after the last
    start, for restarts);
    stop() sends SIGTERM and waits, killing it when it does not stop."""

    log_path = None
    proc = None
    log_offset = 0

    def spawn(self, cmd, env=None, ready_timeout=15):
        with open(self.log_path, "ab") as log:
            self.log_offset = log.tell()
            penv = dict(os.environ)
            penv.update(env or {})
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=penv)
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sandboxd exited {self.proc.returncode}: "
                                   f"{self.log_text()[-4000:]}")
            text = self.log_text(self.log_offset)
            if "event=ready" in text or '"event":"ready"' in text:  # logfmt or json
                return
            time.sleep(0.05)
        self.proc.kill()
        self.proc.wait()
        raise RuntimeError("sandboxd not ready in time: " + self.log_text()[-4000:])

    def log_text(self, offset=0):
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    def stop(self, timeout=30):
        """SIGTERM and wait; the exit status, or None when it had to be killed."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


def uids_needed(flags):
    """How many uids a sandboxd with these flags runs sandboxes as: --workers
    (default: the CPUs) + --max-interpreters (default 4), + 1 to spare."""
    n = {"--workers": os.cpu_count() or 1, "--max-interpreters": 4}
    flags = [str(f) for f in flags]
    for i, f in enumerate(flags):
        name, eq, value = f.partition("=")
        if name in n:
            value = value if eq else (flags[i + 1] if i + 1 < len(flags) else "")
            if value.isdigit():
                n[name] = int(value)
    return sum(n.values()) + 1


def allocate_uids(*flags):
    """A uid base for a sandboxd a test starts itself with these flags
    (--uid-base), held until the process exits like a Server's."""
    return uids.allocate(uids_needed(flags))


class Server(SandboxdProcess):
    """One sandboxd of a test: its own port, ipc socket, state dir and uid
    range, so tests may run in parallel. Server(bin_dir, *flags) allocates
    the uid range (uids.allocate, held until the process exits);
    uid_base=N takes that base instead (a restart on the same state dir:
    uid_base=old.uid_base). Its uids are s.uid_base .. s.uid_base +
    s.uid_count - 1, for tests that look for their processes
    (slot_processes). Subclasses add flags with
    extra_args() and wrap the code with script_text()."""
    tmp_prefix = "sbx-svc-"

    def __init__(self, bin_dir, *extra, uid_base=None, env=None, wrap=()):
        if extra and isinstance(extra[0], int):  # Server(bin_dir, UID_BASE, ...): bench/
            uid_base, extra = extra[0], extra[1:]
        self.bin_dir = bin_dir
        self.tmp = tempfile.mkdtemp(prefix=self.tmp_prefix)
        SERVERS.append(self)
        os.chmod(self.tmp, 0o755)
        self.port = free_port()
        self.tcp = f"tcp://127.0.0.1:{self.port}"
        self.ipc_path = os.path.join(self.tmp, "sock")
        self.ipc = f"ipc://{self.ipc_path}"
        self.state = os.path.join(self.tmp, "state")
        self.log_path = os.path.join(self.tmp, "sandboxd.log")
        first = self.extra_args()
        self.uid_count = uids_needed((*first, *extra))
        if uid_base is None:
            uid_base = uids.allocate(self.uid_count)
        else:
            uids.claim(uid_base, self.uid_count)
        self.uid_base = uid_base
        # wrap: a command to start sandboxd under (e.g. in a network
        # namespace of its own); it ends by exec'ing its arguments.
        self.spawn([*wrap, f"{bin_dir}/sandboxd", *first, "--listen", self.tcp,
                    "--listen", self.ipc, "--state-dir", self.state, "--uid-base", str(uid_base),
                    *extra], env=env)

    def extra_args(self):
        return []

    def script_text(self, code, **kw):
        return code

    def run(self, script, *flags, url=None, stdin=None, timeout=60, **kw):
        """sandbox-run --json; returns (exit status, parsed json, or the raw
        output's tail when it is not JSON)."""
        import json
        path = os.path.join(self.tmp, f"script-{time.monotonic_ns()}.py")
        with open(path, "w") as f:
            f.write(self.script_text(script, **kw))
        cmd = [f"{self.bin_dir}/sandbox-run", "-e", url or self.tcp, "--json", *flags, path]
        p = subprocess.run(cmd, capture_output=True, timeout=timeout, input=stdin)
        try:
            return p.returncode, json.loads(p.stdout)
        except ValueError:
            return p.returncode, {"raw": p.stdout[-2000:], "stderr": p.stderr[-2000:]}

    def probe(self, *args):
        p = subprocess.run([f"{self.bin_dir}/svc-probe", self.tcp, *args],
                           capture_output=True, timeout=30, text=True)
        return p.stdout.strip()


def slot_processes(uid_base, n):
    """{pid: uid} of every process whose real uid is in [uid_base, uid_base
    + n): what a server's runs left alive (n = its slots, + 1 to cover the
    installer's uid too)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                uid_line = next(line for line in f if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue  # gone meanwhile
        uid = int(uid_line.split()[1])
        if uid_base <= uid < uid_base + n:
            found[int(pid)] = uid
    return found


def wait_log(s, needle, timeout=10):
    """True once needle is in the server's log, within timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in s.log_text():
            return True
        time.sleep(0.02)
    return False


def recv_exact(sock, n, timeout):
    sock.settimeout(timeout)
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed by the server")
        buf += chunk
    return buf


def sp_connect(port, handshake=True, timeout=5):
    """A raw TCP connection to an nng REP listener, as a REQ peer opens it:
    with handshake, the SP header sent and the server's (REP, 0x31) checked."""
    c = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    if handshake:
        c.sendall(SP_HEADER_REQ)
        head = recv_exact(c, 8, timeout)
        if head[:4] != b"\x00SP\x00" or head[4:6] != b"\x00\x31":
            c.close()
            raise ConnectionError(f"unexpected SP header from the server: {head!r}")
    return c


def closed_by_peer(c, within):
    """True when the server closes c within `within` seconds."""
    c.settimeout(within)
    try:
        return c.recv(1) == b""
    except (socket.timeout, TimeoutError):
        return False
    except ConnectionResetError:
        return True


def not_root(name):
    """None as root; else (exit status, message) for a test that needs root
    (the sandbox engine does): 77, ctest's skip, with a loud SKIP banner, or
    1 with a FAIL line when CI=true (CI runs as root and forbids skips)."""
    if os.geteuid() == 0:
        return None
    msg = f"SKIP {name}: needs root (the sandbox engine does)"
    if os.environ.get("CI") == "true":
        return 1, msg.replace("SKIP", "FAIL") + " and CI=true forbids skipping"
    return 77, "*" * 70 + "\n" + msg + "\n" + "*" * 70


def clean_scratch(keep):
    """The servers' scratch directories (tests/conftest.py, at the session's
    end): named when kept (a failure), else
    removed. A server a test killed leaves its workspaces mounted, as a
    crash does: they are detached first. A server still running keeps its
    directory."""
    import shutil
    for srv in SERVERS:
        d = srv.tmp
        if keep or (srv.proc is not None and srv.proc.poll() is None):
            print(f"kept {d} (the server's log and state)")
            continue
        with open("/proc/mounts") as f:
            below = [line.split()[1] for line in f if line.split()[1].startswith(d + "/")]
        for m in sorted(below, key=len, reverse=True):
            subprocess.run(["umount", "-l", m], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)


class WireCaller:
    """One REQ peer over a raw TCP connection: call(method, request) sends
    one request envelope and returns (status, message, payload bytes).
    Messages come from the build's generated sandbox_pb2 (load_pb2). One
    call at a time per caller; open one per thread. key: a tenant's API key
    in every envelope (None: no credential); front_caller: set by hand when
    given (the server must not believe it from the network)."""

    def __init__(self, port, pb2, timeout=30, key=None, front_caller=None):
        self.pb2 = pb2
        self.key = key
        self.front = front_caller
        self.sock = sp_connect(port, timeout=timeout)
        self.timeout = timeout
        self.next_id = 1

    def call(self, method, request, timeout=None):
        import struct
        env = self.pb2.RequestEnvelope(method=f"/sandbox.v1.Sandbox/{method}",
                                       payload=request.SerializeToString())
        if self.key is not None:
            env.credential = self.key
        if self.front is not None:
            env.front_caller.CopyFrom(self.front)
        body = env.SerializeToString()
        rid = 0x80000000 | self.next_id
        self.next_id += 1
        self.sock.sendall(struct.pack(">QI", len(body) + 4, rid) + body)
        t = timeout or self.timeout
        n = struct.unpack(">Q", recv_exact(self.sock, 8, t))[0]
        data = recv_exact(self.sock, n, t)
        if struct.unpack(">I", data[:4])[0] != rid:
            raise ConnectionError("reply to another request")
        rep = self.pb2.ReplyEnvelope.FromString(data[4:])
        return rep.status, rep.message, rep.payload

    def close(self):
        self.sock.close()


STATUS_OK = 0


class RunCaller:
    """RunCode, StartRun/WatchRun/CancelRun and GetInfo over one connection,
    runs in runtime unless a call names another (keyword arguments are
    RunCodeRequest's fields)."""

    def __init__(self, server, pb, runtime="python"):
        self.pb = pb
        self.runtime = runtime
        self.w = WireCaller(server.port, pb, timeout=180)

    def run(self, code, runtime=None, **kw):
        """(status, message, RunCodeResponse or None)."""
        if runtime is None and not kw.get("language"):
            runtime = self.runtime
        st, msg, pl = self.w.call("RunCode", self.pb.RunCodeRequest(code=code, runtime=runtime or "",
                                                                    **kw))
        return st, msg, (self.pb.RunCodeResponse.FromString(pl) if st == STATUS_OK else None)

    def ok(self, code, runtime=None, **kw):
        """The response of a run that must be answered OK."""
        st, msg, r = self.run(code, runtime, **kw)
        if st != STATUS_OK:
            raise RuntimeError(f"RunCode ({runtime or kw.get('language') or self.runtime}): {st} {msg}")
        return r

    def info(self):
        st, msg, pl = self.w.call("GetInfo", self.pb.GetInfoRequest())
        if st != STATUS_OK:
            raise RuntimeError(f"GetInfo: {st} {msg}")
        return self.pb.GetInfoResponse.FromString(pl)

    def start(self, code, **kw):
        st, msg, pl = self.w.call("StartRun", self.pb.RunCodeRequest(code=code, runtime=self.runtime,
                                                                     **kw))
        return st, msg, (self.pb.StartRunResponse.FromString(pl).run_id if st == STATUS_OK else None)

    def cancel(self, run_id):
        return self.w.call("CancelRun", self.pb.CancelRunRequest(run_id=run_id))[:2]

    def outcome(self, run_id):
        """Watches a started run to its end: the WatchRunResponse."""
        while True:
            st, msg, pl = self.w.call("WatchRun", self.pb.WatchRunRequest(run_id=run_id,
                                                                          wait_ms=10000))
            if st != STATUS_OK:
                raise RuntimeError(f"WatchRun: {st} {msg}")
            r = self.pb.WatchRunResponse.FromString(pl)
            if r.complete:
                return r

    def close(self):
        self.w.close()


def load_pb2(bin_dir):
    """The generated sandbox_pb2 of the build whose binaries are in bin_dir."""
    import importlib.util
    path = os.path.join(bin_dir, "..", "python", "sandboxd", "sandbox_pb2.py")
    spec = importlib.util.spec_from_file_location("sandbox_pb2", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
