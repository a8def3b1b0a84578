"""Interpreter sessions and rich results on the wire (session_mode
INTERPRETER, result, figures; docs/INTERPRETER.md): a real sandboxd per
test, raw REQ connections with the build's generated messages
(tests/lib/harness.py).

Tests (test_<name>, ctest service_<name>):
  interpreter_state      x = 41, then x + 1 is result "42"; a pandas
                         DataFrame built in one call used in the next;
                         imports, open files, functions and `_` live on;
                         each call's stdout, stderr and stdin are its own
                         (a thread printing after its call never reaches
                         the next); args and env per call; exceptions and
                         sys.exit keep the state; result bounded; the
                         files stay in the workspace; GetInfo and /metrics
  interpreter_limits     a timeout raises KeyboardInterrupt and keeps the
                         state; a cell that ignores it is killed after the
                         grace and the next call says the state was lost
                         (files kept); the memory the interpreter holds
                         counts against its session's cap; the output limit
                         interrupts; CancelRun interrupts; os._exit ends it
  interpreter_figures    plt.show() in a session and a figure left open in
                         a stateless run come back as image/png artifacts;
                         the result of a stateless run and of a FILES
                         session run
  interpreter_isolation  two sessions never see each other's state,
                         processes or uids; a session's background process
                         dies with its session; nothing left after close
  interpreter_eviction   --max-interpreters 1: a second session evicts the
                         first (told on its next call); idle TTL and
                         lifetime end interpreters (told too)
  interpreter_hostile    a cell writes on the kernel's control socket: a
                         forged answer is bounded (result cut to 64 KiB,
                         exit code masked) and the real one is not taken for
                         the next call's; a cell flooding the channel is
                         still interrupted at its timeout; garbage or an
                         oversized frame ends the interpreter (the reply
                         says so); the server goes on
  interpreter_zygote     runtime python-zygote: from the first such
                         session on (none before), each interpreter slot
                         keeps a zygote; a session's interpreter is forked
                         from its slot's (the preload imported at the
                         first call), as its slot's uid; state, figures, the
                         timeout's interrupt and the session's memory cap
                         as a fresh one's; with allow_net a fresh one (the
                         feedback says so); close leaves only the zygotes
  interpreter_refused    bad session_mode values, INTERPRETER without a
                         session, with requirements, python-zygote on a
                         server without --zygote,
                         against a FILES session, and with
                         --max-interpreters 0: clear errors, nothing runs,
                         the server goes on
"""
import os
import subprocess
import threading
import time
import urllib.request

from lib.harness import Server, WireCaller, free_port, load_pb2, slot_processes

HERE = os.path.dirname(os.path.abspath(__file__))

OK, INVALID_ARGUMENT, FAILED_PRECONDITION = 0, 3, 9
NONE, TIMEOUT, MEMORY, OUTPUT_LIMIT, SIGNAL, CANCELLED = 0, 1, 2, 3, 4, 5
INTERP, FILES = 2, 1
MIB = 1 << 20


class InterpServer(Server):
    """A sandboxd with the operations listener."""
    tmp_prefix = "sbx-interp-"

    def __init__(self, bin_dir, *extra, **kw):
        self.http_port = free_port()
        super().__init__(bin_dir, "--http-listen", f"http://127.0.0.1:{self.http_port}",
                         *extra, **kw)

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics", timeout=10) as r:
            return r.read().decode()


class Caller:
    def __init__(self, server, pb):
        self.pb = pb
        self.w = WireCaller(server.port, pb, timeout=120)

    def run(self, code, **kw):
        limits = kw.pop("limits", None)
        req = self.pb.RunCodeRequest(code=code, **kw)
        if limits:
            req.limits.CopyFrom(self.pb.Limits(**limits))
        st, msg, pl = self.w.call("RunCode", req)
        return st, msg, (self.pb.RunCodeResponse.FromString(pl) if st == OK else None)

    def ok(self, code, **kw):
        st, msg, r = self.run(code, **kw)
        if st != OK:
            raise RuntimeError(f"RunCode: {st} {msg}")
        return r

    def cell(self, session, code, **kw):
        """A call of an INTERPRETER session (the mode names it at creation)."""
        return self.ok(code, session_id=session, session_mode=INTERP, **kw)

    def info(self):
        st, msg, pl = self.w.call("GetInfo", self.pb.GetInfoRequest())
        if st != OK:
            raise RuntimeError(f"GetInfo: {st} {msg}")
        return self.pb.GetInfoResponse.FromString(pl)

    def close_session(self, sid):
        return self.w.call("CloseSession", self.pb.CloseSessionRequest(session_id=sid))[:2]

    def start(self, code, **kw):
        st, msg, pl = self.w.call("StartRun", self.pb.RunCodeRequest(code=code, **kw))
        return st, msg, (self.pb.StartRunResponse.FromString(pl).run_id if st == OK else None)

    def cancel(self, run_id):
        return self.w.call("CancelRun", self.pb.CancelRunRequest(run_id=run_id))[:2]

    def outcome(self, run_id):
        while True:
            st, msg, pl = self.w.call("WatchRun", self.pb.WatchRunRequest(run_id=run_id,
                                                                          wait_ms=10000))
            if st != OK:
                raise RuntimeError(f"WatchRun: {st} {msg}")
            r = self.pb.WatchRunResponse.FromString(pl)
            if r.complete:
                return r

    def close(self):
        self.w.close()


def fb(r):
    return " | ".join(r.feedback)


