#!/usr/bin/python3
"""Client overhead: hello-world latency through each client library, as a
ratio to the C library (libsandbox-client), measured in one interleaved run.

Each round asks every column for --requests sequential hello-world RunCode
calls (concurrency 1, from a process that is already running and connected)
and keeps the round's median; rounds alternate between the columns so that
the noise of a shared machine hits them alike. The figure per column is the
median of its round medians; the ratio is that over the C column's.
Goal: Python <= 1.05.

Columns:
  c       sandbox-bench --concurrency 1 (the C library; its own process, whose
          start-up and first connection fall outside its latencies)
  python  sandboxd.Client in this process (build/python, or an installed one)
Another client adds a column: a class with name, round_median_s(n) and
close() in COLUMNS below (an external program can print sandbox-bench's JSON
and reuse ExternalColumn).

Starts its own sandboxd (needs root; uid base 53700) unless --url is given.
--json prints the figures as one JSON object; bench/run-all (and
bench/fronts.py) call interleave() themselves.
"""
import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HELLO = os.path.join(HERE, "hello.py")


class ExternalColumn:
    """A client measured by a program that prints sandbox-bench's --json
    (latency_ms.p50 of n calls made by one running process)."""

    def __init__(self, name, argv):
        self.name = name
        self.argv = argv

    def round_median_s(self, n):
        p = subprocess.run(self.argv + ["--requests", str(n)], capture_output=True, text=True,
                           check=True)
        out = json.loads(p.stdout)
        if out["status"].get("OK", 0) != n:
            raise RuntimeError(f"{self.name}: not every call succeeded: {out['status']}")
        return out["latency_ms"]["p50"] / 1e3

    def close(self):
        pass


class PythonColumn:
    """sandboxd.Client, one client kept for the whole run."""
    name = "python"

    def __init__(self, url, code):
        import sandboxd
        self.client = sandboxd.Client(url)
        self.code = code
        self.client.run_code(code)  # connected and warm
        self.cpu_s = 0.0  # this process's CPU (its threads and nng's) over the calls
        self.calls = 0

    def round_median_s(self, n):
        samples = []
        cpu0 = time.process_time()
        for _ in range(n):
            t0 = time.perf_counter()
            r = self.client.run_code(self.code)
            samples.append(time.perf_counter() - t0)
            if r.stdout != b"hello\n":
                raise RuntimeError(f"python: unexpected output {r.stdout!r} (killed_by "
                                   f"{r.killed_by}, exit {r.exit_code}, signal {r.signal}, "
                                   f"stderr {r.stderr[-300:]!r})")
        self.cpu_s += time.process_time() - cpu0
        self.calls += n
        return statistics.median(samples)

    def close(self):
        self.client.close()


def interleave(columns, n_rounds, requests, goal=None, quiet=False):
    """Rounds of every column in turn (the order reversed every other round,
    after a warm-up of each), then each column's median latency as a ratio
    to the "c" column's, and paired: each round against the C round of the
    same pass, which cancels slow drifts of a shared machine's load.
    Returns {column: {median_ms, ratio, paired, min_ms, max_ms}} and prints
    it unless quiet (goal: the ratio's, for the printout)."""
    rounds = {c.name: [] for c in columns}
    for c in columns:
        c.round_median_s(2)
    for i in range(n_rounds):
        for c in columns if i % 2 == 0 else list(reversed(columns)):
            rounds[c.name].append(c.round_median_s(requests))
    base = statistics.median(rounds["c"])
    out = {}
    for c in columns:
        r = rounds[c.name]
        med = statistics.median(r)
        out[c.name] = {"median_ms": med * 1e3, "ratio": med / base,
                       "paired": statistics.median(x / y for x, y in zip(r, rounds["c"])),
                       "min_ms": min(r) * 1e3, "max_ms": max(r) * 1e3}
    if quiet:
        return out
    print(f"rounds={n_rounds} requests_per_round={requests} concurrency=1 "
          f"cpus={os.cpu_count()}")
    for name, f in out.items():
        spread = f"{f['min_ms']:.2f}..{f['max_ms']:.2f}"
        note = "" if name == "c" or goal is None else f" (goal <= {goal:.2f})"
        print(f"latency median {name:>8}: {f['median_ms']:7.2f} ms (round medians {spread}), "
              f"ratio to c {f['ratio']:.3f}, paired {f['paired']:.3f}{note}")
    return out


def start_server(bin_dir, uid_base):
    tmp = tempfile.mkdtemp(prefix="sbx-bench-clients-")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"tcp://127.0.0.1:{port}"
    log = open(os.path.join(tmp, "sandboxd.log"), "wb")
    proc = subprocess.Popen([f"{bin_dir}/sandboxd", "--listen", url, "--state-dir",
                             os.path.join(tmp, "state"), "--uid-base", str(uid_base)],
                            stdout=log, stderr=log)
    for _ in range(300):
        if subprocess.run([f"{bin_dir}/sandbox-run", "-e", url, "--health"],
                          capture_output=True).returncode == 0:
            return proc, url
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("sandboxd did not start")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "build", "bin"))
    ap.add_argument("--python-dir", default=os.path.join(HERE, "..", "build", "python"),
                    help="where the sandboxd package is (default: the build's)")
    ap.add_argument("--url", help="use a running sandboxd instead of starting one")
    ap.add_argument("--rounds", type=int, default=30, help="rounds of each column")
    ap.add_argument("--requests", type=int, default=5, help="calls per round")
    ap.add_argument("--uid-base", type=int, default=53700)
    ap.add_argument("--json", action="store_true",
                    help="print the figures as one JSON object instead of text")
    a = ap.parse_args()
    sys.path.insert(0, os.path.abspath(a.python_dir))
    bin_dir = os.path.abspath(a.bin_dir)
    with open(HELLO) as f:
        code = f.read()

    server, url = None, a.url
    if url is None:
        if os.geteuid() != 0:
            sys.exit("clients.py: starting sandboxd needs root (or pass --url)")
        server, url = start_server(bin_dir, a.uid_base)
    columns = []
    try:
        columns = [
            ExternalColumn("c", [f"{bin_dir}/sandbox-bench", "-e", url, "--concurrency", "1",
                                 "--json", HELLO]),
            PythonColumn(url, code),
        ]
        figures = interleave(columns, a.rounds, a.requests, 1.05, quiet=a.json)
        py = next(c for c in columns if c.name == "python")
        cpu_us = py.cpu_s / py.calls * 1e6
        if a.json:
            print(json.dumps({"rounds": a.rounds, "requests": a.requests, "columns": figures,
                              "python_cpu_per_call_us": cpu_us}))
        else:
            print(f"python client CPU per call (this process, all threads): {cpu_us:.0f} us")
    finally:
        for c in columns:
            c.close()
        if server is not None:
            server.send_signal(signal.SIGTERM)
            server.wait(30)


if __name__ == "__main__":
    main()
