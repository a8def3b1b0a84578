#!/usr/bin/python3
"""End-to-end tests of sandboxd through its real clients, over tcp and ipc.

Each group starts its own server (own port, ipc path, state dir and uid
range, so groups may run in parallel) and drives it with sandbox-run,
sandbox-bench and svc-probe. Needs root; without it the group skips loudly
(exit 77), or fails when CI=true.
"""
import argparse
import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

FAILURES = []


def check(cond, what, detail=""):
    if cond:
        print(f"ok   {what}")
    else:
        print(f"FAIL {what} {detail}")
        FAILURES.append(what)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, bin_dir, uid_base, *extra):
        self.bin_dir = bin_dir
        self.tmp = tempfile.mkdtemp(prefix="sbx-svc-")
        os.chmod(self.tmp, 0o755)
        self.tcp = f"tcp://127.0.0.1:{free_port()}"
        self.ipc = f"ipc://{self.tmp}/sock"
        self.state = os.path.join(self.tmp, "state")
        self.log_path = os.path.join(self.tmp, "sandboxd.log")
        self.log = open(self.log_path, "wb")
        cmd = [f"{bin_dir}/sandboxd", "--listen", self.tcp, "--listen", self.ipc,
               "--state-dir", self.state, "--uid-base", str(uid_base), *extra]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 15
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sandboxd exited {self.proc.returncode}: {self.log_text()}")
            if "event=ready" in self.log_text():
                return
            time.sleep(0.05)
        raise RuntimeError("sandboxd not ready: " + self.log_text())

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def stop(self, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def run(self, script, *flags, url=None, stdin=None, timeout=60):
        """sandbox-run --json; returns (exit status, parsed json or None)."""
        path = os.path.join(self.tmp, f"script-{time.monotonic_ns()}.py")
        with open(path, "w") as f:
            f.write(script)
        cmd = [f"{self.bin_dir}/sandbox-run", "-e", url or self.tcp, "--json", *flags, path]
        p = subprocess.run(cmd, capture_output=True, timeout=timeout, input=stdin)
        try:
            return p.returncode, json.loads(p.stdout)
        except ValueError:
            return p.returncode, {"raw": p.stdout, "stderr": p.stderr}

    def probe(self, *args):
        p = subprocess.run([f"{self.bin_dir}/svc-probe", self.tcp, *args],
                           capture_output=True, timeout=30, text=True)
        return p.stdout.strip()


HELLO = 'print("hello")\n'


def group_transports(b):
    s = Server(b, 62000)
    try:
        for url in (s.tcp, s.ipc):
            rc, out = s.run(HELLO, url=url)
            check(rc == 0 and out.get("stdout") == "hello\n" and out.get("status") == "OK",
                  f"hello world over {url.split(':')[0]}", out)
        p = subprocess.run([f"{b}/sandbox-run", "-e", s.tcp, "--health"], capture_output=True,
                           text=True)
        check(p.returncode == 0 and p.stdout.strip() == "SERVING", "health is SERVING", p.stdout)
        # Plain mode passes bytes through untouched, exit status is the program's.
        path = os.path.join(s.tmp, "bytes.py")
        with open(path, "w") as f:
            f.write('import sys; sys.stdout.buffer.write(b"\\xff\\xfe ok"); '
                    'sys.stderr.write("err"); sys.exit(3)\n')
        p = subprocess.run([f"{b}/sandbox-run", "-e", s.tcp, path], capture_output=True)
        check(p.returncode == 3 and p.stdout == b"\xff\xfe ok" and p.stderr == b"err",
              "plain mode: raw bytes and exit status", (p.returncode, p.stdout, p.stderr))
        rc, out = s.run('import sys; sys.stdout.buffer.write(b"\\xff ok")\n')
        check(out.get("stdout") == "\ufffd ok", "json mode replaces invalid UTF-8", out)
        # stdin, args, files and env reach the program.
        data = os.path.join(s.tmp, "data.txt")
        with open(data, "w") as f:
            f.write("file-content")
        rc, out = s.run('import sys, os\nprint(sys.stdin.read(), sys.argv[1:], '
                        'open("mounts/sub/d.txt").read(), os.environ["GREETING"])\n',
                        "--stdin", "-", "--arg", "a b", "--file", f"{data}:sub/d.txt",
                        "--env", "GREETING=hi", stdin=b"in-data")
        check(out.get("stdout") == "in-data ['a b'] file-content hi\n",
              "stdin, args, files and env reach the program", out)
    finally:
        check(s.stop() == 0, "server exits 0 on SIGTERM")


def group_killed_by(b):
    s = Server(b, 62100)
    try:
        cases = [
            ("none", "print(1)\n", [], 0),
            ("timeout", "while True: pass\n", ["--timeout-ms", "1000"], 124),
            ("memory", "x = bytearray(512 << 20)\nprint(len(x))\n", ["--memory-mb", "64"], None),
            ("output_limit", 'import sys\nwhile True: sys.stdout.write("x" * 65536)\n',
             ["--output-kb", "16"], None),
            ("signal", "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", [], 139),
        ]
        for name, code, flags, want_rc in cases:
            rc, out = s.run(code, *flags)
            check(out.get("status") == "OK" and out.get("killed_by") == name,
                  f"killed_by {name}", out)
            if want_rc is not None:
                check(rc == want_rc, f"killed_by {name}: sandbox-run exits {want_rc}", rc)
        rc, out = s.run('import sys\nsys.stdout.write("y" * 5000)\n', "--output-kb", "1")
        check(out.get("stdout_truncated") is True and len(out.get("stdout", "")) <= 1024,
              "stdout truncated at the output limit", {k: out.get(k) for k in
                                                        ("killed_by", "stdout_truncated")})
        rc, out = s.run("import sys\nsys.exit(7)\n")
        check(rc == 7 and out.get("exit_code") == 7, "exit code passes through", out)
    finally:
        s.stop()


def group_invalid_argument(b):
    s = Server(b, 62200, "--max-files", "2", "--max-timeout-ms", "10000")
    try:
        f = os.path.join(s.tmp, "f.txt")
        open(f, "w").write("x")
        cases = [
            ("negative timeout", ["--timeout-ms", "-1"], "limits.timeout_ms"),
            ("timeout above max", ["--timeout-ms", "10001"], "limits.timeout_ms"),
            ("negative cpu time", ["--cpu-time-ms", "-5"], "limits.cpu_time_ms"),
            ("memory too small", ["--memory-mb", "1"], "limits.memory_bytes"),
            ("memory above max", ["--memory-mb", "4096"], "limits.memory_bytes"),
            ("negative output", ["--output-kb", "-1"], "limits.output_bytes"),
            ("processes above max", ["--max-processes", "100000"], "limits.max_processes"),
            ("bad run id", ["--run-id", "../etc"], "run_id"),
            ("file path escapes", ["--file", f"{f}:../x"], "files[0].path"),
            ("absolute file path", ["--file", f"{f}:/etc/x"], "files[0].path"),
            ("empty component", ["--file", f"{f}:a//b"], "files[0].path"),
            ("too many files", ["--file", f"{f}:a", "--file", f"{f}:b", "--file", f"{f}:c"],
             "files"),
            ("bad env key", ["--env", "1BAD=x"], "env"),
        ]
        for what, flags, field in cases:
            rc, out = s.run(HELLO, *flags)
            check(rc == 125 and out.get("status") == "INVALID_ARGUMENT"
                  and field in out.get("error", ""), f"INVALID_ARGUMENT: {what}", out)
        rc, out = s.run("")
        check(out.get("status") == "INVALID_ARGUMENT" and "code" in out.get("error", ""),
              "INVALID_ARGUMENT: empty code", out)
        rc, out = s.run(HELLO, "--session", "../abc")
        check(out.get("status") == "INVALID_ARGUMENT" and "session_id" in out.get("error", ""),
              "INVALID_ARGUMENT: bad session id", out)
        rc, out = s.run(HELLO)
        check(out.get("stdout") == "hello\n", "server still serves after bad requests", out)
        runs = s.log_text().count("event=run ")
        check(runs == 1, "nothing ran for the refused requests", runs)
    finally:
        s.stop()


def group_resource_exhausted(b):
    s = Server(b, 62300, "--workers", "1", "--queue", "1")
    try:
        script = os.path.join(s.tmp, "sleep.py")
        open(script, "w").write("import time\ntime.sleep(0.5)\nprint('done')\n")
        p = subprocess.run([f"{b}/sandbox-bench", "-e", s.tcp, "--concurrency", "8",
                            "--requests", "8", "--json", script],
                           capture_output=True, text=True, timeout=60)
        out = json.loads(p.stdout)
        st = out["status"]
        check(st.get("RESOURCE_EXHAUSTED", 0) >= 1, "burst gets RESOURCE_EXHAUSTED", st)
        check(st.get("OK", 0) >= 2, "running and queued calls complete", st)
        check(st.get("OK", 0) + st.get("RESOURCE_EXHAUSTED", 0) == 8, "every call answered", st)
        runs = s.log_text().count("event=run ")
        check(runs == st.get("OK", 0), "nothing ran for RESOURCE_EXHAUSTED", (runs, st))
        # The client library retries RESOURCE_EXHAUSTED with backoff.
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            outs = list(ex.map(lambda i: s.run("import time\ntime.sleep(0.2)\nprint('r')\n",
                                               "--retries", "20"), range(4)))
        check(all(o.get("stdout") == "r\n" for _, o in outs), "sandbox-run retries until it runs",
              outs)
    finally:
        s.stop()


def group_bad_messages(b):
    s = Server(b, 62400, "--max-message-bytes", "65536")
    try:
        r = s.probe("garbage")
        check(r.startswith("INVALID_ARGUMENT"), "garbage bytes: INVALID_ARGUMENT", r)
        r = s.probe("badpayload")
        check(r.startswith("INVALID_ARGUMENT"), "undecodable payload: INVALID_ARGUMENT", r)
        r = s.probe("method", "/sandbox.v1.Sandbox/Nope")
        check(r.startswith("UNIMPLEMENTED"), "unknown method: UNIMPLEMENTED", r)
        r = s.probe("method", "/other.Service/RunCode")
        check(r.startswith("UNIMPLEMENTED"), "other service: UNIMPLEMENTED", r)
        r = s.probe("method", "")
        check(r.startswith("UNIMPLEMENTED"), "empty method: UNIMPLEMENTED", r)
        r = s.probe("method", "/sandbox.v1.Sandbox/CloseSession")
        check(r.startswith("INVALID_ARGUMENT") and "session_id" in r,
              "CloseSession without a session id: INVALID_ARGUMENT", r)
        r = s.probe("oversize", str(1 << 20))
        check(r.startswith("NO_REPLY"), "oversized message is dropped, not answered", r)
        rc, out = s.run(HELLO)
        check(out.get("stdout") == "hello\n", "server answers the next good request", out)
        big = "x = '" + "a" * 70000 + "'\nprint(len(x))\n"
        rc, out = s.run(big, timeout=20)
        check(out.get("status") in ("DEADLINE_EXCEEDED", "UNAVAILABLE"), "request over "
              "max-message-bytes gets no run", {k: out.get(k) for k in ("status", "error")})
        check(s.proc.poll() is None, "server still running")
    finally:
        s.stop()


def group_concurrency(b):
    s = Server(b, 62500, "--workers", "2", "--queue", "64")
    try:
        def one(i):
            return i, s.run("import sys\nprint(sys.argv[1])\n", "--arg", str(i),
                            url=s.tcp if i % 2 else s.ipc)
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            results = list(ex.map(one, range(32)))
        wrong = [(i, out) for i, (rc, out) in results if out.get("stdout") != f"{i}\n"]
        check(not wrong, "32 concurrent clients each get their own reply", wrong[:3])
        ids = {out.get("run_id") for _, (rc, out) in results}
        check(len(ids) == 32, "every run has its own run_id", len(ids))
    finally:
        s.stop()


def group_drain(b):
    s = Server(b, 62600, "--workers", "1")
    slow = os.path.join(s.tmp, "slow.py")
    open(slow, "w").write("import time\ntime.sleep(1.5)\nprint('finished')\n")
    p = subprocess.Popen([f"{b}/sandbox-run", "-e", s.tcp, "--json", slow],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 10
    slot0 = os.path.join(s.state, "workspaces", "slot-0")
    while time.time() < deadline and not (os.path.isdir(slot0) and os.listdir(slot0)):
        time.sleep(0.02)
    time.sleep(0.2)
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    rc2, out2 = s.run(HELLO, "--retries", "0")
    out, _ = p.communicate(timeout=30)
    res = json.loads(out)
    check(res.get("stdout") == "finished\n", "the running call finishes during drain", res)
    check(out2.get("status") in ("UNAVAILABLE",) or rc2 == 125,
          "new work is refused while draining", out2)
    code = s.proc.wait(30)
    check(code == 0, "sandboxd exits 0 after SIGTERM", code)
    left = os.listdir(os.path.join(s.state, "workspaces"))
    check(not left, "no workspace left behind", left)
    ps = subprocess.run(["ps", "-e", "-o", "uid=,pid=,comm="], capture_output=True, text=True)
    stray = [l for l in ps.stdout.splitlines() if 62600 <= int(l.split()[0]) < 62700]
    check(not stray, "no sandbox process left behind", stray)


def group_feedback_and_info(b):
    s = Server(b, 62700)
    try:
        rc, out = s.run("while True: pass\n", "--timeout-ms", "1000")
        check(any("timed out after 1 s" in l for l in out.get("feedback", [])),
              "feedback says timed out", out.get("feedback"))
        rc, out = s.run('print("z" * 4000)\n', "--output-kb", "1")
        check(any("1 KiB" in l and ("truncated" in l or "output limit" in l)
                  for l in out.get("feedback", [])),
              "feedback names the output limit", out.get("feedback"))
        p = subprocess.run([f"{b}/sandbox-run", "-e", s.tcp, "--info"], capture_output=True,
                           text=True)
        info = json.loads(p.stdout)
        check(info.get("workers", 0) >= 1 and info.get("runtimes") == ["python"]
              and info["isolation"].get("backend") and info["isolation"].get("namespaces")
              and info["default_limits"]["timeout_ms"] == 5000
              and info["max_limits"]["timeout_ms"] == 60000, "GetInfo reports isolation, limits",
              info)
        check(info.get("runs_total") == 2 and info.get("requests_total") >= 3,
              "GetInfo counters count requests and runs", info)
        check(len([l for l in s.log_text().splitlines() if "event=run " in l
                   and "run_id=" in l and "killed_by=" in l and "exit_code=" in l
                   and "duration_ms=" in l]) == 2, "one structured log line per run")
    finally:
        s.stop()


GROUPS = {name[len("group_"):]: fn for name, fn in globals().items() if name.startswith("group_")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("group", choices=sorted(GROUPS))
    a = ap.parse_args()
    if os.geteuid() != 0:
        msg = f"SKIP service_{a.group}: needs root (the sandbox engine does)"
        if os.environ.get("CI") == "true":
            print(msg.replace("SKIP", "FAIL") + " and CI=true forbids skipping")
            return 1
        print("*" * 70 + "\n" + msg + "\n" + "*" * 70)
        return 77
    try:
        GROUPS[a.group](a.bin_dir)
    except Exception as e:  # a crash is a failure, with its reason
        import traceback
        traceback.print_exc()
        FAILURES.append(f"exception: {e}")
    print(f"{len(FAILURES)} failure(s)" if FAILURES else "all passed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
