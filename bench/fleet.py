#!/usr/bin/python3
"""A fleet of sandboxd servers under load, through the Python client's
multi-endpoint support (sandboxd.AsyncClient with every server's URL).

1. Scaling: 1, 2 and 4 servers (each on its own loopback address,
   127.0.0.2 up, --workers 2) under an I/O-bound load (runs that sleep
   --sleep-s, and hello worlds), concurrency 4 x workers x servers so that
   every server's queue stays full: throughput, its ratio to one server,
   latency percentiles. I/O-bound so that scaling shows on a 2-CPU machine;
   CPU-bound runs scale with CPUs, not servers.
2. Failure: 4 servers under the mixed load (hello, sleep, a CPU spin past its
   timeout, an allocation past its memory limit, an output flood, a fork
   bomb, an abort), one server killed with SIGKILL half way through. Checks:
   every call to a live server answered and classified as its kind must be
   (no lost replies); the calls in flight to the dead one answered with a
   clear status (UNKNOWN or DEADLINE_EXCEEDED: "may have run") and not sent
   elsewhere; no run id in two servers' logs (nothing ran twice); later calls
   spread over the three left.

Prints a table and exits 1 when an invariant is broken. Needs root (the
servers do); the servers, their state and their uids (--uid-base up, 100 per
server) are its own, stopped and removed at the end, even on failure.

  /usr/bin/python3 bench/fleet.py --bin-dir build/bin
  /usr/bin/python3 bench/fleet.py --bin-dir build/bin --duration 10 --skip-scaling
"""
import argparse
import asyncio
import os
import re
import shutil
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
from harness import SandboxdProcess, free_port  # noqa: E402

# kind: (weight in the mixed load, code, limits, the killed_by it must get)
KINDS = {
    "hello": (30, 'print("hello")\n', {}, "none"),
    "sleep": (30, "import time\ntime.sleep({sleep})\nprint('slept')\n", {}, "none"),
    "spin": (8, "while True:\n    pass\n", {"timeout_ms": 300}, "timeout"),
    "memory": (8, "x = bytearray(512 << 20)\n", {"memory_bytes": 64 << 20}, "memory"),
    "flood": (8, "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
              {"output_bytes": 16 << 10}, "output_limit"),
    "forkbomb": (4, "import os\nwhile True:\n    try:\n        os.fork()\n"
                    "    except OSError:\n        pass\n",
                 {"max_processes": 16, "timeout_ms": 500}, "timeout"),
    "abort": (8, "import os\nos.abort()\n", {}, "signal"),
}


class FleetServer(SandboxdProcess):
    def __init__(self, bin_dir, tmp, index, port, uid_base, workers):
        self.address = f"127.0.0.{2 + index}"
        self.url = f"tcp://{self.address}:{port}"
        self.state = os.path.join(tmp, f"state-{index}")
        self.log_path = os.path.join(tmp, f"sandboxd-{index}.log")
        self.cmd = [f"{bin_dir}/sandboxd", "--listen", self.url, "--state-dir", self.state,
                    "--uid-base", str(uid_base), "--workers", str(workers)]
        self.spawn(self.cmd, ready_timeout=30)

    def restart(self):
        """A new sandboxd on the same state dir: it clears what the last one left."""
        self.spawn(self.cmd, ready_timeout=30)

    def run_ids(self):
        return set(re.findall(r"event=run run_id=(\S+)", self.log_text()))

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)


def percentile(values, p):
    if not values:
        return 0.0
    v = sorted(values)
    return v[min(len(v) - 1, int(p / 100.0 * (len(v) - 1) + 0.5))]


async def one_call(client, kind, run_id, sleep_s):
    import sandboxd
    _, code, limits, _ = KINDS[kind]
    t0 = time.monotonic()
    try:
        r = await client.run_code(code.format(sleep=sleep_s), limits=limits or None,
                                  run_id=run_id)
        return {"kind": kind, "run_id": run_id, "ok": True, "killed_by": r.killed_by,
                "endpoint": r.endpoint, "ms": (time.monotonic() - t0) * 1000, "t0": t0}
    except sandboxd.SandboxError as e:
        return {"kind": kind, "run_id": run_id, "ok": False, "code": e.code_name,
                "endpoint": e.endpoint, "message": e.message, "nothing_ran": e.nothing_ran,
                "ms": (time.monotonic() - t0) * 1000, "t0": t0}


