#!/usr/bin/python3
"""Two builds of sandboxd side by side: hello-world throughput and latency
through sandbox-bench against a server of build A, then of build B, rounds
alternating so that machine noise hits both alike. Prints each round, the
medians and the ratio B/A. For refactors that must not change speed.

  ./scripts/build                                   # B: this tree, build/bin
  git worktree add /tmp/a main && (cd /tmp/a && cmake -S . -B build -DBUILD_TESTING=OFF \\
      && cmake --build build -j2)                   # A: main
  /usr/bin/python3 bench/ab.py --a /tmp/a/build/bin --b build/bin

Needs root (each round starts a server of its own, on defaults but for
--workers); the same sandbox-bench (B's) drives both.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
from harness import Server  # noqa: E402


def one_round(bin_dir, bench, script, a):
    s = Server(bin_dir, a.uid_base, "--workers", str(a.workers))
    try:
        base = [bench, "-e", s.tcp, "-c", str(a.concurrency)]
        subprocess.run(base + ["-d", "2", script], capture_output=True, timeout=120)  # warm-up
        p = subprocess.run(base + ["-d", str(a.seconds), "--json", script],
                           capture_output=True, text=True, timeout=300)
        out = json.loads(p.stdout)
        return out["throughput_rps"], out["latency_ms"]["p50"]
    finally:
        s.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="bin dir of build A (the baseline)")
    ap.add_argument("--b", required=True, help="bin dir of build B")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=8.0, help="per round")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--uid-base", type=int, default=47000)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("ab.py: needs root (sandboxd does)")
    bench = os.path.join(a.b, "sandbox-bench")
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write('print("hello")\n')
        script = f.name
    res = {"A": [], "B": []}
    try:
        for i in range(a.rounds):
            for name, bin_dir in (("A", a.a), ("B", a.b)) if i % 2 == 0 else (("B", a.b), ("A", a.a)):
                rps, p50 = one_round(bin_dir, bench, script, a)
                res[name].append((rps, p50))
                print(f"round {i + 1} {name}: {rps:7.1f} req/s, p50 {p50:6.1f} ms", flush=True)
    finally:
        os.unlink(script)
    med = {k: (statistics.median(r for r, _ in v), statistics.median(p for _, p in v))
           for k, v in res.items()}
    print(f"median A: {med['A'][0]:.1f} req/s, p50 {med['A'][1]:.1f} ms")
    print(f"median B: {med['B'][0]:.1f} req/s, p50 {med['B'][1]:.1f} ms")
    print(f"ratio B/A: throughput {med['B'][0] / med['A'][0]:.3f}, "
          f"p50 latency {med['B'][1] / med['A'][1]:.3f}")


if __name__ == "__main__":
    main()
