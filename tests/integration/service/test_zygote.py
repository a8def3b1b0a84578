"""Zygote mode on the wire (runtime "python-zygote", --zygote; docs/ZYGOTE.md):
a real sandboxd per test, raw REQ connections with the build's generated
messages (tests/lib/harness.py), the same program run both ways where the
answer must be the same.

Tests (test_<name>, ctest service_<name>):
  zygote_refused       without --zygote: python-zygote is INVALID_ARGUMENT
                       naming only python, GetInfo lists python alone, the
                       server goes on; bad --zygote-preload names and
                       --zygote with --backend rlimit stop the start (exit 2)
  zygote_runs          hello with the cold run's uid, gid, pid, capabilities,
                       no_new_privs and seccomp; argv and args, stdin, env,
                       exit codes, uncaught exceptions, sys.exit("msg"), a
                       matplotlib plot in output/ as an artifact; the log's
                       runtime=
  zygote_limits        timeout, CancelRun, a signal, the memory limit
                       (killed_by MEMORY) and a 60 MiB run's peak memory
                       against the cold path's; nothing left but the zygote
  zygote_info          /readyz waits for the warm starts; sessions across
                       runtimes; GetInfo's zygote fields (forks counting up);
                       /metrics' zygote series (promtool), documented
  zygote_bad_preload   a preload module that does not exist: the server
                       starts and logs Python's error, python-zygote runs are
                       FAILED_PRECONDITION naming the module, python runs work
  zygote_recycling     --zygote-max-forks 3: 7 runs come from 3 zygotes (by
                       their hash seeds and GetInfo); --zygote-max-age-s 2
  zygote_requirements  a requirements run with python-zygote imports its
                       package (a zygote for its environment, which GetInfo's
                       zygote_memory names as event=run does), runs without
                       requirements do not see it
  zygote_memory        --workers 2, preload json: GetInfo's zygote_memory, an
                       entry per ready zygote (distinct slots, RSS > 1 MiB,
                       0 < PSS <= RSS), /metrics' sandboxd_zygote_rss_bytes
                       and _pss_bytes by slot agreeing with it; with
                       --zygote-max-forks 1 a slot's entry follows the zygote
                       that replaced it (forks 1 again, younger than the
                       time since the last look); a zygote killed from
                       outside (not reaped yet) is left out
"""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

from lib.harness import (RunCaller, Server, allocate_uids, check, free_port, load_pb2,
                         slot_processes)
from lib.wheelhouse import make_module_wheel

HERE = os.path.dirname(os.path.abspath(__file__))

REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
OK, CANCELLED, INVALID_ARGUMENT, FAILED_PRECONDITION = 0, 1, 3, 9
NONE, TIMEOUT, MEMORY, SIGNAL, KILLED_CANCELLED = 0, 1, 2, 4, 5
ZYG = "python-zygote"
ZYGOTE_METRICS = {
    "sandboxd_zygotes": "gauge", "sandboxd_zygote_memory_bytes": "gauge",
    "sandboxd_zygote_starts_total": "counter", "sandboxd_zygote_start_failures_total": "counter",
    "sandboxd_zygote_forks_total": "counter", "sandboxd_zygote_recycled_total": "counter",
    "sandboxd_zygote_rss_bytes": "gauge", "sandboxd_zygote_pss_bytes": "gauge",
}

IDENTITY = """
import os, socket, sys
st = dict(l.split(":", 1) for l in open("/proc/self/status"))
print(os.getuid(), os.getgid(), os.getgroups(), os.getpid(), os.getppid(), socket.gethostname(),
      os.getcwd(), [st[k].strip() for k in ("CapEff", "CapBnd", "NoNewPrivs", "Seccomp")],
      sorted(p for p in os.listdir("/proc") if p.isdigit()))
"""


class Caller(RunCaller):
    """RunCaller whose runs are python-zygote's unless told otherwise."""

    def __init__(self, server, pb):
        super().__init__(server, pb, runtime=ZYG)


