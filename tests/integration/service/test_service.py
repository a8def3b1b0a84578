"""End-to-end tests of sandboxd through its real clients, over tcp and ipc.

Each test (one ctest entry, service_<name>) starts its own server (own
port, ipc path, state dir and uid range, so tests may run in parallel) and
drives it with sandbox-run, sandbox-bench and svc-probe. Needs root;
without it the test skips loudly (exit 77), or fails when CI=true
(tests/conftest.py).
"""
import concurrent.futures
import http.server
import json
import os
import signal
import struct
import subprocess
import tempfile
import threading
import time

from lib.harness import Server, allocate_uids, closed_by_peer, free_port, sp_connect, wait_log


HELLO = 'print("hello")\n'


def test_transports(bin_dir, check):
    s = Server(bin_dir)
    try:
        for url in (s.tcp, s.ipc):
            rc, out = s.run(HELLO, url=url)
            check(rc == 0 and out.get("stdout") == "hello\n" and out.get("status") == "OK",
                  f"hello world over {url.split(':')[0]}", out)
        p = subprocess.run([f"{bin_dir}/sandbox-run", "-e", s.tcp, "--health"], capture_output=True,
                           text=True)
        check(p.returncode == 0 and p.stdout.strip() == "SERVING", "health is SERVING", p.stdout)
        # Plain mode passes bytes through untouched, exit status is the program's.
        path = os.path.join(s.tmp, "bytes.py")
        with open(path, "w") as f:
            f.write('import sys; sys.stdout.buffer.write(b"\\xff\\xfe ok"); '
                    'sys.stderr.write("err"); sys.exit(3)\n')
        p = subprocess.run([f"{bin_dir}/sandbox-run", "-e", s.tcp, path], capture_output=True)
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


def test_killed_by(bin_dir, check):
    s = Server(bin_dir)
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


def test_invalid_argument(bin_dir, check):
    s = Server(bin_dir, "--max-files", "2", "--max-timeout-ms", "10000")
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


def test_resource_exhausted(bin_dir, check):
    s = Server(bin_dir, "--workers", "1", "--queue", "1")
    try:
        script = os.path.join(s.tmp, "sleep.py")
        open(script, "w").write("import time\ntime.sleep(0.5)\nprint('done')\n")
        # Occupy the one worker first, and wait until GetInfo shows it
        # running, so that the burst meets a busy worker and a one-slot queue
        # however slowly the machine starts processes.
        box = {}
        long_call = threading.Thread(target=lambda: box.update(
            long=s.run("import time\ntime.sleep(3)\nprint('long')\n")[1]))
        long_call.start()
        running = 0
        for _ in range(100):
            info = json.loads(subprocess.run([f"{bin_dir}/sandbox-run", "-e", s.tcp, "--info"],
                                             capture_output=True, text=True).stdout or "{}")
            running = info.get("running", 0)
            if running == 1:
                break
            time.sleep(0.05)
        check(running == 1, "the first call is running before the burst", running)
        p = subprocess.run([f"{bin_dir}/sandbox-bench", "-e", s.tcp, "--concurrency", "8",
                            "--requests", "8", "--json", script],
                           capture_output=True, text=True, timeout=60)
        long_call.join()
        out = json.loads(p.stdout)
        st = out["status"]
        check(box.get("long", {}).get("stdout") == "long\n", "the running call completes", box)
        check(st.get("OK", 0) == 1, "the queued call completes, exactly one fits the queue", st)
        check(st.get("RESOURCE_EXHAUSTED", 0) == 7, "the rest of the burst: RESOURCE_EXHAUSTED", st)
        runs = s.log_text().count("event=run ")
        check(runs == 2, "nothing ran for RESOURCE_EXHAUSTED", (runs, st))
        # The client library retries RESOURCE_EXHAUSTED with backoff.
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            outs = list(ex.map(lambda i: s.run("import time\ntime.sleep(0.2)\nprint('r')\n",
                                               "--retries", "20"), range(4)))
        check(all(o.get("stdout") == "r\n" for _, o in outs), "sandbox-run retries until it runs",
              outs)
    finally:
        s.stop()
    # --queue 0: no call waits, but an idle worker still takes one.
    s = Server(bin_dir, "--workers", "1", "--queue", "0")
    try:
        rc, out = s.run(HELLO, "--retries", "0")
        check(out.get("stdout") == "hello\n", "--queue 0: an idle worker takes the call", out)
        slow = threading.Thread(target=lambda: s.run("import time\ntime.sleep(2)\n"))
        slow.start()
        wait_for_slot_busy(s)
        rc, out = s.run(HELLO, "--retries", "0")
        check(out.get("status") == "RESOURCE_EXHAUSTED",
              "--queue 0: with the worker busy the next call is RESOURCE_EXHAUSTED", out)
        slow.join()
    finally:
        s.stop()


def test_bad_messages(bin_dir, check):
    s = Server(bin_dir, "--max-message-bytes", "65536")
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
        check(r.startswith("INVALID_ARGUMENT") and "no method" in r,
              "envelope without a method: INVALID_ARGUMENT", r)
        r = s.probe("empty")
        check(r.startswith("INVALID_ARGUMENT") and "no method" in r,
              "empty message: INVALID_ARGUMENT", r)
        r = s.probe("method", "/sandbox.v1.Sandbox/CloseSession")
        check(r.startswith("INVALID_ARGUMENT") and "session_id" in r,
              "CloseSession without a session id: INVALID_ARGUMENT", r)
        r = s.probe("oversize", str(1 << 20))
        check(r.startswith("NO_REPLY"), "oversized message is dropped, not answered", r)
        rc, out = s.run(HELLO)
        check(out.get("stdout") == "hello\n", "server answers the next good request", out)
        big = "x = '" + "a" * 70000 + "'\nprint(len(x))\n"
        # The client learns the server's cap (GetInfo) before a request that
        # could exceed it, and refuses clearly instead of timing out.
        t0 = time.monotonic()
        rc, out = s.run(big, timeout=20)
        check(out.get("status") == "INVALID_ARGUMENT"
              and "more than the 65536 the server accepts" in out.get("error", "")
              and "nothing was sent" in out.get("error", "") and time.monotonic() - t0 < 10,
              "a request over the server's max-message-bytes is refused by the client at once",
              {k: out.get(k) for k in ("status", "error")})
        # And its own cap, below the server's.
        rc, out = s.run("x = '" + "a" * 20000 + "'\n", "--max-request-bytes", "16384", timeout=20)
        check(out.get("status") == "INVALID_ARGUMENT" and "client's cap of 16384" in out.get(
              "error", "") and "nothing was sent" in out.get("error", ""),
              "the client refuses a request over --max-request-bytes", out)
        check(s.log_text().count("event=run ") == 1, "only the good request ran",
              s.log_text().count("event=run "))
        check(s.proc.poll() is None, "server still running")
    finally:
        s.stop()