def interp_processes(s, workers, n):
    """[command line] of the processes of the interpreter slots' uids (after
    the workers')."""
    found = []
    for pid in slot_processes(s.uid_base + workers, n):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                found.append(f.read().replace(b"\0", b" ").decode(errors="replace")[-80:])
        except OSError:
            pass
    return found


# ---- state across calls ----

def test_interpreter_state(bin_dir, check):
    pb = load_pb2(bin_dir)
    s = InterpServer(bin_dir, "--workers", "2")
    c = Caller(s, pb)
    try:
        r1 = c.cell("st", "x = 41\n")
        check(r1.exit_code == 0 and r1.result == "" and r1.session_created
              and r1.session_mode == INTERP and not r1.state_lost,
              "x = 41: no result (an assignment), a new INTERPRETER session",
              (r1.exit_code, r1.result, r1.session_mode, r1.stderr))
        r2 = c.ok("x + 1\n", session_id="st")
        check(r2.exit_code == 0 and r2.result == "42" and not r2.state_lost
              and r2.session_mode == INTERP,
              "x + 1 in the next call: result 42 (the session's mode without naming it)",
              (r2.result, r2.stderr, list(r2.feedback)))
        short = [c.ok("pass\n", session_id="st").wall_time_ms for _ in range(5)]
        check(all(ms >= 1 for ms in short), "a cell shorter than a millisecond reports "
              "wall_time_ms 1, not 0 (rounded up)", short)
        r = c.cell("st", "import pandas as pd\n"
                         "df = pd.DataFrame({'a': [1, 2, 3], 'b': [10, 20, 30]})\n",
                   limits={"timeout_ms": 30000})
        check(r.exit_code == 0, "a DataFrame built", r.stderr[-500:])
        r = c.cell("st", "df['c'] = df.a * df.b\nint(df.c.sum())\n")
        check(r.result == "140", "the DataFrame used in the next call", (r.result, r.stderr))
        r = c.cell("st", "df\n")
        check(r.result.splitlines()[0].split() == ["a", "b", "c"] and "30" in r.result,
              "a DataFrame's result is its text/plain table", r.result)
        r = c.cell("st", "import json\nf = open('notes.txt', 'w')\nf.write('one ')\n"
                         "def twice(v):\n    return 2 * v\n")
        r = c.cell("st", "f.write('two')\nf.close()\n"
                         "(open('notes.txt').read(), twice(21), 'json' in dir())\n")
        check(r.result == "('one two', 42, True)",
              "an open file, a function and an import live on", (r.result, r.stderr))
        c.cell("st", "6 * 7\n")
        r = c.cell("st", "_ + 1\n")
        check(r.result == "43", "_ is the last result, as in a notebook", (r.result, r.stderr))
        # Each call's output is its own, even from a thread still printing.
        r = c.cell("st", "import threading, time, sys\n"
                         "def later():\n    time.sleep(0.6)\n    print('late', flush=True)\n"
                         "    print('late err', file=sys.stderr, flush=True)\n"
                         "threading.Thread(target=later, daemon=True).start()\n"
                         "print('first')\n")
        check(r.stdout == b"first\n", "call 1 prints first", r.stdout)
        time.sleep(1)
        r = c.cell("st", "print('second')\n")
        check(r.stdout == b"second\n" and r.stderr == b"",
              "the next call's stdout and stderr hold nothing of the earlier call's thread",
              (r.stdout, r.stderr))
        r = c.cell("st", "import sys\nprint(sys.stdin.read().upper(), sys.argv[1:])\n"
                         "import os\nos.environ['GREETING']\n",
                   stdin=b"abc", args=["--flag", "v"], env={"GREETING": "hej"})
        check(r.stdout == b"ABC ['--flag', 'v']\n" and r.result == "'hej'",
              "stdin, args and env are the call's", (r.stdout, r.result, r.stderr))
        r = c.cell("st", "print(sys.stdin.read() == '', sys.argv[1:])\n")
        check(r.stdout == b"True []\n", "the next call's stdin is empty and its args its own",
              r.stdout)
        r = c.cell("st", "y = 5\nraise ValueError('boom')\n")
        check(r.exit_code == 1 and b"ValueError: boom" in r.stderr and b"<cell-" in r.stderr
              and b'raise ValueError' in r.stderr and not r.interpreter_ended,
              "an exception: exit 1, its traceback with the cell's source line",
              (r.exit_code, r.stderr))
        r = c.cell("st", "import sys\nz = 7\nsys.exit(3)\n")
        check(r.exit_code == 3 and not r.interpreter_ended, "sys.exit(3): exit 3, the "
              "interpreter goes on", (r.exit_code, r.stderr, list(r.feedback)))
        r = c.cell("st", "(x, y, z)\n")
        check(r.result == "(41, 5, 7)" and not r.state_lost,
              "the state survives exceptions and sys.exit", (r.result, r.stderr))
        r = c.cell("st", "None\n")
        check(r.result == "" and not r.result_truncated, "None has no result", r.result)
        r = c.cell("st", "'é' * 100000\n")
        check(r.result_truncated and 60000 < len(r.result.encode()) <= 65536
              and r.result.startswith("'ééé"),
              "a result over 64 KiB is cut (result_truncated), at a character boundary",
              (r.result_truncated, len(r.result.encode())))
        r = c.cell("st", "print(sorted(os.listdir('.')))\n")
        check(b"'main.py'" in r.stdout and b"'notes.txt'" in r.stdout,
              "the session's workspace holds the files the cells wrote", r.stdout)
        i = c.info()
        check(i.max_interpreters == 4 and i.interpreters == 1 and i.interpreter_starts_total == 1
              and i.interpreter_lost_total == 0 and i.interpreter_idle_s == 600
              and i.interpreter_max_lifetime_s == 3600,
              "GetInfo: one interpreter living, started once, nothing lost",
              (i.max_interpreters, i.interpreters, i.interpreter_starts_total,
               i.interpreter_lost_total))
        m = s.metrics()
        check("sandboxd_interpreters 1" in m and "sandboxd_interpreters_limit 4" in m
              and "sandboxd_interpreter_starts_total 1" in m,
              "/metrics: sandboxd_interpreters and its counters",
              [line for line in m.splitlines() if "interpreter" in line])
        check(len(interp_processes(s, 2, 4)) >= 1, "the interpreter lives between calls",
              interp_processes(s, 2, 4))
        # sandbox-run's plain mode shows a cell's value as a notebook does.
        run = [f"{bin_dir}/sandbox-run", "-e", s.tcp, "--session", "plain"]
        p1 = subprocess.run(run + ["--session-mode", "interpreter", "-"], input=b"y = 5\n",
                            capture_output=True, timeout=60)
        p2 = subprocess.run(run + ["-"], input=b"print('out')\ny * 2\n", capture_output=True,
                            timeout=60)
        check(p1.returncode == 0 and p1.stdout == b"" and p2.returncode == 0
              and p2.stdout == b"out\n10\n",
              "sandbox-run plain mode prints the cell's value after its output",
              (p1.stdout, p2.stdout, p2.stderr))
        c.close_session("plain")
        check(c.close_session("st")[0] == OK, "CloseSession")
        time.sleep(0.5)
        check(interp_processes(s, 2, 4) == [] and c.info().interpreters == 0,
              "closing the session ends its interpreter", interp_processes(s, 2, 4))
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")


