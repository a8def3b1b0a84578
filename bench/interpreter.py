#!/usr/bin/python3
"""Interpreter sessions (issue 17) against stateless runs, measured in one
interleaved run.

Starts its own sandboxd (needs root; uid base 47500, --workers 2) unless
--url is given. Every round makes a new INTERPRETER session whose first call
imports numpy and matplotlib (not timed), then times, alternating which goes
first:

  second:    the session's second call, which uses numpy and pyplot
             (SECOND below), from a running client over one connection;
  stateless: the same code as a stateless run (which imports them itself).
             Ratio second / stateless: goal <= 0.05.

For reference, the same for print("hello") (no imports), and the first
call's own time (the interpreter's start plus the imports). Then, in rounds
of their own (first_call_vs_bare), alternating which goes first:

  first:     the first call of a new INTERPRETER session, `import numpy,
             matplotlib.pyplot` (IMPORTS): the session's start plus the
             imports (runtime python: a fresh interpreter; python-zygote,
             bench/run-all's: one forked from the slot's zygote);
  bare:      `/usr/bin/python3 -I -c IMPORTS`, a cold start.
             Ratio first / bare: goal <= 0.15 (issue 28).

Medians of --rounds rounds; the machine is shared, so only ratios measured
side by side mean anything. --json prints the figures as one JSON object;
bench/run-all calls first_call_vs_bare() itself.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
from harness import WireCaller, load_pb2  # noqa: E402

FIRST = ("import numpy as np\nimport matplotlib\nimport matplotlib.pyplot as plt\n"
         "data = np.random.default_rng(1).normal(size=100_000)\n")
SECOND = ("import numpy as np\nimport matplotlib.pyplot as plt\n"
          "x = np.linspace(0, 1, 1000)\nfloat((x ** 2).mean())\n")
HELLO = 'print("hello")\n'
IMPORTS = "import numpy, matplotlib.pyplot\n"
INTERP = 2


def start_server(bin_dir, tmp, zygote=False):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(os.path.join(tmp, "sandboxd.log"), "wb")
    p = subprocess.Popen([f"{bin_dir}/sandboxd", "--listen", f"tcp://127.0.0.1:{port}",
                          "--state-dir", os.path.join(tmp, "state"), "--uid-base", "47500",
                          "--workers", "2", *(["--zygote"] if zygote else [])],
                         stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if "event=ready" in open(os.path.join(tmp, "sandboxd.log")).read():
            return p, port
        if p.poll() is not None:
            raise RuntimeError(open(os.path.join(tmp, "sandboxd.log")).read()[-2000:])
        time.sleep(0.05)
    raise RuntimeError("sandboxd not ready")


def timed(w, pb, code, **kw):
    req = pb.RunCodeRequest(code=code, **kw)
    req.limits.timeout_ms = 60000
    t0 = time.perf_counter()
    st, msg, pl = w.call("RunCode", req)
    dt = time.perf_counter() - t0
    if st != 0:
        raise RuntimeError(f"RunCode: {st} {msg}")
    r = pb.RunCodeResponse.FromString(pl)
    if r.exit_code != 0 or r.killed_by != 0:
        raise RuntimeError(f"run failed: {r.exit_code} {r.killed_by} {r.stderr[-500:]}")
    return dt, r


def warm_zygote_interpreters(w, pb, timeout_s=300):
    """A server's interpreter slots start their zygotes after the first
    python-zygote interpreter session (docs/INTERPRETER.md): one such
    session, then waits until every slot, workers' and interpreters', has
    one ready."""
    sid = f"bench-warm-{os.getpid()}"
    timed(w, pb, HELLO, session_id=sid, session_mode=INTERP, runtime="python-zygote")
    w.call("CloseSession", pb.CloseSessionRequest(session_id=sid))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        st, msg, pl = w.call("GetInfo", pb.GetInfoRequest())
        info = pb.GetInfoResponse.FromString(pl)
        if len(info.zygote_memory) >= info.workers + info.max_interpreters:
            return
        time.sleep(0.5)
    raise RuntimeError("the interpreter slots' zygotes did not start")


def first_call_vs_bare(w, pb, rounds, tag="first", runtime="python"):
    """Medians (ms) of `rounds` alternating pairs: first_ms, a new
    INTERPRETER session's first call running IMPORTS (the session closed
    after it) with `runtime` (python-zygote: the interpreter forked from its
    slot's zygote, on a server with --zygote), and bare_ms, /usr/bin/python3
    -I -c IMPORTS."""
    first, bare = [], []
    subprocess.run(["/usr/bin/python3", "-I", "-c", IMPORTS], check=True)  # warm the cache
    for i in range(rounds):
        for kind in (("session", "bare") if i % 2 == 0 else ("bare", "session")):
            if kind == "bare":
                t0 = time.perf_counter()
                subprocess.run(["/usr/bin/python3", "-I", "-c", IMPORTS], check=True)
                bare.append(time.perf_counter() - t0)
                continue
            sid = f"bench-{tag}-{os.getpid()}-{i}"
            first.append(timed(w, pb, IMPORTS, session_id=sid, session_mode=INTERP,
                               runtime=runtime)[0])
            w.call("CloseSession", pb.CloseSessionRequest(session_id=sid))
    return {"first_ms": statistics.median(first) * 1e3, "bare_ms": statistics.median(bare) * 1e3}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "build", "bin"))
    ap.add_argument("--url", help="tcp://HOST:PORT of a running sandboxd (default: start one)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--runtime", default="python", choices=("python", "python-zygote"),
                    help="the sessions' runtime; python-zygote starts the server with --zygote "
                         "(its default preload, numpy and matplotlib.pyplot), and each session's "
                         "interpreter is forked from its slot's zygote")
    ap.add_argument("--json", action="store_true",
                    help="print the figures as one JSON object instead of text")
    a = ap.parse_args()
    pb = load_pb2(a.bin_dir)
    tmp = tempfile.mkdtemp(prefix="sbx-bench-interp-")
    os.chmod(tmp, 0o755)
    proc = None
    try:
        if a.url:
            port = int(a.url.rsplit(":", 1)[1])
        else:
            proc, port = start_server(a.bin_dir, tmp, zygote=a.runtime == "python-zygote")
        w = WireCaller(port, pb, timeout=120)
        timed(w, pb, HELLO)  # warm the server's caches
        if a.runtime == "python-zygote":
            warm_zygote_interpreters(w, pb)
        first, second, stateless, hello_s, hello_l = [], [], [], [], []
        results = set()
        for i in range(a.rounds):
            sid = f"bench-{os.getpid()}-{i}"
            dt, _ = timed(w, pb, FIRST, session_id=sid, session_mode=INTERP, runtime=a.runtime)
            first.append(dt)
            pair = [("session", SECOND), ("stateless", SECOND)]
            if i % 2:
                pair.reverse()
            for kind, code in pair:
                if kind == "session":
                    dt, r = timed(w, pb, code, session_id=sid)
                    second.append(dt)
                else:
                    dt, r = timed(w, pb, code)
                    stateless.append(dt)
                results.add(r.result)
            for kind in (("session", "stateless") if i % 2 == 0 else ("stateless", "session")):
                if kind == "session":
                    hello_s.append(timed(w, pb, HELLO, session_id=sid)[0])
                else:
                    hello_l.append(timed(w, pb, HELLO)[0])
            w.call("CloseSession", pb.CloseSessionRequest(session_id=sid))
        if len(results) != 1:
            raise RuntimeError(f"the session and the stateless run disagree: {results}")
        med = {k: statistics.median(v) * 1000 for k, v in
               (("first", first), ("second", second), ("stateless", stateless),
                ("hello_s", hello_s), ("hello_l", hello_l))}
        ratio = med["second"] / med["stateless"]
        fb = first_call_vs_bare(w, pb, a.rounds, runtime=a.runtime)
        if a.json:
            print(json.dumps({"rounds": a.rounds, "runtime": a.runtime, "median_ms": med,
                              "first_call": fb}))
            w.close()
            return
        print(f"rounds: {a.rounds}; runtime {a.runtime}; result of both: {results.pop()}")
        print(f"second call in a session that imported numpy+matplotlib: {med['second']:.1f} ms "
              f"vs the same code stateless: {med['stateless']:.1f} ms -> ratio {ratio:.3f} "
              f"(goal <= 0.05: {'met' if ratio <= 0.05 else 'NOT met'})")
        print(f"hello in a session: {med['hello_s']:.1f} ms vs stateless: {med['hello_l']:.1f} ms "
              f"-> ratio {med['hello_s'] / med['hello_l']:.3f}")
        print(f"first call (interpreter start + imports): {med['first']:.1f} ms")
        r = fb["first_ms"] / fb["bare_ms"]
        print(f"first call importing numpy, matplotlib.pyplot: {fb['first_ms']:.1f} ms vs bare "
              f"python3 -I -c: {fb['bare_ms']:.1f} ms -> ratio {r:.3f} "
              f"(goal <= 0.15: {'met' if r <= 0.15 else 'NOT met'})")
        w.close()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