def test_concurrency(bin_dir, check):
    s = Server(bin_dir, "--workers", "2", "--queue", "64")
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


def test_drain(bin_dir, check):
    s = Server(bin_dir, "--workers", "1")
    slow = os.path.join(s.tmp, "slow.py")
    open(slow, "w").write("import time\ntime.sleep(1.5)\nprint('finished')\n")
    p = subprocess.Popen([f"{bin_dir}/sandbox-run", "-e", s.tcp, "--json", slow],
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
    stray = [l for l in ps.stdout.splitlines()
             if s.uid_base <= int(l.split()[0]) < s.uid_base + s.uid_count]
    check(not stray, "no sandbox process left behind", stray)


def test_feedback_and_info(bin_dir, check):
    s = Server(bin_dir)
    try:
        rc, out = s.run("while True: pass\n", "--timeout-ms", "1000")
        check(any("timed out after 1 s" in l for l in out.get("feedback", [])),
              "feedback says timed out", out.get("feedback"))
        rc, out = s.run('print("z" * 4000)\n', "--output-kb", "1")
        check(any("1 KiB" in l and ("truncated" in l or "output limit" in l)
                  for l in out.get("feedback", [])),
              "feedback names the output limit", out.get("feedback"))
        p = subprocess.run([f"{bin_dir}/sandbox-run", "-e", s.tcp, "--info"], capture_output=True,
                           text=True)
        info = json.loads(p.stdout)
        check(info.get("workers", 0) >= 1 and info.get("runtimes", [None])[0] == "python"
              and info["isolation"].get("backend") and info["isolation"].get("namespaces")
              and info["default_limits"]["timeout_ms"] == 5000
              and info["max_limits"]["timeout_ms"] == 60000, "GetInfo reports isolation, limits",
              info)
        # This host kind (hybrid) mounts the v1 cpu controller; v2 is checked in the VM.
        check(info["isolation"].get("cpu_share_per_slot") is
              (info["isolation"]["backend"] != "rlimit"), "GetInfo says each slot has a CPU share",
              info["isolation"])
        check(info.get("runs_total") == 2 and info.get("requests_total") >= 3,
              "GetInfo counters count requests and runs", info)
        check(len([l for l in s.log_text().splitlines() if "event=run " in l
                   and "run_id=" in l and "killed_by=" in l and "exit_code=" in l
                   and "duration_ms=" in l]) == 2, "one structured log line per run")
    finally:
        s.stop()


# ---- workspaces, sessions, input files, artifacts (docs/WORKSPACES.md) ----

def sbx(s, *args, timeout=60):
    """sandbox-run --json with session/file commands; returns parsed json."""
    p = subprocess.run([f"{s.bin_dir}/sandbox-run", "-e", s.tcp, "--json", *args],
                       capture_output=True, timeout=timeout)
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {"raw": p.stdout, "stderr": p.stderr, "rc": p.returncode}


def runs_total(s):
    p = subprocess.run([f"{s.bin_dir}/sandbox-run", "-e", s.tcp, "--info"], capture_output=True,
                       text=True)
    return json.loads(p.stdout)["runs_total"]


def workspace_mounts(state):
    """Mount points under state (the server's workspaces)."""
    real = os.path.realpath(state)
    with open("/proc/self/mountinfo") as f:
        return [l.split()[4] for l in f if l.split()[4].startswith(real + "/")]


def test_sessions(bin_dir, check):
    s = Server(bin_dir, "--workers", "2", "--max-sessions", "3")
    try:
        rc, out = s.run("open('notes.txt', 'w').write('kept')\nprint('wrote')\n",
                        "--session", "alpha")
        check(out.get("status") == "OK" and out.get("session_created") is True
              and any("is new" in l for l in out.get("feedback", [])),
              "first run creates the session, feedback says it is new", out)
        # Runs land on both slots (different uids): the files stay usable.
        outs = [s.run("print(open('notes.txt').read())\nopen('notes.txt', 'a').write('+')\n",
                      "--session", "alpha")[1] for _ in range(4)]
        check([o.get("stdout") for o in outs] == ["kept\n", "kept+\n", "kept++\n", "kept+++\n"]
              and not any(o.get("session_created") for o in outs),
              "a file written in one run is there (and writable) in the next", outs)
        # Another session sees nothing of alpha's, anywhere it can look.
        rc, out = s.run("import os\nfound = []\nfor d, subs, fs in os.walk('/'):\n"
                        "    if d == '/':\n        subs[:] = [x for x in subs if x not in "
                        "('usr', 'proc', 'lib', 'lib64', 'bin', 'sbin')]\n"
                        "    found += [os.path.join(d, f) for f in fs if f == 'notes.txt']\n"
                        "print(found)\n", "--session", "beta")
        check(out.get("stdout") == "[]\n" and out.get("session_created") is True,
              "one session never sees another's files", out)
        # ListFiles / ReadFile.
        ls = sbx(s, "--session", "alpha", "--list-files", ".")
        names = {e["name"]: e for e in ls.get("entries", [])}
        check("notes.txt" in names and names["notes.txt"]["type"] == "file"
              and names["notes.txt"]["size"] == 8 and names.get("output", {}).get("type")
              == "directory", "ListFiles lists the session's workspace", ls)
        rd = sbx(s, "--session", "alpha", "--read-file", "notes.txt", "--offset", "2",
                 "--length", "3")
        check(rd.get("content") == "pt+" and rd.get("size") == 8 and rd.get("eof") is False,
              "ReadFile reads a range of a session file", rd)
        s.run("import os\nos.symlink('/etc/shadow', 'shadow')\nos.symlink('/', 'root')\n"
              "os.mkfifo('fifo')\n", "--session", "alpha")
        for path, want in (("shadow", "FAILED_PRECONDITION"), ("root/etc/passwd",
                           "FAILED_PRECONDITION"), ("fifo", "FAILED_PRECONDITION"),
                           ("../x", "INVALID_ARGUMENT"), ("/etc/passwd", "INVALID_ARGUMENT"),
                           ("missing.txt", "NOT_FOUND")):
            rd = sbx(s, "--session", "alpha", "--read-file", path, timeout=10)
            check(rd.get("status") == want, f"ReadFile {path}: {want}", rd)
        ls = sbx(s, "--session", "alpha", "--list-files", "root")
        check(ls.get("status") == "FAILED_PRECONDITION", "ListFiles never follows a symlink", ls)
        rd = sbx(s, "--session", "nosuch", "--read-file", "notes.txt")
        check(rd.get("status") == "NOT_FOUND", "ReadFile of an unknown session: NOT_FOUND", rd)
        # Two runs of one session at once: the second is refused.
        slow = os.path.join(s.tmp, "slow.py")
        open(slow, "w").write("import time\nopen('started', 'w').close()\ntime.sleep(2)\n"
                              "print('slow done')\n")
        p = subprocess.Popen([f"{bin_dir}/sandbox-run", "-e", s.tcp, "--json", "--session", "alpha",
                              slow], stdout=subprocess.PIPE)
        deadline, started = time.time() + 10, False
        while time.time() < deadline and not started:
            started = sbx(s, "--session", "alpha", "--read-file", "started").get("status") == "OK"
            time.sleep(0.05)
        check(started, "the slow run started (seen through ReadFile while it runs)")
        before = runs_total(s)
        rc, out = s.run("print('second')\n", "--session", "alpha")
        check(out.get("status") == "FAILED_PRECONDITION" and "alpha" in out.get("error", ""),
              "a second concurrent run of a session: FAILED_PRECONDITION", out)
        cl = sbx(s, "--close-session", "alpha")
        check(cl.get("status") == "FAILED_PRECONDITION", "CloseSession while it runs is refused",
              cl)
        first = json.loads(p.communicate(timeout=30)[0])
        check(first.get("stdout") == "slow done\n" and runs_total(s) == before + 1,
              "the first run finished; the refused one never ran", first)
        # The quota follows a run that asks for one; a run that does not
        # keeps it; shrinking below what the files use is refused.
        size = "import os\nst = os.statvfs('.')\nprint(st.f_blocks * st.f_frsize // 2**20)\n"
        rc, out = s.run("open('big.bin', 'wb').write(b'x' * (3 << 20))\n" + size,
                        "--session", "gamma", "--disk-mb", "4")
        check(out.get("stdout") == "4\n", "a new session's quota is its first run's disk_bytes", out)
        rc, out = s.run("open('more.bin', 'wb').write(b'y' * (3 << 20))\n" + size,
                        "--session", "gamma", "--disk-mb", "8")
        check(out.get("status") == "OK" and out.get("stdout") == "8\n",
              "a later run asking for more gets it (3 MiB more written)", out)
        rc, out = s.run(size, "--session", "gamma")
        check(out.get("stdout") == "8\n", "a run without disk_bytes keeps the session's quota", out)
        before = runs_total(s)
        rc, out = s.run(size, "--session", "gamma", "--disk-mb", "2")
        check(out.get("status") == "FAILED_PRECONDITION" and runs_total(s) == before
              and out.get("error", "").startswith("workspace: limits.disk_bytes: the session's "
                                                  "files already use ")
              and out.get("error", "").endswith("this run asks for; ask for more, or remove "
                                                "files first; nothing ran"),
              "shrinking below what the session's files use: FAILED_PRECONDITION, nothing ran "
              "(said once)", out)
        rc, out = s.run("import os\nos.remove('more.bin')\nos.remove('big.bin')\n", "--session",
                        "gamma")
        rc, out = s.run(size, "--session", "gamma", "--disk-mb", "2")
        check(out.get("stdout") == "2\n", "after removing files it may shrink", out)
        sbx(s, "--close-session", "gamma")
        # Close: files gone, the next run with that id starts empty.
        cl = sbx(s, "--close-session", "alpha")
        check(cl.get("status") == "OK", "CloseSession", cl)
        rd = sbx(s, "--session", "alpha", "--read-file", "notes.txt")
        check(rd.get("status") == "NOT_FOUND", "a closed session's files are gone", rd)
        cl = sbx(s, "--close-session", "alpha")
        check(cl.get("status") == "NOT_FOUND", "CloseSession of an unknown session: NOT_FOUND", cl)
        rc, out = s.run("import os\nprint(os.path.exists('notes.txt'))\n", "--session", "alpha")
        check(out.get("stdout") == "False\n" and out.get("session_created") is True
              and any("is new" in l for l in out.get("feedback", [])),
              "after close the same id starts empty, and feedback says it is new", out)
        time.sleep(0.6)  # the reaper's tick
        check(len(workspace_mounts(s.state)) == 2 + 2,
              "a closed session's tmpfs is detached (2 slots + alpha + beta left)",
              workspace_mounts(s.state))
        # Cap 3: alpha, beta, gamma exist; delta evicts the least recently used (beta).
        s.run("open('g', 'w').write('g')\n", "--session", "gamma")
        s.run("print(1)\n", "--session", "alpha")
        rc, out = s.run("print(1)\n", "--session", "delta")
        rd = sbx(s, "--session", "gamma", "--read-file", "g")
        ls = sbx(s, "--session", "beta", "--list-files", ".")
        check(out.get("session_created") is True and rd.get("content") == "g"
              and ls.get("status") == "NOT_FOUND",
              "at the cap the least recently used session is evicted", (rd, ls))
        rc, out = s.run("print(1)\n", "--session", "beta")
        check(out.get("session_created") is True, "an evicted session starts anew", out)
        info = json.loads(subprocess.run([f"{bin_dir}/sandbox-run", "-e", s.tcp, "--info"],
                                         capture_output=True, text=True).stdout)
        check(info.get("sessions") == 3, "GetInfo counts the live sessions (the cap)", info)
        # Bad ids.
        for bad in ("../x", "a/b", "x" * 65, "caf\u00e9"):
            rc, out = s.run(HELLO, "--session", bad)
            check(out.get("status") == "INVALID_ARGUMENT", f"session id {bad[:10]!r} refused", out)
    finally:
        check(s.stop() == 0, "server exits 0")
        check(workspace_mounts(s.state) == [] and os.listdir(os.path.join(s.state, "workspaces"))
              == [], "no workspace mount or directory left after exit")


def test_session_expiry_and_crash(bin_dir, check):
    s = Server(bin_dir, "--workers", "1", "--session-ttl-s", "1")
    try:
        s.run("open('f', 'w').write('x')\n", "--session", "short")
        rd = sbx(s, "--session", "short", "--read-file", "f")
        check(rd.get("content") == "x", "session file readable before the TTL", rd)
        time.sleep(2.0)
        rd = sbx(s, "--session", "short", "--read-file", "f")
        check(rd.get("status") == "NOT_FOUND", "an idle session ends after its TTL", rd)
        check(len(workspace_mounts(s.state)) == 1, "its tmpfs is detached",
              workspace_mounts(s.state))
        rc, out = s.run("import os\nprint(os.listdir('.'))\n", "--session", "short")
        check(out.get("session_created") is True and "'f'" not in out.get("stdout", ""),
              "an expired session starts anew", out)
        # A crash leaves mounts; the next server on the same state dir removes them.
        s.proc.kill()
        s.proc.wait()
        check(len(workspace_mounts(s.state)) == 2, "a killed server leaves its mounts behind",
              workspace_mounts(s.state))
        s2 = Server(bin_dir, "--workers", "1", "--state-dir", s.state, uid_base=s.uid_base)
        try:
            mounts = workspace_mounts(s.state)
            check(len(mounts) == 1 and mounts[0].endswith("/slot-0")
                  and sorted(os.listdir(os.path.join(s.state, "workspaces"))) == ["slot-0"],
                  "the next server detaches and removes a crashed one's workspaces", mounts)
            check("stale_workspaces" in s2.log_text(), "and logs it")
        finally:
            s2.stop()
    finally:
        s.stop()




def start_run(s, script_text, *flags):
    path = os.path.join(s.tmp, f"bg-{time.monotonic_ns()}.py")
    with open(path, "w") as f:
        f.write(script_text)
    return subprocess.Popen([f"{s.bin_dir}/sandbox-run", "-e", s.tcp, "--json", *flags, path],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)



def test_connection_faults(bin_dir, check):
    """At-most-once as the client reports it, idle and capped connections."""
    s = Server(bin_dir, "--workers", "1", "--idle-timeout-ms", "600", "--max-connections", "4")
    try:
        # The server is killed while the call runs: the client cannot know
        # whether it ran, so it must not say UNAVAILABLE ("nothing ran").
        p = start_run(s, "import time\nprint('started', flush=True)\ntime.sleep(5)\n")
        check(wait_log(s, "event=ready") and wait_for_slot_busy(s), "a call is running")
        s.proc.kill()
        out, err = p.communicate(timeout=30)
        res = json.loads(out) if out else {}
        check(p.returncode == 125 and res.get("status") == "UNKNOWN"
              and "may or may not have run" in res.get("error", ""),
              "a connection broken mid-call is UNKNOWN, never UNAVAILABLE", (res, err))
        s.proc.wait()
    finally:
        s.stop()
    s = Server(bin_dir, "--workers", "1", "--idle-timeout-ms", "600", "--max-connections", "4")
    try:
        # Half a frame, or nothing after the handshake: closed once idle.
        half = sp_connect(s.port)
        half.sendall(struct.pack(">Q", 100) + b"\x80\x00\x00\x01partial")
        quiet = sp_connect(s.port)
        check(closed_by_peer(half, 10), "a connection that sent half a message is closed when idle")
        check(closed_by_peer(quiet, 10), "a connection that sent nothing is closed when idle")
        check(wait_log(s, "event=idle_connections_closed", 5), "and the server logs it")
        # A call that runs longer than the idle timeout keeps its connection.
        rc, out = s.run("import time\ntime.sleep(1.5)\nprint('done')\n")
        check(out.get("stdout") == "done\n", "a call longer than the idle timeout is answered",
              out)
        # Past --max-connections the next connection is closed at once, logged.
        held = [sp_connect(s.port) for _ in range(4)]
        extra = sp_connect(s.port)
        check(closed_by_peer(extra, 5), "a connection past --max-connections is closed")
        check(wait_log(s, "event=connection_refused") and "max_connections=4" in s.log_text(),
              "the refusal is logged with the cap")
        for c in held:
            c.close()
        time.sleep(0.3)
        rc, out = s.run(HELLO)
        check(out.get("stdout") == "hello\n", "the server serves again once connections close",
              out)
        check(s.proc.poll() is None, "server still running")
    finally:
        s.stop()


def wait_for_slot_busy(s, timeout=10):
    """The slot's workspace holds main.py while a session-less run is in it."""
    slot0 = os.path.join(s.state, "workspaces", "slot-0")
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.isdir(slot0) and os.listdir(slot0):
            time.sleep(0.2)
            return True
        time.sleep(0.02)
    return False


def test_queue_faults(bin_dir, check):
    """SIGTERM answers queued calls at once; a queued call whose client left
    is dropped before it runs."""
    s = Server(bin_dir, "--workers", "1", "--queue", "8")
    try:
        first = start_run(s, "import time\ntime.sleep(2)\nprint('first')\n")
        check(wait_for_slot_busy(s), "the only worker is busy")
        gone = start_run(s, "print('must not run')\n", "--run-id", "client-gone", "--retries", "0")
        time.sleep(0.3)
        gone.kill()
        gone.wait()
        out, _ = first.communicate(timeout=30)
        check(json.loads(out).get("stdout") == "first\n", "the running call finishes")
        check(wait_log(s, "event=dropped") and "reason=client_gone" in s.log_text()
              and "run_id=client-gone" not in s.log_text(),
              "the queued call of a client that went away never ran", s.log_text()[-1500:])
        # SIGTERM with calls queued behind a running one: the queued ones are
        # answered UNAVAILABLE before the running one finishes.
        running = start_run(s, "import time\ntime.sleep(3)\nprint('last')\n")
        check(wait_for_slot_busy(s), "the worker is busy again")
        queued = [start_run(s, "print('queued')\n", "--retries", "0") for _ in range(3)]
        time.sleep(0.5)
        s.proc.send_signal(signal.SIGTERM)
        answers = []
        for q in queued:
            out, _ = q.communicate(timeout=30)
            answers.append(json.loads(out).get("status") if out else None)
        still_running = running.poll() is None
        out, _ = running.communicate(timeout=30)
        check(answers == ["UNAVAILABLE"] * 3 and still_running,
              "queued calls are answered UNAVAILABLE while the running one still runs",
              (answers, still_running))
        check(json.loads(out).get("stdout") == "last\n", "the running call finishes the drain")
        check(s.proc.wait(30) == 0, "sandboxd exits 0")
    finally:
        s.stop()


def engine_groups(s):
    """The session memory groups of s's engine (cgroup v1 memory or v2)."""
    found = []
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        if os.path.basename(root) == f"sandboxd.{s.proc.pid}":
            found += [d for d in dirs if d.startswith("group-")]
            dirs[:] = []
    return found


def test_session_memory(bin_dir, check):
    """A session's files count against that session's runs only: on one
    worker, a tenant's 100 MiB of session files must not shrink the next
    tenant's memory or break a run asking for less memory than they take."""
    s = Server(bin_dir, "--workers", "1")
    alloc = "b = bytearray(90 << 20)\nprint('allocated')\n"
    try:
        rc, out = s.run("open('big', 'wb').write(b'x' * (100 << 20))\nprint('wrote')\n",
                        "--session", "tenant-a", "--disk-mb", "200", "--memory-mb", "256")
        check(out.get("stdout") == "wrote\n", "a session run writes 100 MiB of files", out)
        check(len(engine_groups(s)) == 1, "the session has a memory group", engine_groups(s))
        rc, out = s.run(alloc)
        check(out.get("killed_by") == "none" and out.get("stdout") == "allocated\n",
              "another run on the same worker still has its whole 128 MiB", out)
        rc, out = s.run("print('small')\n", "--memory-mb", "64")
        check(out.get("status") == "OK" and out.get("stdout") == "small\n",
              "a run asking for less memory than the session's files is not an INTERNAL error",
              out)
        rc, out = s.run(alloc, "--session", "tenant-a", "--memory-mb", "160")
        check(out.get("killed_by") == "memory",
              "the session's files count against its own runs (100 + 90 MiB > 160 MiB)", out)
        rc, out = s.run(alloc, "--session", "tenant-a", "--memory-mb", "256")
        check(out.get("killed_by") == "none" and out.get("peak_memory_bytes", 0) >= 190 << 20,
              "with room for both it runs, and its peak counts the files", out)
        rc, out = s.run("print(1)\n", "--session", "tenant-a", "--memory-mb", "64")
        check(out.get("status") == "FAILED_PRECONDITION" and "limits.memory_bytes" in out.get(
              "error", "") and "session's files take" in out.get("error", "")
              and out.get("error", "").endswith("nothing ran"),
              "a session run that cannot start beside its files is refused, saying why", out)
        p = subprocess.run([f"{bin_dir}/sandbox-run", "-e", s.tcp, "--close-session", "tenant-a"],
                           capture_output=True, text=True)
        check(p.returncode == 0, "CloseSession", p.stderr)
        check(engine_groups(s) == [] and len(workspace_mounts(s.state)) == 1,
              "its memory group and tmpfs are gone when CloseSession returns",
              (engine_groups(s), workspace_mounts(s.state)))
        rc, out = s.run(alloc)
        check(out.get("killed_by") == "none", "and the next run has its memory", out)
    finally:
        s.stop()


def test_start_faults(bin_dir, check):
    """A start on a full disk fails clearly and leaves nothing behind."""
    tmp = tempfile.mkdtemp(prefix="sbx-full-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", tmp], check=True)
    try:
        with open(os.path.join(tmp, "filler"), "wb") as f:
            try:
                f.write(b"\0" * (512 << 10))
            except OSError:
                pass  # full: that is the point
        before = sorted(os.listdir(tmp))
        p = subprocess.run([f"{bin_dir}/sandboxd", "--listen", f"tcp://127.0.0.1:{free_port()}",
                            "--state-dir", os.path.join(tmp, "state"),
                            "--uid-base", str(allocate_uids("--workers", "1")), "--workers", "1"],
                           capture_output=True, text=True, timeout=30)
        check(p.returncode == 1 and "No space left on device" in p.stderr,
              "sandboxd refuses to start on a full state directory, saying why", p.stderr)
        left = [os.path.relpath(os.path.join(d, n), tmp) for d, ds, fs in os.walk(tmp)
                for n in ds + fs]
        check(sorted(left) == before, "and leaves nothing behind (no partial etc.<pid>)", left)
    finally:
        subprocess.run(["umount", tmp])
        os.rmdir(tmp)