class ZygoteServer(Server):
    """A sandboxd with the operations listener; with --zygote unless told
    otherwise."""
    tmp_prefix = "sbx-zyg-"

    def __init__(self, bin_dir, *extra, zygote=True, **kw):
        self.http_port = free_port()
        super().__init__(bin_dir, "--http-listen", f"http://127.0.0.1:{self.http_port}",
                         *(("--zygote",) if zygote else ()), *extra, **kw)

    def get(self, path):
        """(status, body text) of GET path on the operations listener."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}",
                                        timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def wait_warm(self, n, timeout=60):
        """True once n zygote warm starts ended (started or failed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_text()
            if text.count("event=zygote_warm ") + text.count("event=zygote_warm_failed ") >= n:
                return True
            time.sleep(0.05)
        return False


def run_lines(s):
    return [line for line in s.log_text().splitlines() if " event=run " in line]


def only_zygotes_left(s, c, n_uids, what):
    """After runs ended: the slot uids' processes are the zygotes, nothing
    of the runs."""
    zygotes = c.info().zygotes
    procs = slot_processes(s.uid_base, n_uids)
    check(len(procs) == zygotes, f"{what}: nothing of the runs is left, only the {zygotes} "
          "zygote(s)", (procs, zygotes))


# ---- without --zygote ----

def test_zygote_refused(bin_dir, check):
    pb = load_pb2(bin_dir)
    s = ZygoteServer(bin_dir, "--workers", "1", zygote=False)
    c = Caller(s, pb)
    try:
        st, msg, _ = c.run('print("hi")\n')
        check(st == INVALID_ARGUMENT and msg.startswith(
            'runtime: "python-zygote" is not supported; supported: python')
              and "(python-zygote needs a server started with --zygote)" in msg
              and "python-zygote," not in msg,
              "python-zygote without --zygote: INVALID_ARGUMENT naming the runtimes there are, "
              "not python-zygote", (st, msg))
        st, msg, _ = c.run('print("hi")\n', runtime="ruby")
        check(st == INVALID_ARGUMENT and msg.startswith(
            'runtime: "ruby" is not supported; supported: python') and ZYG not in msg,
            "an unknown runtime: the supported list starts with python, without python-zygote",
            (st, msg))
        i = c.info()
        check(list(i.runtimes)[:1] == ["python"] and ZYG not in i.runtimes and not i.zygote_enabled and i.zygotes == 0
              and i.zygote_starts_total == 0 and list(i.zygote_preload) == ["numpy",
                                                                            "matplotlib.pyplot"],
              "GetInfo: runtimes python first, no python-zygote, zygotes off (the default "
              "preload listed)",
              (list(i.runtimes), i.zygote_enabled, i.zygotes, list(i.zygote_preload)))
        r = c.ok('print("hello")\n', runtime="python")
        check(r.stdout == b"hello\n", "the server goes on serving python runs", r.stdout)
        r = c.ok('print("default")\n', runtime="")
        check(r.stdout == b"default\n", "no runtime is python", r.stdout)
        lines = run_lines(s)
        check(len(lines) == 2 and all(" runtime=python " in line for line in lines),
              "event=run says runtime=python; the refused runs ran nothing", lines)
        check(s.get("/readyz") == (200, "ready\n"), "/readyz: ready without zygotes")
        check(not slot_processes(s.uid_base, 2), "no zygote without --zygote")
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")
    check_start_faults(bin_dir)


def check_start_faults(b):
    tmp = tempfile.mkdtemp(prefix="sbx-zyg-")
    uid_base = str(allocate_uids())
    try:
        cases = [
            (["--zygote-preload", "numpy;import os"],
             'zygote-preload: "numpy;import os" is not a module name'),
            (["--zygote", "--zygote-preload", "numpy, matplotlib"],
             'zygote-preload: " matplotlib" is not a module name'),
            (["--zygote-preload", "numpy,"], "zygote-preload: ends with a comma"),
            (["--zygote", "--backend", "rlimit"], "zygote: needs a cgroup backend"),
            (["--zygote", "perhaps"], 'unexpected argument "perhaps"'),
        ]
        for flags, want in cases:
            p = subprocess.run([f"{b}/sandboxd", "--listen", f"tcp://127.0.0.1:{free_port()}",
                                "--state-dir", os.path.join(tmp, "state"), "--uid-base", uid_base,
                                *flags], capture_output=True, text=True, timeout=30)
            check(p.returncode == 2 and want in p.stderr,
                  f"sandboxd {' '.join(flags)}: exit 2, says why", (p.returncode, p.stderr))
        check(not os.path.exists(os.path.join(tmp, "state")), "and makes nothing")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---- with --zygote ----

def test_zygote_runs(bin_dir, check):
    pb = load_pb2(bin_dir)
    s = ZygoteServer(bin_dir, "--workers", "1")
    c = Caller(s, pb)
    try:
        cold = c.ok(IDENTITY, runtime="python")
        warm = c.ok(IDENTITY)
        check(cold.stdout == warm.stdout
              and cold.stdout.startswith(b"%d %d [] " % (s.uid_base, s.uid_base))
              and b"'0000000000000000', '0000000000000000', '1', '2'" in warm.stdout,
              "hello: the same uid, gid, pid, parent, hostname, cwd, no capabilities, "
              "no_new_privs, seccomp and processes as a cold run", (cold.stdout, warm.stdout))
        r = c.ok('import sys\nprint(sys.argv)\n', args=["a b", "-u", "--x=1"])
        check(r.stdout == b"['/workspace/main.py', 'a b', '-u', '--x=1']\n",
              "sys.argv: the script, then the args as given", r.stdout)
        r = c.ok("import sys\nprint(repr(sys.stdin.read()))\n", stdin=b"line 1\nline 2")
        check(r.stdout == b"'line 1\\nline 2'\n", "stdin reaches the program", r.stdout)
        r = c.ok("import sys\nprint(repr(sys.stdin.read()))\n")
        check(r.stdout == b"''\n", "no stdin: empty", r.stdout)
        r = c.ok('import os\nprint(os.environ["GREETING"], os.environ["LANG"], '
                 '"SANDBOXD_CONFIG" in os.environ)\n', env={"GREETING": "hi there", "LANG": "C"})
        check(r.stdout == b"hi there C False\n", "env from the request reaches os.environ",
              r.stdout)
        env_cold = c.ok("import os\nprint(sorted(os.environ))\n", runtime="python", env={"A": "1"})
        env_warm = c.ok("import os\nprint(sorted(os.environ))\n", env={"A": "1"})
        check(env_cold.stdout == env_warm.stdout, "the same environment as a cold run",
              (env_cold.stdout, env_warm.stdout))
        r = c.ok("import sys\nprint('out')\nsys.exit(7)\n")
        check(r.exit_code == 7 and r.killed_by == NONE and r.stdout == b"out\n",
              "an exit code passes through", (r.exit_code, r.killed_by))
        r = c.ok('import sys\nsys.exit("bad input")\n')
        check(r.exit_code == 1 and r.stderr == b"bad input\n", 'sys.exit("msg"): exit 1, the '
              "message on stderr", (r.exit_code, r.stderr))
        r = c.ok("def f():\n    raise ValueError('boom')\nf()\n")
        err = r.stderr.decode()
        check(r.exit_code == 1 and err.startswith("Traceback (most recent call last):\n")
              and 'File "/workspace/main.py", line 3, in <module>' in err
              and 'File "/workspace/main.py", line 2, in f' in err
              and err.endswith("ValueError: boom\n") and "runpy" not in err
              and "<string>" not in err,
              "an uncaught exception: exit 1, its traceback from /workspace/main.py only", err)
        cold_tb = c.ok("def f():\n    raise ValueError('boom')\nf()\n", runtime="python")
        check(cold_tb.stderr == r.stderr, "the same traceback as a cold run",
              (cold_tb.stderr, r.stderr))
        r = c.ok("import os\nos._exit(3)\n")
        check(r.exit_code == 3, "os._exit(3)", r.exit_code)
        r = c.ok("print('no newline at the end', end='')")
        check(r.stdout == b"no newline at the end", "output flushed at the end", r.stdout)
        r = c.ok("import threading, time\n"
                 "t = threading.Thread(target=lambda: (time.sleep(0.2), print('thread')))\n"
                 "t.start()\nprint('main')\n")
        check(r.stdout == b"main\nthread\n", "non-daemon threads are waited for", r.stdout)
        plot = ("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\n"
                "plt.savefig('output/plot.png')\nprint('saved')\n")
        r = c.ok(plot)
        art = {a.relative_path: a for a in r.artifacts}
        png = art.get("plot.png")
        check(r.exit_code == 0 and r.stdout == b"saved\n" and png is not None
              and png.mime == "image/png" and png.content.startswith(b"\x89PNG\r\n\x1a\n")
              and png.size == len(png.content) > 1000 and list(art) == ["plot.png"]
              and r.stderr == b"",
              "a matplotlib plot saved to output/plot.png comes back as an artifact, once "
              "(the figure left open is not saved again as figure-1.png), and nothing on "
              "stderr (no font of the zygote's warm-up drawing left on a closed descriptor)",
              (r.exit_code, r.stderr[-500:], list(art)))
        # Rich results (docs/INTERPRETER.md) from a zygote that preloaded
        # pyplot before the run's MPLBACKEND: plt.show() saves the figure.
        r = c.ok("import matplotlib, matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\n"
                 "matplotlib.get_backend()\n")
        check([a.relative_path for a in r.artifacts] == ["figure-1.png"]
              and r.artifacts[0].mime == "image/png"
              and r.result == "'module://sandboxd_inline'",
              "plt.show() in a python-zygote run: figure-1.png, and the last expression's value",
              ([a.relative_path for a in r.artifacts], r.result, r.stderr[-300:]))
        lines = run_lines(s)
        zyg = [line for line in lines if " runtime=python-zygote " in line]
        check(len(lines) == 17 and len(zyg) == 14 and all(" method=RunCode runtime=" in line
                                                          for line in lines),
              "event=run: runtime=python-zygote or runtime=python after method=", lines[:3])
        i = c.info()
        check(i.zygote_forks_total == 14, "each python-zygote run is a fork", i.zygote_forks_total)
        only_zygotes_left(s, c, 2, "after the runs")
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")


PEAK = 'x = b"\\x01" * (60 << 20)\nprint(len(x))\n'


def test_zygote_limits(bin_dir, check):
    pb = load_pb2(bin_dir)
    s = ZygoteServer(bin_dir, "--workers", "1")
    c = Caller(s, pb)
    try:
        t0 = time.monotonic()
        r = c.ok("print('spin', flush=True)\nwhile True: pass\n", limits=pb.Limits(timeout_ms=1000))
        took = time.monotonic() - t0
        check(r.killed_by == TIMEOUT and r.stdout == b"spin\n" and 900 <= r.wall_time_ms < 3000
              and took < 5, "a timeout: killed_by TIMEOUT after about 1 s, output kept",
              (r.killed_by, r.wall_time_ms, took))
        r = c.ok("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
        check(r.killed_by == SIGNAL and r.signal == 9, "a run killed by a signal: killed_by "
              "SIGNAL, signal 9", (r.killed_by, r.signal))
        cold = c.ok("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", runtime="python")
        warm = c.ok("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
        check((warm.killed_by, warm.signal) == (cold.killed_by, cold.signal) == (SIGNAL, 11),
              "SIGSEGV: the same as a cold run", ((warm.killed_by, warm.signal),
                                                   (cold.killed_by, cold.signal)))
        st, msg, rid = c.start("import os, time\nfor _ in range(3):\n    os.fork()\n"
                               "print('forked', flush=True)\ntime.sleep(60)\n",
                               limits=pb.Limits(timeout_ms=30000))
        time.sleep(1.0)
        t0 = time.monotonic()
        cst, cmsg = c.cancel(rid)
        out = c.outcome(rid)
        check(st == OK and cst == OK and out.status == OK
              and out.result.killed_by == KILLED_CANCELLED and time.monotonic() - t0 < 3,
              "CancelRun kills a forking python-zygote run", (st, msg, cst, cmsg,
                                                              out.result.killed_by))
        # Memory: the limit, and the peak as the cold path measures it.
        r = c.ok('x = b"\\x01" * (200 << 20)\nprint(len(x))\n',
                 limits=pb.Limits(memory_bytes=64 << 20))
        check(r.killed_by == MEMORY and r.stdout == b"", "past limits.memory_bytes: killed_by "
              "MEMORY", (r.killed_by, r.exit_code, r.stderr[-300:]))
        cold_m = c.ok('x = b"\\x01" * (200 << 20)\nprint(len(x))\n', runtime="python",
                      limits=pb.Limits(memory_bytes=64 << 20))
        check(cold_m.killed_by == MEMORY, "(the same run on the cold path: MEMORY)",
              cold_m.killed_by)
        peaks = {ZYG: [], "python": []}
        for _ in range(3):  # interleaved
            for rt in peaks:
                r = c.ok(PEAK, runtime=rt, limits=pb.Limits(memory_bytes=256 << 20))
                peaks[rt].append(r.peak_memory_bytes if r.stdout == b"62914560\n" else 0)
        zp, cp = sorted(peaks[ZYG])[1], sorted(peaks["python"])[1]
        print(f"     peak of the 60 MiB run: zygote {zp / 2**20:.1f} MiB, cold {cp / 2**20:.1f} "
              f"MiB (medians of 3; all: {peaks})")
        check(cp > 0 and 0.8 * cp <= zp <= 1.2 * cp and zp >= 60 << 20,
              "a 60 MiB run's peak memory is within 20% of the cold path's (and holds the 60 MiB)",
              peaks)
        r = c.ok("print('after')\n")
        check(r.stdout == b"after\n", "the zygote serves after kills and OOMs", r.stdout)
        only_zygotes_left(s, c, 2, "after timeouts, kills, a cancel and OOMs")
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")


def test_zygote_info(bin_dir, check):
    pb = load_pb2(bin_dir)
    s = ZygoteServer(bin_dir, "--workers", "2", "--zygote-max-forks", "50",
                     "--zygote-max-age-s", "600")
    c = Caller(s, pb)
    try:
        check_readiness(s)
        i = c.info()
        check(list(i.runtimes)[:2] == ["python", ZYG] and i.zygote_enabled
              and list(i.zygote_preload) == ["numpy", "matplotlib.pyplot"]
              and i.zygote_max_forks == 50 and i.zygote_max_age_s == 600,
              "GetInfo: both runtimes, the preload list, the recycling bounds",
              (list(i.runtimes), list(i.zygote_preload), i.zygote_max_forks, i.zygote_max_age_s))
        check(i.zygotes == 2 and i.zygote_starts_total == 2 and i.zygote_start_failures_total == 0
              and i.zygote_forks_total == 0 and i.zygote_recycled_total == 0,
              "GetInfo: two zygotes warm, none forked yet", str(i)[-400:])
        check(20 << 20 < i.zygote_memory_bytes < 1 << 30,
              "GetInfo: the zygotes' memory (numpy and matplotlib: tens of MiB)",
              i.zygote_memory_bytes)
        # Sessions: files persist between calls, whichever runtime.
        r1 = c.ok("open('notes.txt', 'w').write('kept')\nprint('wrote')\n", session_id="zs-1")
        r2 = c.ok("print(open('notes.txt').read())\nopen('output/o.txt', 'w').write('o')\n",
                  session_id="zs-1")
        r3 = c.ok("import os\nprint(open('notes.txt').read(), sorted(os.listdir('output')))\n",
                  runtime="python", session_id="zs-1")
        r4 = c.ok("print(open('notes.txt').read())\n", session_id="zs-1")
        check(r1.session_created and not r2.session_created and r2.stdout == b"kept\n"
              and r3.stdout == b"kept ['o.txt']\n" and r4.stdout == b"kept\n",
              "sessions with python-zygote: files persist between calls, across runtimes",
              (r1.session_created, r2.stdout, r3.stdout, r4.stdout))
        st, msg, pl = c.w.call("CloseSession", pb.CloseSessionRequest(session_id="zs-1"))
        check(st == OK, "the session closes", (st, msg))
        i2 = c.info()
        check(i2.zygote_forks_total == 3, "GetInfo: forks count the python-zygote runs only",
              i2.zygote_forks_total)
        for _ in range(4):
            c.ok("print(1)\n")
        i3 = c.info()
        check(i3.zygote_forks_total == 7 and i3.zygotes == 2 and i3.zygote_starts_total == 2,
              "GetInfo: forks count up, the same two zygotes", (i3.zygote_forks_total,
                                                                 i3.zygotes))
        check_metrics(s, i3)
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")


def check_readiness(s):
    """From the first probe on (the server has just logged event=ready), a
    200 only once every worker's warm start is in the log."""
    seen, premature = [], []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        st, body = s.get("/readyz")
        warm = s.log_text().count("event=zygote_warm ")
        seen.append((st, body.strip()))
        if st == 200:
            if warm < 2:
                premature.append(warm)
            break
        time.sleep(0.02)
    check(seen and seen[-1][0] == 200 and not premature,
          "/readyz says ready only after both zygotes' warm starts", (seen[-3:], premature))
    check(seen[0][0] == 503 and re.fullmatch(
        r"zygotes starting: [12] of 2 workers still importing --zygote-preload", seen[0][1]),
        "/readyz: 503 while the zygotes import, saying so", seen[:2])
    ms = [int(m) for m in re.findall(r"event=zygote_warm slot=\d ms=(\d+) ", s.log_text())]
    check(len(ms) == 2 and all(ms), "one event=zygote_warm line per worker, with its time", ms)


def check_metrics(s, info):
    st, text = s.get("/metrics")
    check(st == 200, "/metrics: 200", st)
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    values = {m: float(v) for m, v in re.findall(r"^(sandboxd_zygote\S*) (\S+)$", text, re.M)}
    check({m: types.get(m) for m in ZYGOTE_METRICS} == ZYGOTE_METRICS,
          "/metrics: the zygote families with their types", types)
    want = {"sandboxd_zygotes": info.zygotes,
            "sandboxd_zygote_starts_total": info.zygote_starts_total,
            "sandboxd_zygote_start_failures_total": info.zygote_start_failures_total,
            "sandboxd_zygote_forks_total": info.zygote_forks_total,
            "sandboxd_zygote_recycled_total": info.zygote_recycled_total}
    check(all(values.get(k) == v for k, v in want.items())
          and values.get("sandboxd_zygote_memory_bytes", 0) > 20 << 20,
          "/metrics: the zygote figures GetInfo gives", (values, want))
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                       text=True)
    check(p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(),
          "promtool check metrics passes with no finding", (p.returncode, p.stdout, p.stderr))
    with open(os.path.join(REPO, "docs", "OPERATIONS.md")) as f:
        doc = f.read()
    check(all(f"`{m}`" in doc for m in ZYGOTE_METRICS), "docs/OPERATIONS.md lists them",
          [m for m in ZYGOTE_METRICS if f"`{m}`" not in doc])


def test_zygote_bad_preload(bin_dir, check):
    pb = load_pb2(bin_dir)
    s = ZygoteServer(bin_dir, "--workers", "2", "--zygote-preload", "json,sbx_no_such_module")
    c = Caller(s, pb)
    try:
        check(s.wait_warm(2), "the server starts and both warm starts end")
        fails = [line for line in s.log_text().splitlines() if "event=zygote_warm_failed " in line]
        check(len(fails) == 2 and all(
            "import sbx_no_such_module failed: ModuleNotFoundError: No module named "
            "'sbx_no_such_module'" in line for line in fails),
            "each worker logs the failed start with Python's error", fails)
        check(s.get("/readyz") == (200, "ready\n"), "/readyz: ready (python runs are served)")
        st, msg, _ = c.run("print('never')\n")
        check(st == FAILED_PRECONDITION and "sbx_no_such_module" in msg.splitlines()[0]
              and "ModuleNotFoundError" in msg.splitlines()[0]
              and msg.splitlines()[0].endswith("; nothing ran") and "Traceback" in msg,
              "a python-zygote run: FAILED_PRECONDITION naming the module, nothing ran",
              (st, msg[:600]))
        r = c.ok("print('cold')\n", runtime="python")
        check(r.stdout == b"cold\n", "python runs still work", r.stdout)
        i = c.info()
        # The run's slot had failed its warm start a moment before: the
        # run gets that failure without another start (retried after 10 s).
        check("ms ago; tried again 10 s after" in msg.splitlines()[0],
              "the run's answer is the slot's recent failure, not a new start", msg[:300])
        check(i.zygotes == 0 and i.zygote_start_failures_total == 2 and i.zygote_starts_total == 0
              and i.zygote_forks_total == 0, "GetInfo: no zygote, two failed starts",
              (i.zygotes, i.zygote_start_failures_total, i.zygote_starts_total))
        check(any(" runtime=python-zygote " in line and " status=FAILED_PRECONDITION " in line
                  for line in run_lines(s)), "event=run says runtime and status of the refusal")
        check(not slot_processes(s.uid_base, 3), "no zygote left half started")
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")


HASH = "print(hash('sandboxd'))\n"


def test_zygote_recycling(bin_dir, check):
    pb = load_pb2(bin_dir)
    s = ZygoteServer(bin_dir, "--workers", "1", "--zygote-max-forks", "3")
    c = Caller(s, pb)
    try:
        hashes = [c.ok(HASH).stdout for _ in range(7)]
        i = c.info()
        check(i.zygote_recycled_total >= 2 and i.zygote_starts_total >= 3
              and i.zygote_forks_total == 7 and i.zygotes == 1,
              "--zygote-max-forks 3: 7 runs recycle the zygote twice (three starts)",
              (i.zygote_recycled_total, i.zygote_starts_total, i.zygote_forks_total))
        check(len(set(hashes[0:3])) == 1 and len(set(hashes[3:6])) == 1
              and len(set(hashes)) == 3 and hashes[6] not in hashes[:6],
              "runs 1-3, 4-6 and 7 come from three zygotes (their string-hash seeds)", hashes)
        only_zygotes_left(s, c, 2, "after recycling")
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")
    s = ZygoteServer(bin_dir, "--workers", "1", "--zygote-max-age-s", "2")
    c = Caller(s, pb)
    try:
        check(s.wait_warm(1), "the zygote is warm")
        h1 = c.ok(HASH).stdout
        h2 = c.ok(HASH).stdout
        time.sleep(2.5)
        h3 = c.ok(HASH).stdout
        i = c.info()
        check(h1 == h2 != h3 and i.zygote_recycled_total == 1 and i.zygote_starts_total == 2,
              "--zygote-max-age-s 2: a zygote older than that is replaced at the next run",
              (h1, h2, h3, i.zygote_recycled_total, i.zygote_starts_total))
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")


def test_zygote_requirements(bin_dir, check):
    pb = load_pb2(bin_dir)
    wh = tempfile.mkdtemp(prefix="sbx-wheels-")
    os.chmod(wh, 0o755)
    make_module_wheel(wh, "sbx-zyg-alpha", "1.0", "alpha from the wheelhouse")
    s = ZygoteServer(bin_dir, "--workers", "1", "--offline", "1", "--wheelhouse", wh)
    c = Caller(s, pb)
    try:
        check(s.wait_warm(1), "the zygote is warm")
        code = ("import sbx_zyg_alpha, numpy, sys\nprint(sbx_zyg_alpha.VALUE, "
                "'numpy' in sys.modules)\n")
        r = c.ok(code, requirements=["sbx-zyg-alpha==1.0"])
        check(r.exit_code == 0 and r.stdout == b"alpha from the wheelhouse True\n",
              "a requirements run with python-zygote imports its package (and the preload)",
              (r.stdout, r.stderr[-500:], list(r.feedback)))
        i1 = c.info()
        r = c.ok("import importlib.util\nprint(importlib.util.find_spec('sbx_zyg_alpha'))\n")
        i2 = c.info()
        env = [z.environment for z in i1.zygote_memory]
        check(len(env) == 1 and re.fullmatch(r"[0-9a-f]{12}", env[0])
              and any(f" env={env[0]} " in line for line in run_lines(s))
              and [z.environment for z in i2.zygote_memory] == [""],
              "GetInfo's zygote_memory names the environment a zygote was started for (as "
              "event=run's env= does), \"\" for the default one",
              (env, [z.environment for z in i2.zygote_memory], run_lines(s)[:2]))
        check(r.stdout == b"None\n", "a run without requirements does not see it", r.stdout)
        r = c.ok(code, requirements=["sbx-zyg-alpha==1.0"])
        i3 = c.info()
        check(r.stdout == b"alpha from the wheelhouse True\n", "and the next requirements run "
              "does again", r.stdout)
        check(i1.zygote_starts_total == 2 and i2.zygote_starts_total == 3
              and i3.zygote_starts_total == 4 and i3.zygote_forks_total == 3
              and i3.environment_builds_total == 1,
              "a zygote per environment: restarted when the next run needs another",
              [(i.zygote_starts_total, i.zygote_recycled_total) for i in (i1, i2, i3)])
        lines = run_lines(s)
        check(any(" runtime=python-zygote " in line and re.search(r" env=[0-9a-f]{12} ", line)
                  for line in lines), "event=run names runtime and environment", lines[-1:])
        only_zygotes_left(s, c, 2, "after requirements runs")
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")
        shutil.rmtree(wh, ignore_errors=True)


def zygote_memory_metrics(s):
    """{(family, slot): value} of /metrics' per-zygote memory series."""
    st, text = s.get("/metrics")
    check(st == 200, "/metrics: 200", st)
    return {(m, int(slot)): int(float(v)) for m, slot, v in re.findall(
        r'^sandboxd_zygote_(rss|pss)_bytes\{slot="(\d+)"\} (\S+)$', text, re.M)}


def proc_state(pid):
    """A process's state letter (R, S, Z...), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def run_slot(s, n):
    """The slot event=run names for the n-th run (0-based)."""
    return int(re.search(r" slot=(\d+) ", run_lines(s)[n]).group(1))


def test_zygote_memory(bin_dir, check):
    pb = load_pb2(bin_dir)
    s = ZygoteServer(bin_dir, "--workers", "2", "--zygote-preload", "json",
                     "--zygote-max-forks", "1")
    c = Caller(s, pb)
    try:
        check(s.wait_warm(2), "both zygotes are warm")
        check(c.ok("print('one')\n").stdout == b"one\n", "a python-zygote run")
        i = c.info()
        t_look = time.monotonic()
        zm = {z.slot: z for z in i.zygote_memory}
        check(i.zygotes == 2 and len(i.zygote_memory) == 2 and sorted(zm) == [0, 1],
              "GetInfo: a zygote_memory entry per running zygote, one per slot",
              (i.zygotes, str(i.zygote_memory)))
        check(all(z.rss_bytes > 1 << 20 and 0 < z.pss_bytes <= z.rss_bytes and z.environment == ""
                  for z in zm.values()),
              "each: RSS above 1 MiB, 0 < PSS <= RSS, the default environment",
              str(i.zygote_memory))
        first = run_slot(s, 0)
        check(zm[first].forks == 1 and zm[1 - first].forks == 0
              and all(0 < z.age_ms < 120000 for z in zm.values()),
              "forks: the run's slot 1, the other 0; ages under the test's time",
              (first, str(i.zygote_memory)))
        m = zygote_memory_metrics(s)
        check(sorted(m) == [("pss", 0), ("pss", 1), ("rss", 0), ("rss", 1)]
              and all(0.5 < m[(k, z.slot)] / getattr(z, f"{k}_bytes") < 2
                      for z in zm.values() for k in ("rss", "pss")),
              "/metrics: sandboxd_zygote_rss_bytes and _pss_bytes by slot, GetInfo's figures "
              "(the same order of magnitude)", (m, str(i.zygote_memory)))
        # --zygote-max-forks 1: the next run on the first run's slot finds
        # its zygote due and gets a fresh one.
        n = 1
        while n < 12:
            c.ok("print('again')\n")
            n += 1
            if run_slot(s, n - 1) == first:
                break
        i2 = c.info()
        since_ms = (time.monotonic() - t_look) * 1000
        z2 = {z.slot: z for z in i2.zygote_memory}
        check(run_slot(s, n - 1) == first, "a later run came to the same slot",
              [run_slot(s, k) for k in range(n)])
        check(first in z2 and z2[first].forks == 1 and z2[first].age_ms <= since_ms
              and z2[first].rss_bytes > 1 << 20 and 0 < z2[first].pss_bytes <= z2[first].rss_bytes
              and i2.zygote_recycled_total >= 1 and i2.zygote_starts_total >= 3,
              "after the replacement the slot's entry is the new zygote's: forks 1 again, younger "
              "than the time since the last look", (str(z2.get(first)), since_ms, zm[first].age_ms,
                                                     i2.zygote_recycled_total))
        m2 = zygote_memory_metrics(s)
        check(("rss", first) in m2 and 0.5 < m2[("rss", first)] / z2[first].rss_bytes < 2,
              "/metrics follows the new zygote too", (m2, str(z2.get(first))))
        only_zygotes_left(s, c, 2, "after the runs")
        # A zygote killed from outside stays unreaped until its slot's next
        # run: the read of its memory fails and its entry is left out.
        victim = [p for p, u in slot_processes(s.uid_base, 2).items() if u == s.uid_base + first]
        check(len(victim) == 1, "the first slot's zygote is found by its uid", victim)
        os.kill(victim[0], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc_state(victim[0]) not in ("Z", None):
            time.sleep(0.02)
        i3 = c.info()
        check(proc_state(victim[0]) == "Z" and [z.slot for z in i3.zygote_memory] == [1 - first]
              and ("rss", first) not in zygote_memory_metrics(s),
              "a dead zygote (not reaped yet) is left out of GetInfo and /metrics, the other "
              "slot's stays", (proc_state(victim[0]), str(i3.zygote_memory)))
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")
