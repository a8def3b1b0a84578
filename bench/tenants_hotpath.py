#!/usr/bin/python3
"""The tenants hot path (issue 26): hello-world latency through sandbox-bench
(one call at a time) against two servers of the same build running side by
side, one with --tenants (the caller's API key checked, its policy copied,
its rate bucket and the weighted queue in the path) and one without; rounds
alternate between them, in both orders, many short rounds, so that machine
noise hits both alike. Prints each round, then the p50 and mean of every
call of each server pooled, and the ratios on/off (goal <= 1.02).

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


def one_round(bin_dir, server, script, a, record):
    """One short sandbox-bench round: its calls/s; every call's latency is
    appended to record (--record: one JSON line per call)."""
    env = dict(os.environ, SANDBOX_API_KEY=KEY)
    p = subprocess.run([f"{bin_dir}/sandbox-bench", "-e", server.tcp, "-c", str(a.concurrency),
                        "-d", str(a.seconds), "--record", record, "--json", script],
                       capture_output=True, text=True, env=env, timeout=a.seconds + 120)
    out = json.loads(p.stdout)
    bad = sum(v for k, v in out.get("status", {}).items() if k != "OK")
    if bad:
        raise RuntimeError(f"{bad} calls not OK: {out['status']}")
    with open(record) as f:
        lat = [json.loads(line)["latency_ms"] for line in f if line.strip()]
    return lat, out["throughput_rps"]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "build", "bin"))
    ap.add_argument("--rounds", type=int, default=30, help="per server")
    ap.add_argument("--seconds", type=float, default=2.0, help="per round")
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
    lat = {"off": [], "on": []}
    rps = {"off": [], "on": []}
    try:
        for name, s in servers.items():  # warm-up
            subprocess.run([f"{bin_dir}/sandbox-bench", "-e", s.tcp, "-d", "2", script],
                           capture_output=True, env=dict(os.environ, SANDBOX_API_KEY=KEY))
        for i in range(a.rounds):
            order = ("off", "on") if i % 2 == 0 else ("on", "off")
            for name in order:
                got, r = one_round(bin_dir, servers[name], script, a,
                                   os.path.join(tmp, f"{name}-{i}.jsonl"))
                lat[name] += got
                rps[name].append(r)
                print(f"round {i + 1:2} {name:3}: p50 {statistics.median(got):7.2f} ms  "
                      f"{r:6.1f} calls/s", flush=True)
    finally:
        for s in servers.values():
            s.stop()
    print(f"\n{'':14} {'calls':>6} {'p50 ms':>8} {'mean ms':>8} {'calls/s':>8}")
    row = {}
    for n in ("off", "on"):
        row[n] = (statistics.median(lat[n]), statistics.mean(lat[n]), statistics.median(rps[n]))
        print(f"--tenants {n:4} {len(lat[n]):6d} {row[n][0]:8.2f} {row[n][1]:8.2f} "
              f"{row[n][2]:8.1f}")
    ratio = row["on"][0] / row["off"][0]
    print(f"latency p50 on/off: {ratio:.3f} (goal <= 1.02: "
          f"{'met' if ratio <= 1.02 else 'NOT met'}); mean on/off: "
          f"{row['on'][1] / row['off'][1]:.3f}; throughput on/off: "
          f"{row['on'][2] / row['off'][2]:.3f}")


if __name__ == "__main__":
    main()