FONTS_PROBE = """\
import os
d = os.environ["MPLCONFIGDIR"]
print(sorted(n for n in os.listdir(d) if n.startswith("fontlist")) if os.path.isdir(d) else [])
import matplotlib
names = sorted(n for n in os.listdir(d) if n.startswith("fontlist"))
print(names)
shared = "/run/sandboxd/matplotlib/" + names[0]
print(open(os.path.join(d, names[0]), "rb").read() == open(shared, "rb").read())
import matplotlib.font_manager as fm
print(len(fm.fontManager.ttflist) > 0)
open(os.path.join(d, names[0]), "w").write("not json: the next run must not see it")
try:
    open(shared, "a")
    print("shared list writable")
except OSError:
    print("shared list read-only")
"""


def test_matplotlib_fonts(bin_dir, check):
    """matplotlib's font list, made once per server (server/sandbox/fontlist.c)
    and copied into a run's config directory when the run imports
    matplotlib (sandboxd_cell), so that a cold plot does not scan the
    system's fonts (about half a second a run): nothing before the import,
    the server's list after it, read-only where all runs share it, and each
    run's copy its own (a run that spoils it spoils nothing for the next).
    The same in zygote runs when the zygote did not preload matplotlib."""
    s = Server(bin_dir, "--workers", "1")
    z = None
    try:
        check(wait_log(s, "event=matplotlib_fonts result=ready", timeout=120),
              "the server says when the font list is made", s.log_text()[-2000:])
        want = "[]\n['fontlist-v330.json']\nTrue\nTrue\nshared list read-only\n"
        for i in range(2):
            rc, out = s.run(FONTS_PROBE)
            check(out.get("stdout") == want,
                  f"cold run {i + 1}: the server's font list is the run's after import matplotlib",
                  out)
        z = Server(bin_dir, "--workers", "1", "--zygote", "--zygote-preload", "json")
        check(wait_log(z, "event=matplotlib_fonts result=ready", timeout=120),
              "the zygote server's font list is made", z.log_text()[-2000:])
        for i in range(2):
            rc, out = z.run(FONTS_PROBE, "--runtime", "python-zygote")
            check(out.get("stdout") == want,
                  f"zygote run {i + 1}: the same, through the zygote's import hook", out)
    finally:
        s.stop()
        if z is not None:
            z.stop()


