#!/usr/bin/python3
"""The tenants hot path (issue 26): hello-world latency through sandbox-bench
(one call at a time) against two servers of the same build running side by
side, one with --tenants (the caller's API key checked, its policy copied,
its rate bucket and the weighted queue in the path) and one without; rounds
alternate between them, in both orders, so that machine noise hits both
alike. Prints each round, the medians and the ratio on/off (goal <= 1.02).

Both servers get the same requests (the same key in the envelope: without
--tenants it is not looked at) and the same flags but --tenants.

  flock /tmp/sbx-e2e.lock /usr/bin/python3 bench/tenants_hotpath.py --bin-dir build/bin

Needs root (sandboxd does).
"""
import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
from harness import Server  # noqa: E402

KEY = "bench-hotpath-key-0123456789abcdef"


def one_round(bin_dir, server, script, a):
    env = dict(os.environ, SANDBOX_API_KEY=KEY)
    p = subprocess.run([f"{bin_dir}/sandbox-bench", "-e", server.tcp, "-c", str(a.concurrency),
                        "-d", str(a.seconds), "--json", script],
                       capture_output=True, text=True, env=env, timeout=a.seconds + 120)
    out = json.loads(p.stdout)
    bad = sum(v for k, v in out.get("status", {}).items() if k != "OK")
    if bad:
        raise RuntimeError(f"{bad} calls not OK: {out['status']}")
    return out["latency_ms"]["p50"], out["throughput_rps"]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "build", "bin"))
    ap.add_argument("--rounds", type=int, default=6, help="per server")
    ap.add_argument("--seconds", type=float, default=8.0, help="per round")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("tenants_hotpath.py: needs root (sandboxd does)")
    bin_dir = os.path.abspath(a.bin_dir)
    tmp = tempfile.mkdtemp(prefix="sbx-hotpath-")
    script = os.path.join(tmp, "hello.py")
    with open(script, "w") as f:
        f.write('print("hello")\n')
    tenants = os.path.join(tmp, "tenants.json")
    with open(tenants, "w") as f:
        json.dump({"tenants": [{"name": "bench", "weight": 1, "api_keys_sha256": [
            hashlib.sha256(KEY.encode()).hexdigest()]}]}, f)
    servers = {"off": Server(bin_dir, "--workers", str(a.workers)),
               "on": Server(bin_dir, "--workers", str(a.workers), "--tenants", tenants)}
    res = {"off": [], "on": []}
    try:
        for name, s in servers.items():  # warm-up
            subprocess.run([f"{bin_dir}/sandbox-bench", "-e", s.tcp, "-d", "2", script],
                           capture_output=True, env=dict(os.environ, SANDBOX_API_KEY=KEY))
        for i in range(a.rounds):
            order = ("off", "on") if i % 2 == 0 else ("on", "off")
            for name in order:
                p50, rps = one_round(bin_dir, servers[name], script, a)
                res[name].append((p50, rps))
                print(f"round {i + 1} {name:3}: p50 {p50:7.2f} ms  {rps:7.1f} calls/s", flush=True)
    finally:
        for s in servers.values():
            s.stop()
    med = {n: (statistics.median(p for p, _ in r), statistics.median(x for _, x in r))
           for n, r in res.items()}
    print(f"\n{'':14} {'p50 ms':>8} {'calls/s':>8}")
    for n in ("off", "on"):
        print(f"--tenants {n:4} {med[n][0]:8.2f} {med[n][1]:8.1f}")
    ratio = med["on"][0] / med["off"][0]
    print(f"latency on/off: {ratio:.3f} (goal <= 1.02: {'met' if ratio <= 1.02 else 'NOT met'}); "
          f"throughput on/off: {med['on'][1] / med['off'][1]:.3f}")


if __name__ == "__main__":
    main()