# ---- limits ----

def test_interpreter_limits(bin_dir, check):
    pb = load_pb2(bin_dir)
    s = InterpServer(bin_dir, "--workers", "2", "--interpreter-grace-ms", "700")
    c = Caller(s, pb)
    try:
        c.cell("lim", "x = 1\nopen('kept.txt', 'w').write('kept')\n")
        r = c.cell("lim", "import time\nprint('before', flush=True)\ntime.sleep(30)\n",
                   limits={"timeout_ms": 1000, "cpu_time_ms": 60000})
        check(r.killed_by == TIMEOUT and r.exit_code == 130 and b"KeyboardInterrupt" in r.stderr
              and r.stdout == b"before\n" and not r.interpreter_ended
              and "KeyboardInterrupt ended the cell" in fb(r)
              and "timed out after 1 s; KeyboardInterrupt stopped the cell (limits.timeout_ms)"
              in fb(r) and "was killed" not in fb(r),
              "a timeout raises KeyboardInterrupt in the cell; the interpreter is kept (and the "
              "reply does not say it was killed)",
              (r.killed_by, r.exit_code, r.stderr[-300:], list(r.feedback)))
        check(r.wall_time_ms < 1700, "the cell ended at its timeout", r.wall_time_ms)
        r = c.cell("lim", "x + 1\n")
        check(r.result == "2" and not r.state_lost, "the state is kept after the interrupt",
              (r.result, r.stderr))
        r = c.cell("lim", "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                          "time.sleep(30)\n", limits={"timeout_ms": 1000})
        check(r.killed_by == TIMEOUT and r.interpreter_ended
              and "KeyboardInterrupt did not end the cell within 700 ms" in fb(r),
              "a cell that ignores KeyboardInterrupt: killed after the grace, the reply says so",
              (r.killed_by, r.interpreter_ended, list(r.feedback)))
        check(1600 <= r.wall_time_ms < 4000, "killed at timeout + grace", r.wall_time_ms)
        check(r.peak_memory_bytes > 4 * MIB, "the peak memory of the killed interpreter is its own",
              r.peak_memory_bytes)
        r = c.cell("lim", "print(open('kept.txt').read())\nx\n")
        check(r.state_lost and "state was lost" in fb(r) and "files kept" in fb(r)
              and r.stdout == b"kept\n" and b"NameError" in r.stderr,
              "the next call says the state was lost; the files are kept, the variables not",
              (r.state_lost, list(r.feedback), r.stdout, r.stderr[-200:]))
        r = c.cell("lim", "x\n")
        check(r.exit_code == 1 and not r.state_lost, "and the call after it no longer says so",
              (r.exit_code, list(r.feedback)))
        # The memory the interpreter holds counts against its session's cap.
        cap = {"memory_bytes": 150 * MIB, "timeout_ms": 20000}
        r = c.cell("mem", "a = bytearray(60 << 20)\nfor i in range(0, len(a), 4096): a[i] = 1\n",
                   limits=cap)
        check(r.exit_code == 0 and r.killed_by == NONE and r.peak_memory_bytes >= 60 * MIB,
              "60 MiB held in the session's interpreter (its memory reported)",
              (r.killed_by, r.peak_memory_bytes, r.stderr[-300:]))
        r = c.cell("mem", "b = bytearray(60 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\n"
                          "len(a) + len(b)\n", limits=cap)
        check(r.exit_code == 0 and r.result == str(120 << 20), "another 60 MiB fits in 150 MiB",
              (r.result, r.killed_by, r.stderr[-300:]))
        # This call asks for more: the cap stays the one the interpreter
        # started with, and the feedback names that one.
        r = c.cell("mem", "c = bytearray(60 << 20)\nfor i in range(0, len(c), 4096): c[i] = 1\n",
                   limits={"memory_bytes": 300 * MIB, "timeout_ms": 20000})
        check(r.killed_by == MEMORY and r.interpreter_ended and "memory cap" in fb(r)
              and "memory limit of 150 MiB reached" in fb(r),
              "a third 60 MiB goes over the cap with the first two held (a larger memory_bytes "
              "of this call does not apply): killed_by MEMORY, the cap in force in the feedback",
              (r.killed_by, r.interpreter_ended, list(r.feedback)))
        r = c.cell("mem", "c = bytearray(60 << 20)\nfor i in range(0, len(c), 4096): c[i] = 1\n"
                          "len(c)\n", limits=cap)
        check(r.state_lost and r.result == str(60 << 20) and r.killed_by == NONE,
              "in a fresh interpreter the same 60 MiB fits (it was the held memory)",
              (r.state_lost, r.result, r.killed_by))
        # A child the OOM killer takes: killed_by MEMORY, the interpreter lives.
        r = c.cell("mem", "import os, time\nkid = os.fork()\nif kid == 0:\n"
                          "    h = bytearray(200 << 20)\n    for i in range(0, len(h), 4096): "
                          "h[i] = 1\n    os._exit(0)\nos.waitpid(kid, 0)\nsurvivor = 1\n",
                   limits=cap)
        if c.info().isolation.backend == "cgroup v1":
            check(r.killed_by == MEMORY and not r.interpreter_ended
                  and "a process of the cell was killed, the interpreter lives on" in fb(r),
                  "a cell's child killed at the cap: killed_by MEMORY, the interpreter lives on",
                  (r.killed_by, r.interpreter_ended, list(r.feedback)))
            r = c.cell("mem", "survivor + len(c) // (60 << 20)\n")
            check(r.result == "2" and not r.state_lost, "and keeps its state",
                  (r.result, r.stderr))
        else:  # v2: memory.oom.group kills the whole group, the interpreter with it
            check(r.killed_by == MEMORY and r.interpreter_ended,
                  "a cell's child over the cap ends the interpreter (cgroup v2's oom.group)",
                  (r.killed_by, r.interpreter_ended, list(r.feedback)))
        # A forked child that reaches the cell's end ends there: it never
        # answers for the cell nor serves the next one.
        r = c.cell("lim", "import os\nkid = os.fork()\n"
                          "os.write(1, b'child\\n' if kid == 0 else b'parent\\n')\n"
                          "if kid:\n    os.waitpid(kid, 0)\n    'parent result'\n")
        check(sorted(r.stdout.split()) == [b"child", b"parent"] and r.exit_code == 0,
              "a forked child runs to the cell's end", (r.stdout, r.stderr))
        for _ in range(3):
            r = c.cell("lim", "import os\n(1, len([p for p in os.listdir('/proc') if "
                              "p.isdigit()]))\n")
            check(r.result == "(1, 2)", "then only the interpreter (and init) answer the next "
                  "calls", (r.result, r.stderr))
        # The output limit interrupts the cell; the state stays.
        r = c.cell("lim", "y = 3\nwhile True:\n    print('x' * 1000)\n",
                   limits={"output_bytes": 10000})
        check(r.killed_by == OUTPUT_LIMIT and r.stdout_truncated and len(r.stdout) == 10000
              and not r.interpreter_ended,
              "the output limit: truncated, KeyboardInterrupt, the interpreter kept",
              (r.killed_by, len(r.stdout), r.interpreter_ended, list(r.feedback)))
        r = c.cell("lim", "y\n")
        check(r.result == "3", "the state after the output limit", (r.result, r.stderr))
        # CancelRun interrupts a started cell.
        st, msg, rid = c.start("import time\nprint('go', flush=True)\ntime.sleep(30)\n",
                               session_id="lim")
        check(st == OK, "StartRun in an interpreter session", (st, msg))
        time.sleep(1)
        check(c.cancel(rid)[0] == OK, "CancelRun")
        w = c.outcome(rid)
        check(w.result.killed_by == CANCELLED and w.result.stdout == b"go\n"
              and not w.result.interpreter_ended,
              "CancelRun: KeyboardInterrupt, killed_by CANCELLED, the interpreter kept",
              (w.result.killed_by, w.result.stdout, list(w.result.feedback)))
        r = c.cell("lim", "y * 2\n")
        check(r.result == "6", "the state after a cancel", r.result)
        r = c.cell("lim", "import os\nprint('bye', flush=True)\nos._exit(4)\n")
        check(r.exit_code == 4 and r.interpreter_ended and r.stdout == b"bye\n"
              and "exited with status 4" in fb(r),
              "os._exit(4) ends the interpreter: exit 4, and the reply says so",
              (r.exit_code, r.interpreter_ended, list(r.feedback)))
        r = c.cell("lim", "'y' in dir()\n")
        check(r.state_lost and r.result == "False", "the next call starts fresh",
              (r.state_lost, r.result))
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")


# ---- figures and results ----

PLOT = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('t')\n"


def test_interpreter_figures(bin_dir, check):
    pb = load_pb2(bin_dir)
    s = InterpServer(bin_dir, "--workers", "2")
    c = Caller(s, pb)
    big = {"timeout_ms": 30000}
    try:
        r = c.cell("fig", PLOT + "plt.show()\n", limits=big)
        arts = {a.relative_path: a for a in r.artifacts}
        check(list(arts) == ["figure-1.png"] and arts["figure-1.png"].mime == "image/png"
              and arts["figure-1.png"].content.startswith(b"\x89PNG\r\n\x1a\n")
              and r.result == "", "plt.show() in a session: output/figure-1.png, image/png",
              (list(arts), r.result, r.stderr[-500:]))
        r = c.cell("fig", "fig = plt.figure()\nplt.bar([1, 2], [3, 4])\n", limits=big)
        check(sorted(a.relative_path for a in r.artifacts) == ["figure-1.png", "figure-2.png"]
              and r.result.startswith("<BarContainer"),
              "a figure left open at the end of a call: figure-2.png (the session's output/ "
              "keeps the first)", ([a.relative_path for a in r.artifacts], r.result))
        r = c.cell("fig", "len(plt.get_fignums())\n")
        check(r.result == "0", "the figures shown are closed", r.result)
        r = c.ok(PLOT, limits=big)
        check([a.relative_path for a in r.artifacts] == ["figure-1.png"]
              and r.artifacts[0].content.startswith(b"\x89PNG"),
              "a stateless run's figure left open comes back as figure-1.png",
              ([a.relative_path for a in r.artifacts], r.stderr[-300:]))
        r = c.ok(PLOT + "import os\nos.makedirs('output', exist_ok=True)\n"
                 "plt.savefig('output/mine.png')\nplt.close()\n", limits=big)
        check([a.relative_path for a in r.artifacts] == ["mine.png"],
              "a figure the code saved and closed is not sent twice",
              [a.relative_path for a in r.artifacts])
        r = c.ok(PLOT + "import os\nos.makedirs('output', exist_ok=True)\n"
                 "plt.savefig('output/mine.png')\n", limits=big)
        check([a.relative_path for a in r.artifacts] == ["mine.png"],
              "a figure the code saved and left open is not sent twice (no figure-1.png)",
              [a.relative_path for a in r.artifacts])
        r = c.cell("fig", "import os\nos.makedirs('output', exist_ok=True)\n"
                   "f1 = plt.figure()\nplt.plot([1, 2])\nplt.savefig('output/kept.png')\n"
                   "f2 = plt.figure()\nplt.plot([2, 1])\n", limits=big)
        check(sorted(a.relative_path for a in r.artifacts)
              == ["figure-1.png", "figure-2.png", "figure-3.png", "kept.png"],
              "in a session: a figure saved by the cell is not saved again, the one left "
              "unsaved is (figure-3.png)", sorted(a.relative_path for a in r.artifacts))
        r = c.cell("fig", "len(plt.get_fignums())\n")
        check(r.result == "0", "both are closed at the cell's end", r.result)
        r = c.ok(PLOT + "plt.show()\n", limits=big, env={"MPLBACKEND": "agg"})
        check([a.relative_path for a in r.artifacts] == ["figure-1.png"],
              "a backend of the request's own: figures left open still come back",
              [a.relative_path for a in r.artifacts])
        r = c.ok("2 + 3\n")
        check(r.result == "5" and r.stdout == b"", "a stateless run's last expression: 5",
              (r.result, r.stdout))
        r = c.ok("print('hi')\n")
        check(r.result == "" and r.stdout == b"hi\n", "print() has no result (None)", r.result)
        r = c.ok("{'k': [1, 2]}\n", session_id="files", session_mode=FILES)
        check(r.result == "{'k': [1, 2]}" and r.session_mode == FILES,
              "a FILES session run's result", (r.result, r.session_mode))
        r = c.ok("import sys\nprint(sys.argv, __name__, __file__)\nraise SystemExit(2)\n",
                 args=["a"])
        check(r.stdout == b"['/workspace/main.py', 'a'] __main__ /workspace/main.py\n"
              and r.exit_code == 2 and r.result == "",
              "a stateless run sees argv, __name__ and __file__ as python3 main.py gives them",
              (r.stdout, r.exit_code))
        r = c.ok("def f():\n    return 1 / 0\nf()\n")
        check(r.exit_code == 1 and b'File "/workspace/main.py", line 2, in f' in r.stderr
              and b"<string>" not in r.stderr,
              "a stateless traceback starts at the script, as python3's", r.stderr)
        r = c.ok("x = (\n")
        check(r.exit_code == 1 and b"SyntaxError" in r.stderr and b"Traceback" not in r.stderr,
              "a SyntaxError as python3 shows it", r.stderr)
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")


# ---- isolation ----

WHO = "import os\n(os.getuid(), sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"


def test_interpreter_isolation(bin_dir, check):
    pb = load_pb2(bin_dir)
    s = InterpServer(bin_dir, "--workers", "2")
    c = Caller(s, pb)
    try:
        c.cell("alice", "secret = 'alice-secret'\nimport sys\nsys.alice = 1\n")
        r = c.cell("bob", "'secret' in dir(), hasattr(__import__('sys'), 'alice')\n")
        check(r.result == "(False, False)", "bob sees nothing of alice's globals or modules",
              (r.result, r.stderr))
        ra, rb = c.cell("alice", WHO), c.cell("bob", WHO)
        ua, pa = eval(ra.result)
        ub, pb_ = eval(rb.result)
        interp_uids = range(s.uid_base + 2, s.uid_base + 2 + 4)  # past the 2 workers' slots
        check(ua != ub and ua in interp_uids and ub in interp_uids,
              "each interpreter runs as a uid of its own, past the workers' slots", (ua, ub))
        check(len(pa) <= 3 and len(pb_) <= 3, "each sees only its own processes", (pa, pb_))
        r = c.cell("bob", "import glob\nglob.glob('/workspace/*') + glob.glob('/proc/*/environ')"
                          "[:0]\n")
        check("alice" not in r.result, "bob's workspace holds nothing of alice's", r.result)
        c.cell("alice", "import subprocess\n"
                        "p = subprocess.Popen(['sleep', '1000'], start_new_session=True)\n")
        before = interp_processes(s, 2, 4)
        check(any("sleep 1000" in line for line in before),
              "alice's background process lives between her calls", before)
        check(c.close_session("alice")[0] == OK and c.close_session("bob")[0] == OK,
              "both sessions closed")
        time.sleep(0.5)
        left = interp_processes(s, 2, 4)
        check(left == [], "nothing of either interpreter is left, the background process "
              "neither", left)
        r = c.cell("alice", "'secret' in dir()\n")
        check(r.result == "False" and r.session_created, "a session of the same id starts empty",
              (r.result, r.session_created))
        c.close_session("alice")
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")
    check(slot_processes(s.uid_base, 6) == {}, "nothing left after the server stopped",
          slot_processes(s.uid_base, 6))


# ---- eviction, idle, lifetime ----

def test_interpreter_eviction(bin_dir, check):
    pb = load_pb2(bin_dir)
    s = InterpServer(bin_dir, "--workers", "2", "--max-interpreters", "1")
    c = Caller(s, pb)
    try:
        c.cell("first", "x = 1\n")
        r = c.cell("second", "y = 2\ny\n")
        check(r.result == "2", "a second session gets the only interpreter", r.result)
        r = c.cell("first", "'x' in dir()\n")
        check(r.state_lost and "evicted" in fb(r) and r.result == "False",
              "the first session's next call: its interpreter was evicted, state lost",
              (r.state_lost, list(r.feedback), r.result))
        i = c.info()
        check(i.interpreter_evictions_total >= 2 and i.interpreters == 1,
              "GetInfo counts the evictions", (i.interpreter_evictions_total, i.interpreters))
        # Two calls at once in two sessions, one interpreter: one is refused.
        c2 = Caller(s, pb)
        out = {}
        t = threading.Thread(target=lambda: out.update(r=c2.run(
            "import time\ntime.sleep(3)\n", session_id="first")))
        t.start()
        time.sleep(1)
        st, msg, _ = c.run("1\n", session_id="second")
        t.join()
        c2.close()
        check(st == 8 and "interpreters" in msg and "running calls" in msg,
              "every interpreter running a call: RESOURCE_EXHAUSTED", (st, msg))
        check(out["r"][0] == OK, "the running call finishes", out["r"][:2])
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")
    s = InterpServer(bin_dir, "--workers", "1", "--interpreter-idle-s", "2",
                     "--interpreter-max-lifetime-s", "4")
    c = Caller(s, pb)
    try:
        c.cell("idle", "x = 1\n")
        time.sleep(3.5)
        check(c.info().interpreters == 0, "idle past --interpreter-idle-s: ended")
        r = c.cell("idle", "x\n")
        check(r.state_lost and "without a call" in fb(r), "and its session is told",
              (r.state_lost, list(r.feedback)))
        # Calls 0.3 s apart for 3.4 s of the new interpreter's 4 s lifetime,
        # then one past it, never 2 s idle in between (with 1 s of idle and a
        # fixed pause, a loaded machine let the idle tick win the race).
        t_start = time.monotonic()
        while time.monotonic() - t_start < 3.4:
            r = c.cell("idle", "x = 2\n")
            check(not r.state_lost, "calls every 0.3 s keep it", list(r.feedback))
            time.sleep(0.3)
        while time.monotonic() - t_start < 4.3:
            time.sleep(0.05)
        r = c.cell("idle", "'x' in dir()\n")
        check(r.state_lost and "maximum lifetime" in fb(r) and r.result == "False",
              "past --interpreter-max-lifetime-s: a fresh interpreter, and the session is told",
              (r.state_lost, list(r.feedback), r.result))
        check(s.log_text().count("event=interpreter_end") >= 1, "the log says why one ended")
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")


# ---- a hostile kernel ----

# The kernel's control socket is fd 3 (sandboxd_cell.kernel: the dup of fd 0
# made first); a cell finds its own request's seq in the kernel's frame.
FORGE = """
import json, os, socket, sys
f = sys._getframe()
while f is not None and 'req' not in f.f_locals:
    f = f.f_back
seq = f.f_locals['req']['seq']
c = socket.socket(fileno=os.dup(3))
def frame(obj):
    data = json.dumps(obj).encode()
    return len(data).to_bytes(8, 'little') + data
"""


def test_interpreter_hostile(bin_dir, check):
    pb = load_pb2(bin_dir)
    s = InterpServer(bin_dir, "--workers", "1")
    c = Caller(s, pb)
    try:
        c.cell("h", "kept = 1\n")
        r = c.cell("h", FORGE + "c.sendall(frame({'op': 'done', 'seq': seq, 'exit_code': 999, "
                   "'cpu_us': -5, 'status': 'ok', 'result': 'A' * 200000}))\n"
                   "import time\ntime.sleep(0.5)\n'real'\n")
        check(len(r.result) == 65536 and r.result_truncated and r.exit_code == 999 & 0xFF
              and r.cpu_time_ms < 10000,
              "a forged answer: its result cut to 64 KiB, its exit code masked, its CPU ignored",
              (len(r.result), r.result_truncated, r.exit_code, r.cpu_time_ms))
        time.sleep(1)
        r = c.cell("h", "kept + 1\n")
        check(r.result == "2" and not r.state_lost,
              "the forged cell's real answer is not taken for the next call's", (r.result,
                                                                                 r.stderr))
        # A cell that floods the channel with frames that are not its
        # answer (an empty object each, 5000 to a send, written far faster
        # than they are parsed) until it is interrupted, or for 20 s: its
        # 1 s timeout still interrupts it in time (the server is never held
        # in reading the channel), and the interpreter goes on.
        r = c.cell("h", FORGE + "import threading, time\nbuf = frame({}) * 5000\nstop = []\n"
                   "def flood():\n    end = time.monotonic() + 20\n"
                   "    while not stop and time.monotonic() < end:\n        c.sendall(buf)\n"
                   "threading.Thread(target=flood, daemon=True).start()\n"
                   "try:\n    time.sleep(60)\nfinally:\n    stop.append(1)\n",
                   limits={"timeout_ms": 1000, "cpu_time_ms": 60000})
        check(r.killed_by == TIMEOUT and r.wall_time_ms < 8000,
              "a cell flooding the channel: its timeout still ends it in time",
              (r.killed_by, r.interpreter_ended, r.wall_time_ms, list(r.feedback)))
        r = c.cell("h", "kept + 1\n")
        check(r.result == "2" or r.state_lost, "and the session goes on", (r.result, r.stderr))
        r = c.cell("h", FORGE + "c.sendall(b'\\xff' * 8)\nimport time\ntime.sleep(30)\n")
        check(r.interpreter_ended and "control channel" in fb(r) and r.wall_time_ms < 5000,
              "a frame longer than the cap: the interpreter is killed, the reply says why",
              (r.interpreter_ended, list(r.feedback), r.wall_time_ms))
        r = c.cell("h", FORGE + "c.sendall(frame([1, 2]))\nimport time\ntime.sleep(30)\n")
        check(r.state_lost and r.interpreter_ended and "control channel" in fb(r),
              "a frame that is not a JSON object: the same", (r.interpreter_ended, list(r.feedback)))
        r = c.cell("h", FORGE + "c.close()\nos.close(3)\nprint('closed')\n")
        check(r.stdout == b"closed\n", "a cell that closes the channel runs to its end",
              (r.stdout, r.stderr))
        r = c.cell("h", "1 + 1\n")
        check(r.state_lost and r.result == "2",
              "and the next call finds a fresh interpreter", (r.state_lost, r.result,
                                                              list(r.feedback)))
        r = c.ok("print('ok')\n")
        check(r.stdout == b"ok\n", "the server goes on")
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")


# ---- refusals ----

def test_interpreter_refused(bin_dir, check):
    pb = load_pb2(bin_dir)
    s = InterpServer(bin_dir, "--workers", "1", "--zygote")
    c = Caller(s, pb)
    try:
        cases = [
            ({"session_mode": INTERP}, INVALID_ARGUMENT, "INTERPRETER needs a session_id"),
            ({"session_mode": 7, "session_id": "r"}, INVALID_ARGUMENT,
             "session_mode: 7 is not a session mode"),
            ({"session_mode": INTERP, "session_id": "r", "requirements": ["six"]},
             INVALID_ARGUMENT, "requirements: not supported in an INTERPRETER session"),
        ]
        for kw, want, text in cases:
            st, msg, _ = c.run("print(1)\n", **kw)
            check(st == want and text in msg, f"refused: {text}", (st, msg))
        c.ok("x = 1\n", session_id="f", session_mode=FILES)
        st, msg, _ = c.run("x\n", session_id="f", session_mode=INTERP)
        check(st == FAILED_PRECONDITION and "is a FILES session" in msg,
              "INTERPRETER against a FILES session: FAILED_PRECONDITION", (st, msg))
        c.cell("i", "x = 1\n")
        st, msg, _ = c.run("x\n", session_id="i", session_mode=FILES)
        check(st == FAILED_PRECONDITION and "is an INTERPRETER session" in msg,
              "FILES against an INTERPRETER session: FAILED_PRECONDITION", (st, msg))
        r = c.ok("x\n", session_id="i")
        check(r.result == "1", "the session goes on", r.result)
        check(c.info().runs_total == 3, "the refused calls ran nothing", c.info().runs_total)
        bad = c.cell("i", "print('\\ud800')\n")
        check(bad.exit_code == 1 and b"UnicodeEncodeError" in bad.stderr,
              "a lone surrogate printed: the cell's own error, the interpreter goes on",
              bad.stderr[-300:])
        r = c.ok("x + 1\n", session_id="i")
        check(r.result == "2", "state intact", r.result)
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")
    s = InterpServer(bin_dir, "--workers", "1", "--max-interpreters", "0")
    c = Caller(s, pb)
    try:
        st, msg, _ = c.run("1\n", session_id="y", session_mode=INTERP, runtime="python-zygote")
        check(st == INVALID_ARGUMENT and "needs a server started with --zygote" in msg,
              "python-zygote without --zygote: INVALID_ARGUMENT", (st, msg))
        st, msg, _ = c.run("1\n", session_id="z", session_mode=INTERP)
        check(st == FAILED_PRECONDITION and "--max-interpreters 0" in msg,
              "--max-interpreters 0: FAILED_PRECONDITION", (st, msg))
        r = c.ok("1\n")
        check(r.result == "1" and c.info().max_interpreters == 0, "stateless runs go on")
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")
    p = subprocess.run([f"{bin_dir}/sandboxd", "--max-interpreters", "-1"], capture_output=True,
                       text=True, timeout=10)
    check(p.returncode == 2 and "max-interpreters" in p.stderr,
          "a negative --max-interpreters stops the start", (p.returncode, p.stderr))


# ---- interpreters forked from a zygote (runtime python-zygote) ----

def zygotes_by_slot(c):
    return {z.slot: z for z in c.info().zygote_memory}


def test_interpreter_zygote(bin_dir, check):
    pb = load_pb2(bin_dir)
    s = InterpServer(bin_dir, "--workers", "1", "--max-interpreters", "2", "--zygote",
                     "--interpreter-grace-ms", "700", "--egress-allow", "127.0.0.1:1")
    c = Caller(s, pb)
    zyg = {"session_mode": INTERP, "runtime": "python-zygote"}
    try:
        # Interpreter slots start zygotes only once a session asks for one.
        deadline = time.monotonic() + 120
        while set(zygotes_by_slot(c)) != {0} and time.monotonic() < deadline:
            time.sleep(0.2)
        c.ok("1\n", session_id="first-cold", session_mode=INTERP)
        check(set(zygotes_by_slot(c)) == {0},
              "before any python-zygote interpreter: the worker's zygote only",
              zygotes_by_slot(c))
        c.close_session("first-cold")
        loaded = "import sys\n[m for m in ('numpy', 'matplotlib.pyplot') if m in sys.modules]\n"
        r = c.ok(loaded, session_id="z", **zyg)
        check(r.exit_code == 0 and r.result == "['numpy', 'matplotlib.pyplot']"
              and r.session_created, "the first call finds the preload imported", (r.result,
              r.stderr[-300:]))
        # From then on every interpreter slot keeps one ready.
        while set(zygotes_by_slot(c)) != {0, 1, 2} and time.monotonic() < deadline:
            time.sleep(0.2)
        forks = {k: z.forks for k, z in zygotes_by_slot(c).items()}
        check(set(forks) == {0, 1, 2} and forks[0] == 0 and sorted((forks[1], forks[2])) == [0, 1],
              "both interpreter slots' zygotes ready; the interpreter was forked from its "
              "slot's, not the worker's", forks)
        r = c.ok(loaded, session_id="cold", session_mode=INTERP)
        check(r.result == "[]", "runtime python on the same server: a fresh interpreter",
              r.result)
        ra, rb = c.cell("z", WHO), c.cell("cold", WHO)
        (ua, pa), (ub, _) = eval(ra.result), eval(rb.result)
        check(ua != ub and {ua, ub} == {s.uid_base + 1, s.uid_base + 2},
              "each runs as its interpreter slot's uid", (ua, ub))
        check(len(pa) <= 3, "it sees only its own processes", pa)
        c.cell("z", "x = 41\n")
        r = c.cell("z", "x + 1\n")
        check(r.result == "42" and not r.state_lost, "the state lives between calls", r.result)
        r = c.cell("z", "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\n")
        check(r.exit_code == 0 and [a.mime for a in r.artifacts] == ["image/png"]
              and r.artifacts[0].content[:8] == b"\x89PNG\r\n\x1a\n",
              "plt.show() in the forked interpreter comes back as a PNG",
              ([a.relative_path for a in r.artifacts], r.stderr[-300:]))
        r = c.cell("z", "import time\nprint('before', flush=True)\ntime.sleep(30)\n",
                   limits={"timeout_ms": 1000, "cpu_time_ms": 60000})
        check(r.killed_by == TIMEOUT and r.exit_code == 130 and b"KeyboardInterrupt" in r.stderr
              and not r.interpreter_ended, "a timeout interrupts the cell, the interpreter lives",
              (r.killed_by, r.exit_code, r.stderr[-300:], list(r.feedback)))
        r = c.cell("z", "x\n")
        check(r.result == "41" and not r.state_lost, "state kept after the interrupt", r.result)
        # The session's memory cap holds what the forked interpreter writes.
        cap = {"memory_bytes": 150 * MIB, "timeout_ms": 20000}
        fill = "{0} = bytearray(60 << 20)\nfor i in range(0, len({0}), 4096): {0}[i] = 1\n"
        r = c.ok(fill.format("a"), session_id="m", limits=cap, **zyg)
        r = c.cell("m", fill.format("b"), limits=cap)
        check(r.exit_code == 0 and r.killed_by == NONE, "120 MiB fit in 150 MiB",
              (r.killed_by, r.stderr[-300:]))
        r = c.cell("m", fill.format("c"), limits=cap)
        check(r.killed_by == MEMORY and r.interpreter_ended,
              "a third 60 MiB: killed at the session's cap", (r.killed_by, list(r.feedback)))
        r = c.ok(loaded, session_id="m", limits=cap, runtime="python-zygote")
        check(r.state_lost and r.result == "['numpy', 'matplotlib.pyplot']",
              "the next call starts another from the zygote (the state was lost)",
              (r.state_lost, r.result, list(r.feedback)))
        # allow_net: its own network namespace, so a fresh interpreter.
        r = c.ok(loaded, session_id="net", allow_net=["127.0.0.1:1"], **zyg)
        check(r.result == "[]" and "runs in a fresh interpreter" in fb(r),
              "python-zygote with allow_net: a fresh interpreter, and the feedback says so",
              (r.result, list(r.feedback)))
        c.close_session("net")
        c.cell("z", "import subprocess\n"
                    "p = subprocess.Popen(['sleep', '1000'], start_new_session=True)\n")
        check(any("sleep 1000" in line for line in interp_processes(s, 1, 2)),
              "a background process lives between calls")
        for sid in ("z", "cold", "m"):
            check(c.close_session(sid)[0] == OK, f"session {sid} closed")
        time.sleep(0.5)
        left = [line for line in interp_processes(s, 1, 2) if "sandbox-zygote" not in line]
        check(left == [], "after close only the slots' zygotes are left", left)
        r = c.ok(loaded, session_id="again", **zyg)
        check(r.result == "['numpy', 'matplotlib.pyplot']", "a new session forks again",
              r.result)
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")
    check(slot_processes(s.uid_base, 4) == {}, "nothing left after the server stopped",
          slot_processes(s.uid_base, 4))