def test_python_compat(bin_dir, check):
    """User code runs as "python3 main.py" would outside: these are what
    CPython's own test suite found different in the sandbox."""
    s = Server(bin_dir, "--workers", "2", "--max-open-files", "4096")
    host_master, host_slave = os.openpty()  # a terminal of the host's
    try:
        # The workspace is on sys.path: a session imports its own module.
        s.run("open('helpers.py', 'w').write('ANSWER = 42\\n')\n", "--session", "mods")
        rc, out = s.run("import sys, helpers\nprint(sys.path[0], helpers.ANSWER)\n",
                        "--session", "mods")
        check(out.get("stdout") == "/workspace 42\n",
              "a module the session wrote is importable in its next run", out)
        # PYTHON* variables of the request reach the program, and nothing
        # of the server's (PYTHONUNBUFFERED) reaches its children.
        rc, out = s.run("import os, sys, subprocess\n"
                        "print(sys.flags.hash_randomization, os.environ.get('PYTHONUNBUFFERED'))\n"
                        "print(subprocess.run([sys.executable, '-c', 'import os; "
                        "print(os.environ.get(\"PYTHONUNBUFFERED\"))'], capture_output=True,"
                        " text=True).stdout, end='')\n",
                        "--env", "PYTHONHASHSEED=0")
        check(out.get("stdout") == "0 None\nNone\n",
              "PYTHONHASHSEED from the request is honoured; PYTHONUNBUFFERED is not set", out)
        rc, out = s.run("import sys, time\nprint('before the hang')\ntime.sleep(30)\n",
                        "--timeout-ms", "1000")
        check(out.get("stdout") == "before the hang\n" and out.get("killed_by") == "timeout",
              "what the program printed before it was killed is in the reply", out)
        rc, out = s.run("import socket\nprint(socket.gethostbyname(socket.gethostname()))\n"
                        "print(socket.getservbyname('http'), socket.getprotobyname('tcp'))\n"
                        "print(socket.getaddrinfo('localhost', 'https')[0][4][1])\n")
        check(out.get("stdout") == "127.0.1.1\n80 6\n443\n",
              "the hostname resolves; /etc/services and /etc/protocols are there", out)
        rc, out = s.run("import resource\nprint(resource.getrlimit(resource.RLIMIT_NOFILE))\n")
        check(out.get("stdout") == "(1024, 1024)\n", "1024 open files by default", out)
        rc, out = s.run("import os\nfds = [os.open('/dev/null', os.O_RDONLY) for _ in range(3000)]\n"
                        "print(len(fds))\n", "--open-files", "4096")
        check(out.get("stdout") == "3000\n", "limits.open_files raises it", out)
        rc, out = s.run("print(1)\n", "--open-files", "100000")
        check(out.get("status") == "INVALID_ARGUMENT" and "limits.open_files" in out.get(
              "error", "") and "4096" in out.get("error", ""),
              "open_files above --max-open-files is INVALID_ARGUMENT naming the maximum", out)
        rc, out = s.run("import os, pty\n"
                        "print(sorted(os.listdir('/dev/pts')))\n"
                        "m, sl = os.openpty()\nprint(os.ttyname(sl), sorted(os.listdir('/dev/pts')))\n"
                        "pid, fd = pty.fork()\n"
                        "if pid == 0:\n    print('in a pty')\n    os._exit(0)\n"
                        "os.waitpid(pid, 0)\ndata = b''\n"
                        # All the child wrote, then EIO once it is gone: one
                        # read may return less than a line.
                        "while True:\n"
                        "    try:\n        chunk = os.read(fd, 100)\n"
                        "    except OSError:\n        break\n"
                        "    if not chunk:\n        break\n"
                        "    data += chunk\n"
                        "print(data)\n")
        check(out.get("stdout") == "['ptmx']\n/dev/pts/0 ['0', 'ptmx']\nb'in a pty\\r\\n'\n",
              "pseudo-terminals work, from a devpts of the run's own (no host terminal)", out)
        rc, out = s.run("import os\nwith open('sparse', 'wb') as f:\n    f.truncate(1 << 30)\n"
                        "print(os.path.getsize('sparse'))\n"
                        "with open('full', 'wb') as f:\n"
                        "    for _ in range(70):\n        f.write(b'x' * (1 << 20))\n")
        check(out.get("stdout") == "1073741824\n" and "No space left on device" in out.get(
              "stderr", ""),
              "a sparse file may exceed the disk quota; the blocks written may not", out)
        rc, out = s.run("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                        "print(libc.personality(0xffffffff), libc.personality(0x0040000),"
                        " ctypes.get_errno())\n")
        check(out.get("stdout") == "0 -1 1\n",
              "personality() can be queried, not changed (EPERM)", out)
        # Every slot's user is "sandbox" with the run's own uid and gid: two
        # runs at once land in both slots.
        who = ("import os, pwd, grp, time\ntime.sleep(0.5)\n"
               "print(os.getuid() == pwd.getpwnam('sandbox').pw_uid,"
               " os.getgid() == grp.getgrnam('sandbox').gr_gid,"
               " pwd.getpwuid(os.getuid()).pw_name,"
               " sorted(p.pw_name for p in pwd.getpwall()))\n")
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            outs = [f.result()[1] for f in [ex.submit(s.run, who) for _ in range(2)]]
        check(all(o.get("stdout") == "True True sandbox ['nobody', 'root', 'sandbox']\n"
                  for o in outs),
              "in every slot the name sandbox is the run's own uid and gid", outs)
        # A server thread that dies on the refused socket leaves the main
        # thread waiting: the feedback names the network policy.
        rc, out = s.run("import socket, threading, time\n"
                        "def serve():\n    s = socket.socket()\n    s.bind(('127.0.0.1', 8000))\n"
                        "threading.Thread(target=serve).start()\ntime.sleep(30)\n",
                        "--timeout-ms", "1500")
        check(out.get("killed_by") == "timeout" and "PermissionError" in out.get("stderr", "")
              and any("the network, which the sandbox refuses" in f
                      for f in out.get("feedback", [])),
              "a run that timed out after a refused socket is told about the network policy",
              out)
    finally:
        os.close(host_master)
        os.close(host_slave)
        s.stop()


class Files(http.server.BaseHTTPRequestHandler):
    """The test's own web server: what downloads meet in the wild."""
    def log_message(self, *a):
        pass

    def do_GET(self):
        port = self.server.server_address[1]
        if self.path == "/ok.txt":
            body = b"downloaded content\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path == "/big":  # no Content-Length: the cap must hold while receiving
            self.send_response(200)
            self.end_headers()
            try:
                for _ in range(64):
                    self.wfile.write(b"B" * 65536)
            except OSError:
                pass
        elif self.path == "/slow":
            time.sleep(4)
            self.send_response(200)
            self.end_headers()
        elif self.path.startswith("/redirect-"):
            target = {"/redirect-ok": f"http://127.0.0.1:{port}/ok.txt",
                      "/redirect-file": "file:///etc/passwd",
                      "/redirect-host": f"http://localhost:{port}/ok.txt"}[self.path]
            self.send_response(302)
            self.send_header("Location", target)
            self.end_headers()
        else:
            self.send_response(404)
            self.end_headers()


def test_files(bin_dir, check):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Files)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    web = f"http://127.0.0.1:{httpd.server_address[1]}"
    s = Server(bin_dir, "--max-file-bytes", "1048576", "--download-hosts", "127.0.0.1",
               "--download-timeout-ms", "1500")
    try:
        f = os.path.join(s.tmp, "in.txt")
        open(f, "w").write("inline")
        rc, out = s.run("import os\nprint(open('mounts/in.txt').read(), "
                        "open('mounts/d/e/x.txt').read(), sorted(os.listdir('.')))\n",
                        "--file", f, "--file", f"{f}:d/e/x.txt")
        check(out.get("stdout") == "inline inline ['main.py', 'mounts', 'output']\n",
              "input files land under mounts/", out)
        rc, out = s.run("    import sys\n    if True:\n        print('dedented', sys.argv[1])\n",
                        "--arg", "ok")
        check(out.get("stdout") == "dedented ok\n", "indented code is dedented before it runs",
              out)
        big = os.path.join(s.tmp, "big.bin")
        open(big, "wb").write(b"x" * (1048576 + 1))
        half = os.path.join(s.tmp, "half.bin")
        open(half, "wb").write(b"h" * 700000)
        before = runs_total(s)
        cases = [
            ("absolute path", ["--file", f"{f}:/etc/x"], "files[0].path"),
            ("dot-dot", ["--file", f"{f}:a/../../x"], "files[0].path"),
            ("over-long name", ["--file", f"{f}:{'n' * 256}"], "files[0].path"),
            ("duplicate", ["--file", f"{f}:a", "--file", f"{f}:a"], "files[1].path"),
            ("file over max-file-bytes", ["--file", f"{big}:big"], "files[0].content"),
            ("files over the disk quota", ["--disk-mb", "1", "--file", f"{half}:a",
                                           "--file", f"{half}:b"], "disk_bytes"),
            ("file:// URL", ["--file-url", "x=file:///etc/passwd"], "files[0].url"),
            ("ftp:// URL", ["--file-url", "x=ftp://127.0.0.1/x"], "files[0].url"),
        ]
        for what, flags, field in cases:
            rc, out = s.run(HELLO, *flags)
            check(out.get("status") == "INVALID_ARGUMENT" and field in out.get("error", ""),
                  f"INVALID_ARGUMENT: {what}", out)
        r = s.probe("nulpath")
        check(r.startswith("INVALID_ARGUMENT") and "NUL" in r, "a NUL in a file path is refused", r)
        check(runs_total(s) == before, "nothing ran for refused files")
        # Downloads.
        rc, out = s.run("print(open('mounts/web/ok.txt').read(), end='')\n",
                        "--file-url", f"web/ok.txt={web}/ok.txt")
        check(out.get("stdout") == "downloaded content\n", "a file by URL is downloaded", out)
        rc, out = s.run("print(open('mounts/r.txt').read(), end='')\n",
                        "--file-url", f"r.txt={web}/redirect-ok")
        check(out.get("stdout") == "downloaded content\n", "an allowed redirect is followed", out)
        before = runs_total(s)
        port = httpd.server_address[1]
        failures = [
            ("404", f"{web}/missing", "404"),
            ("too big", f"{web}/big", "larger than"),
            ("timeout", f"{web}/slow", "timed out"),
            ("host not allowed", f"http://localhost:{port}/ok.txt", "not in download-hosts"),
            ("redirect to file://", f"{web}/redirect-file", "redirected to file:///etc/passwd"),
            ("redirect to another host", f"{web}/redirect-host", "not in download-hosts"),
            ("connection refused", f"http://127.0.0.1:{free_port()}/x", "127.0.0.1"),
        ]
        for what, url, reason in failures:
            rc, out = s.run(HELLO, "--file-url", f"x={url}")
            err = out.get("error", "")
            check(out.get("status") == "FAILED_PRECONDITION" and url in err and reason in err,
                  f"download {what}: FAILED_PRECONDITION naming URL and reason", out)
        check(runs_total(s) == before, "nothing ran after a failed download")
        # The whole message: what failed, why, and "; nothing ran" once.
        rc, out = s.run(HELLO, "--file-url", f"x={web}/missing")
        check(out.get("error") == f"files[0].url {web}/missing: download failed: HTTP status 404"
              "; nothing ran", "a failed download's whole message", out)
        rc, out = s.run(HELLO)
        check(out.get("stdout") == "hello\n", "server still serves", out)
    finally:
        s.stop()
    # No allowlist: any host, but public addresses only (no SSRF into the
    # server's own network). Every server here is on loopback.
    open_server = Server(bin_dir, "--download-timeout-ms", "1500")
    private_ok = Server(bin_dir, "--download-timeout-ms", "1500", "--download-allow-private", "1")
    try:
        port = httpd.server_address[1]
        before = runs_total(open_server)
        for what, url, reason in [
                ("an IPv4 loopback address", f"{web}/ok.txt", "address 127.0.0.1 is loopback"),
                ("a name that resolves to loopback", f"http://localhost:{port}/ok.txt",
                 "is loopback"),
                ("an IPv6 loopback address", f"http://[::1]:{port}/ok.txt", "address ::1 is loopback"),
                ("an IPv4-mapped loopback address", f"http://[::ffff:127.0.0.1]:{port}/ok.txt",
                 "is loopback"),
                ("the cloud metadata address", "http://169.254.169.254/latest/meta-data/",
                 "address 169.254.169.254 is link-local"),
                ("a private address", "http://10.1.2.3/x", "address 10.1.2.3 is private"),
                ("0.0.0.0", f"http://0.0.0.0:{port}/ok.txt", "this network")]:
            rc, out = open_server.run(HELLO, "--file-url", f"x={url}")
            err = out.get("error", "")
            check(out.get("status") == "FAILED_PRECONDITION" and url in err and reason in err
                  and "public addresses only" in err,
                  f"without download-hosts, {what} is refused", out)
        check(runs_total(open_server) == before, "nothing ran after a refused address")
        rc, out = private_ok.run("print(open('mounts/ok.txt').read(), end='')\n",
                                 "--file-url", f"ok.txt={web}/ok.txt")
        check(out.get("stdout") == "downloaded content\n",
              "download-allow-private 1 reaches a loopback server", out)
        rc, out = open_server.run(HELLO)
        check(out.get("stdout") == "hello\n", "server still serves", out)
    finally:
        open_server.stop()
        private_ok.stop()
        httpd.shutdown()