async def drive(urls, kinds, concurrency, duration, sleep_s, prefix, on_half=None):
    """Calls from `concurrency` tasks until `duration` seconds have passed;
    on_half() is called once, half way. Returns every call's outcome."""
    import sandboxd
    results = []
    counter = iter(range(10 ** 9))
    async with sandboxd.AsyncClient(urls, retries=3, timeout_s=60) as client:
        if not await client.wait_connected(len(urls), timeout_s=30):
            raise RuntimeError(f"not every endpoint connected: {client.endpoints()}")
        start = time.monotonic()
        half_done = False

        async def worker():
            nonlocal half_done
            while time.monotonic() - start < duration:
                i = next(counter)
                results.append(await one_call(client, kinds[i % len(kinds)], f"{prefix}-{i}",
                                              sleep_s))
                if on_half is not None and not half_done and time.monotonic() - start > duration / 2:
                    half_done = True
                    on_half()

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.monotonic() - start
    return results, elapsed


def start_fleet(a, tmp, n, tag):
    port = free_port()
    servers = []
    for k in range(n):
        servers.append(FleetServer(a.bin_dir, os.path.join(tmp, tag), k, port,
                                   a.uid_base + 100 * k, a.workers))
    return servers


def stop_fleet(servers):
    for s in servers:
        s.stop(60)


def scaling(a, tmp):
    print(f"\n== scaling: I/O-bound load (sleep {a.sleep_s} s and hello), --workers {a.workers}, "
          f"{a.duration:.0f} s per fleet")
    print(f"{'servers':>7} {'concurrency':>11} {'calls':>6} {'req/s':>7} {'x1':>5} "
          f"{'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} {'errors':>6}")
    base = None
    ok = True
    for n in (1, 2, 4):
        os.makedirs(os.path.join(tmp, f"scale{n}"))
        servers = start_fleet(a, tmp, n, f"scale{n}")
        try:
            conc = 4 * a.workers * n
            results, elapsed = asyncio.run(drive([s.url for s in servers], ["sleep", "sleep",
                                                 "hello"], conc, a.duration, a.sleep_s, f"s{n}"))
        finally:
            stop_fleet(servers)
        lat = [r["ms"] for r in results if r["ok"]]
        errors = sum(not r["ok"] for r in results)
        used = {r["endpoint"] for r in results if r["ok"]}
        rps = len(lat) / elapsed
        base = base or rps
        print(f"{n:>7} {conc:>11} {len(results):>6} {rps:>7.1f} {rps / base:>5.2f} "
              f"{percentile(lat, 50):>7.0f} {percentile(lat, 90):>7.0f} "
              f"{percentile(lat, 99):>7.0f} {errors:>6}")
        if errors or len(used) != n:
            print(f"FAIL   {n} servers: {errors} errors, calls reached {len(used)} of {n}")
            ok = False
    return ok


