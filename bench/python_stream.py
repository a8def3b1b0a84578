#!/usr/bin/python3
"""Streaming through the Python client: how long after its print a line
reaches `for chunk in client.stream(...)`, and how long cancel() of a running
process tree takes (docs/STREAMING.md, docs/CLIENTS.md).

- line delay: a program prints --lines lines 100 ms apart, each with its
  own time.monotonic() (the sandbox shares CLOCK_MONOTONIC with this
  process); the delay of a line is when the chunk that completes it arrived
  minus the time it printed.
- cancel: --cancels times, a program forks three children that spin forever
  and prints "started"; cancel() is called from another thread while the
  iterator waits in a watch, and timed until it returns (the server answers
  once every process of the run is gone).

Starts its own sandboxd (needs root; uid base 41900, 2 workers) unless --url
is given. Run after ./scripts/build:

    /usr/bin/python3 bench/python_stream.py [--lines 50] [--cancels 30]
"""
import argparse
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(REPO, "build", "python"), os.path.join(REPO, "tests", "lib")]

import sandboxd  # noqa: E402

TICK_CODE = """
import time
for i in range({n}):
    print(i, repr(time.monotonic()), flush=True)
    time.sleep(0.1)
"""

TREE_CODE = """
import os
for _ in range(3):
    if os.fork() == 0:
        while True:
            pass
print("started", flush=True)
while True:
    pass
"""
LONG = {"timeout_ms": 40000, "cpu_time_ms": 40000}


def summary(values_ms):
    v = sorted(values_ms)
    p95 = v[min(len(v) - 1, int(round(0.95 * (len(v) - 1))))]
    return (f"n={len(v)} median {statistics.median(v):.2f} ms, p95 {p95:.2f} ms, "
            f"min {v[0]:.2f} ms, max {v[-1]:.2f} ms")


def line_delays(client, n):
    delays, buf = [], ""
    with client.stream(TICK_CODE.format(n=n), limits=LONG) as s:
        for chunk in s:
            now = time.monotonic()
            buf += chunk.text
            while "\n" in buf:
                line, buf = buf.split("\n", 1)
                delays.append((now - float(line.split()[1])) * 1000)
    assert s.result.exit_code == 0 and len(delays) == n, (s.result, len(delays))
    return delays


def cancel_once(client):
    took = {}
    s = client.stream(TREE_CODE, limits=LONG)

    def cancel_later():
        time.sleep(0.2)
        t0 = time.monotonic()
        s.cancel()
        took["ms"] = (time.monotonic() - t0) * 1000

    t = None
    for chunk in s:
        if t is None and "started" in chunk.text:
            t = threading.Thread(target=cancel_later)
            t.start()
    t.join()
    assert s.result.killed_by == "cancelled", s.result
    return took["ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="an existing sandboxd (else one is started)")
    ap.add_argument("--bin-dir", default=os.path.join(REPO, "build", "bin"))
    ap.add_argument("--lines", type=int, default=50)
    ap.add_argument("--cancels", type=int, default=30)
    a = ap.parse_args()
    server = None
    if a.url is None:
        from harness import Server
        server = Server(a.bin_dir, 41900, "--workers", "2")
    url = a.url or server.tcp
    try:
        with sandboxd.Client(url) as c:
            c.run_code("print(1)")  # connected, warm
            print(f"load average before: {os.getloadavg()[0]:.2f}, cpus={os.cpu_count()}")
            print("line delay (print -> chunk in the iterator):", summary(line_delays(c, a.lines)))
            cancels = [cancel_once(c) for _ in range(a.cancels)]
            print("cancel() of a running 4-process tree:     ", summary(cancels))
            print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