def test_artifacts(bin_dir, check):
    s = Server(bin_dir, "--workers", "1")
    try:
        code = ("import os, socket\n"
                "os.makedirs('output/sub/deeper')\n"
                "open('output/top.txt', 'w').write('top')\n"
                "open('output/sub/deeper/data.json', 'w').write('{}')\n"
                "open('output/with space.txt', 'w').write('s')\n"
                "open('output/new\\nline.txt', 'w').write('n')\n"
                "open('output/caf\\u00e9 \\u65e5\\u672c.txt', 'w').write('u')\n"
                "open(b'output/bad\\xff.txt', 'w').write('b')\n"
                "open('output/big.bin', 'wb').write(b'B' * (2 << 20))\n"
                "os.symlink('/etc/shadow', 'output/shadow')\n"
                f"os.symlink('/proc/{s.proc.pid}/environ', 'output/environ')\n"
                "os.symlink('/etc', 'output/etc')\n"
                "os.symlink('loop2', 'output/loop1')\nos.symlink('loop1', 'output/loop2')\n"
                "os.mkfifo('output/fifo')\n"
                "socket.socket(socket.AF_UNIX).bind('output/sock')\n"
                "print('made')\n")
        adir = os.path.join(s.tmp, "arts")
        t0 = time.time()
        rc, out = s.run(code, "--artifacts-dir", adir, timeout=30)
        arts = {a["relative_path"]: a for a in out.get("artifacts", [])}
        check(out.get("stdout") == "made\n" and time.time() - t0 < 20,
              "a FIFO in output/ never blocks the collector", out.get("stderr"))
        want = {"top.txt", "sub/deeper/data.json", "with space.txt", "new\nline.txt",
                "caf\u00e9 \u65e5\u672c.txt", "big.bin"}
        check(set(arts) == want, "only regular files come back, symlinks/FIFO/socket skipped",
              sorted(arts))
        check(arts.get("sub/deeper/data.json", {}).get("name") == "data.json"
              and arts["sub/deeper/data.json"]["mime"] == "application/json"
              and arts.get("top.txt", {}).get("mime") == "text/plain",
              "name and mime type from mime.types", arts.get("sub/deeper/data.json"))
        check(arts.get("big.bin", {}).get("content_omitted") is True
              and arts["big.bin"]["size"] == 2 << 20 and arts["big.bin"]["content_bytes"] == 0
              and any("per-artifact cap" in l and "big.bin" in l for l in out.get("feedback", [])),
              "an artifact over the cap keeps its metadata, loses its content, feedback says so",
              (arts.get("big.bin"), out.get("feedback")))
        check(any("skipped" in l and "symlinks" in l for l in out.get("feedback", []))
              and any("UTF-8" in l for l in out.get("feedback", [])),
              "feedback names the skipped entries", out.get("feedback"))
        saved = {}
        for d, _, fs in os.walk(adir):
            for name in fs:
                path = os.path.join(d, name)
                saved[os.path.relpath(path, adir)] = open(path, "rb").read()
        check(saved == {"top.txt": b"top", "sub/deeper/data.json": b"{}", "with space.txt": b"s",
                        "new\nline.txt": b"n", "caf\u00e9 \u65e5\u672c.txt": b"u"},
              "--artifacts-dir saves them with their content", sorted(saved))
        environ = open(f"/proc/{s.proc.pid}/environ", "rb").read()
        check(all(b"/etc" not in v and v != environ for v in saved.values()),
              "nothing of the host comes back")
        # The client never writes outside DIR, whatever is planted in it.
        victim_dir = os.path.join(s.tmp, "victim")
        os.mkdir(victim_dir)
        victim = os.path.join(s.tmp, "victim.txt")
        open(victim, "w").write("precious")
        adir2 = os.path.join(s.tmp, "arts2")
        os.mkdir(adir2)
        os.symlink(victim_dir, os.path.join(adir2, "sub"))
        os.symlink(victim, os.path.join(adir2, "top.txt"))
        os.mkfifo(os.path.join(adir2, "f.txt"))
        rc, out = s.run("import os\nos.makedirs('output/sub')\nopen('output/sub/x', 'w')"
                        ".write('x')\nopen('output/top.txt', 'w').write('t')\n"
                        "open('output/f.txt', 'w').write('f')\n", "--artifacts-dir", adir2,
                        timeout=30)
        check(open(victim).read() == "precious" and os.listdir(victim_dir) == [],
              "--artifacts-dir never follows a symlink planted in DIR", os.listdir(victim_dir))
        # 10,000 small files.
        t0 = time.time()
        rc, out = s.run("import os\nos.makedirs('output/many')\nfor i in range(10000):\n"
                        "    open(f'output/many/{i:05d}.txt', 'w').write(str(i))\n",
                        "--timeout-ms", "30000", timeout=90)
        arts = out.get("artifacts", [])
        check(len(arts) == 10000 and arts[0]["relative_path"] == "many/00000.txt"
              and arts[-1]["relative_path"] == "many/09999.txt"
              and not any(a["content_omitted"] for a in arts),
              f"10,000 small files come back, sorted ({time.time() - t0:.1f} s)", len(arts))
        # The per-response cap.
        rc, out = s.run("import os\nfor i in range(10):\n"
                        "    open(f'output/{i}.bin', 'wb').write(b'x' * 1000000)\n")
        arts = out.get("artifacts", [])
        sent = [a for a in arts if not a["content_omitted"]]
        check(len(arts) == 10 and len(sent) == 8
              and any("used up" in l for l in out.get("feedback", [])),
              "past the per-response cap (8 MiB) content is left out, feedback says so",
              (len(sent), out.get("feedback")))
        # A matplotlib plot comes back as a PNG.
        adir3 = os.path.join(s.tmp, "plot")
        rc, out = s.run("import matplotlib\nmatplotlib.use('Agg')\n"
                        "import matplotlib.pyplot as plt\n"
                        "plt.plot([1, 2, 3], [1, 4, 9])\nplt.savefig('output/plot.png')\n",
                        "--env", "MPLCONFIGDIR=/tmp", "--env",
                        "MATPLOTLIBRC=/usr/share/matplotlib/mpl-data/matplotlibrc",
                        "--memory-mb", "256",
                        "--timeout-ms", "30000", "--artifacts-dir", adir3, timeout=90)
        arts = {a["relative_path"]: a for a in out.get("artifacts", [])}
        png = open(os.path.join(adir3, "plot.png"), "rb").read() if os.path.exists(
            os.path.join(adir3, "plot.png")) else b""
        w, h = (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")) \
            if len(png) > 24 else (0, 0)
        check(arts.get("plot.png", {}).get("mime") == "image/png"
              and png.startswith(b"\x89PNG\r\n\x1a\n") and png[12:16] == b"IHDR"
              and w > 100 and h > 100, f"a matplotlib plot comes back as image/png ({w}x{h})",
              (out.get("stderr", "")[-300:], arts.get("plot.png")))
    finally:
        s.stop()


def test_quota_and_leftovers(bin_dir, check):
    s = Server(bin_dir, "--workers", "1")
    try:
        rc, out = s.run("import errno\nn = 0\ntry:\n    for i in range(40):\n"
                        "        with open(f'f{i}', 'wb') as f:\n"
                        "            f.write(b'x' * (1 << 20))\n        n += 1\n"
                        "except OSError as e:\n    print('OSError', errno.errorcode[e.errno], n)\n",
                        "--disk-mb", "8")
        check(out.get("stdout", "").startswith("OSError ENOSPC ")
              and int(out["stdout"].split()[2]) in (6, 7),
              "writing past the workspace quota fails with ENOSPC", out)
        rc, out = s.run("import errno\ntry:\n    open('big', 'wb').write(b'x' * (9 << 20))\n"
                        "except OSError as e:\n    print('OSError', errno.errorcode[e.errno])\n",
                        "--disk-mb", "8")
        check(out.get("stdout") in ("OSError EFBIG\n", "OSError ENOSPC\n"),
              "one file past the quota fails (EFBIG or ENOSPC)", out)
        rc, out = s.run("import os, shutil\nprint(os.listdir('.'), shutil.disk_usage('.').total)\n")
        check(out.get("stdout") == f"['main.py', 'output'] {64 << 20}\n",
              "the next run starts with an empty workspace of the default quota (64 MiB)", out)
        # Nothing of a run without a session remains on the host after the reply.
        token = f"leftover-{os.getpid()}-{time.monotonic_ns()}"
        rc, out = s.run(f"import os\nfor d in ('.', 'output', '/tmp', '/dev/shm'):\n"
                        f"    open(os.path.join(d, '{token}'), 'w').write('x')\n"
                        f"os.makedirs('output/d/{token}')\nprint('ok')\n")
        check(out.get("stdout") == "ok\n" and any(a["name"] == token for a in out["artifacts"]),
              "the run wrote its markers", out)
        found = []
        for top in (s.state, "/tmp", "/dev/shm"):
            p = subprocess.run(["find", top, "-xdev", "-name", token], capture_output=True,
                               text=True, timeout=60)
            found += p.stdout.split()
        for m in workspace_mounts(s.state):
            found += [os.path.join(m, n) for n in os.listdir(m)]
        check(found == [], "nothing of a session-less run remains in the state dir, /tmp or "
              "/dev/shm", found)
    finally:
        s.stop()