def failure(a, tmp):
    print(f"\n== failure: 4 servers, the mixed load at concurrency {a.concurrency}, "
          f"one server killed with SIGKILL after {a.duration / 2:.0f} s")
    os.makedirs(os.path.join(tmp, "kill"))
    servers = start_fleet(a, tmp, 4, "kill")
    victim = servers[1]
    killed_at = []

    def kill():
        killed_at.append(time.monotonic())
        victim.kill9()

    kinds = [k for k, v in KINDS.items() for _ in range(v[0] // 2)]
    try:
        results, elapsed = asyncio.run(drive([s.url for s in servers], kinds, a.concurrency,
                                             a.duration, a.sleep_s, "f", on_half=kill))
        logs = {s.url: s.run_ids() for s in servers}
        # The killed server left its workspaces mounted and its cgroups: a
        # restart on the same state dir clears them before it listens.
        offset = len(victim.log_text())
        victim.restart()
        restart_log = victim.log_text(offset)
    finally:
        stop_fleet(servers)
    ok = report_failure(results, elapsed, logs, victim.url, killed_at[0] if killed_at else None)
    mounts = [line for line in open("/proc/self/mountinfo") if victim.state in line]
    cleared = "stale_workspaces" in restart_log and not mounts
    print(f"{'PASS' if cleared else 'FAIL':<6} the killed server's restart on its state dir "
          f"detached what it left; no mount left after the stop ({len(mounts)})")
    return ok and cleared


def report_failure(results, elapsed, logs, dead, killed_at):
    ok_calls = [r for r in results if r["ok"]]
    failed = [r for r in results if not r["ok"]]
    wrong = [r for r in ok_calls if r["killed_by"] != KINDS[r["kind"]][3]]
    to_dead = [r for r in failed if r["endpoint"] == dead]
    lost_live = [r for r in failed if r["endpoint"] != dead]
    seen = {}
    twice = []
    for url, ids in logs.items():
        for rid in ids:
            if rid in seen:
                twice.append((rid, seen[rid], url))
            seen[rid] = url
    moved = [r for r in to_dead if r["run_id"] in seen and seen[r["run_id"]] != dead]
    after = [r for r in ok_calls if killed_at is not None and r["t0"] > killed_at + 1]
    after_dead = [r for r in after if r["endpoint"] == dead]
    lat = [r["ms"] for r in ok_calls]
    by_kind = {k: sum(r["kind"] == k for r in ok_calls) for k in KINDS}
    print(f"calls {len(results)} in {elapsed:.1f} s ({len(ok_calls) / elapsed:.1f} req/s answered "
          f"OK); p50 {percentile(lat, 50):.0f} ms, p99 {percentile(lat, 99):.0f} ms")
    print("answered OK by kind: " + ", ".join(f"{k}={n}" for k, n in by_kind.items()))
    print(f"in flight to the killed server: {len(to_dead)}, answered "
          + (", ".join(sorted({r['code'] for r in to_dead})) or "-"))
    if to_dead:
        print(f"  e.g. {to_dead[0]['code']}: {to_dead[0]['message'][:120]}")
    print(f"OK calls after the kill (+1 s): {len(after)}, to the killed server: {len(after_dead)}, "
          f"servers used: {len({r['endpoint'] for r in after})}")
    checks = [
        (not wrong, f"every answered run classified as its kind ({len(wrong)} wrong"
                    + (f", e.g. {wrong[0]['kind']} -> {wrong[0]['killed_by']}" if wrong else "")
                    + ")"),
        (not lost_live, f"no lost or failed call on a live server ({len(lost_live)}"
                        + (f", e.g. {lost_live[0]['code']}: {lost_live[0]['message'][:100]}"
                           if lost_live else "") + ")"),
        (all(r["code"] in ("UNKNOWN", "DEADLINE_EXCEEDED") and not r["nothing_ran"]
             for r in to_dead), "calls in flight to the killed server: UNKNOWN or "
                                "DEADLINE_EXCEEDED, 'may have run'"),
        (not moved, f"none of them ran on another server ({len(moved)})"),
        (not twice, f"no run id in two servers' logs ({len(twice)})"),
        (len(after) > 0 and not after_dead, "later calls go to the three servers left"),
    ]
    for good, what in checks:
        print(f"{'PASS' if good else 'FAIL':<6} {what}")
    return all(good for good, _ in checks)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "build", "bin"))
    ap.add_argument("--python-dir", default=None,
                    help="where the sandboxd package is (default: BIN_DIR/../python)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--duration", type=float, default=20.0, help="seconds per load")
    ap.add_argument("--sleep-s", type=float, default=0.3)
    ap.add_argument("--concurrency", type=int, default=24, help="of the failure run")
    ap.add_argument("--uid-base", type=int, default=59000)
    ap.add_argument("--skip-scaling", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("fleet.py: needs root (sandboxd does)")
    a.bin_dir = os.path.abspath(a.bin_dir)
    sys.path.insert(0, a.python_dir or os.path.join(a.bin_dir, "..", "python"))
    tmp = tempfile.mkdtemp(prefix="sbx-fleet-")
    os.chmod(tmp, 0o755)
    ok = True
    try:
        if not a.skip_scaling:
            ok = scaling(a, tmp) and ok
        ok = failure(a, tmp) and ok
    finally:
        if a.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("fleet: all invariants held" if ok else "fleet: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
