#!/usr/bin/python3
"""Zygote mode against bare CPython (issue 16), measured in one interleaved run.

Starts its own sandboxd with --zygote (needs root) unless --url is given
(then that server must run with --zygote). Each figure is a ratio of
medians measured side by side, alternating, against bare
`/usr/bin/python3 -I SCRIPT` (run in a scratch directory):

  plot:       a matplotlib plot saved to output/ (bench/plot.py), one call at a
              time from a running client (sandbox-bench, runtime
              python-zygote).                                   goal <= 0.25
  hello:      print("hello"), the same way.                     goal <= 0.30
  throughput: hello world runs per second at concurrency 2 x CPUs, the
              service (python-zygote) over bare interpreters.   goal >= 3
The cold runtime ("python") is measured too, for reference. --json prints
the figures as one JSON object; bench/run-all calls measure() itself.
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

PY = "/usr/bin/python3"
HERE = os.path.dirname(os.path.abspath(__file__))


def bare(script, cwd):
    t0 = time.perf_counter()
    subprocess.run([PY, "-I", script], stdout=subprocess.DEVNULL, cwd=cwd, check=True)
    return time.perf_counter() - t0


def call_latency(bin_dir, url, script, runtime, n=3):
    """p50 latency (s) of n calls from one running client."""
    p = subprocess.run([f"{bin_dir}/sandbox-bench", "-e", url, "--concurrency", "1",
                        "--requests", str(n), "--runtime", runtime, "--json", script],
                       capture_output=True, text=True)
    out = json.loads(p.stdout)
    if out["status"].get("OK", 0) != n:
        raise RuntimeError(f"{runtime}: not every call succeeded: {out['status']} {p.stderr}")
    return out["latency_ms"]["p50"] / 1e3


def bare_throughput(script, cwd, concurrency, duration):
    end = time.perf_counter() + duration

    def worker(_):
        n = 0
        while time.perf_counter() < end:
            subprocess.run([PY, "-I", script], stdout=subprocess.DEVNULL, cwd=cwd, check=True)
            n += 1
        return n

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as ex:
        total = sum(ex.map(worker, range(concurrency)))
    return total / (time.perf_counter() - t0)


def service_throughput(bin_dir, url, script, runtime, concurrency, duration):
    p = subprocess.run([f"{bin_dir}/sandbox-bench", "-e", url, "--concurrency", str(concurrency),
                        "--duration", str(duration), "--runtime", runtime, "--json", script],
                       capture_output=True, text=True)
    out = json.loads(p.stdout)
    ok = out["status"].get("OK", 0)
    if ok != out["requests"]:
        raise RuntimeError(f"not every request succeeded: {out['status']}")
    return ok / out["elapsed_s"]


def start_server(bin_dir, tmp, preload, workers, max_forks):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"tcp://127.0.0.1:{port}"
    log = open(os.path.join(tmp, "sandboxd.log"), "wb")
    args = [f"{bin_dir}/sandboxd", "--listen", url, "--state-dir", os.path.join(tmp, "state"),
            "--uid-base", "47000", "--zygote", "1", "--zygote-preload", preload]
    if max_forks:
        args += ["--zygote-max-forks", str(max_forks)]
    if workers:
        args += ["--workers", str(workers)]
    server = subprocess.Popen(args, stdout=log, stderr=log)
    for _ in range(600):
        if subprocess.run([f"{bin_dir}/sandbox-run", "-e", url, "--health"],
                          capture_output=True).returncode == 0:
            return server, url
        if server.poll() is not None:
            break
        time.sleep(0.05)
    sys.exit(f"zygote.py: sandboxd did not start; see {tmp}/sandboxd.log")


def measure(bin_dir, url, scratch, iterations, duration, rounds, concurrency):
    """The figures of one run against a server started with --zygote:
    {plot: {bare_ms, zygote_ms, cold_ms}, hello: {...}, throughput:
    {bare_rps, zygote_rps}}, medians of `iterations` interleaved samples
    (bare, zygote, cold) and means of `rounds` alternating throughput
    rounds of `duration` s at `concurrency`; bare runs in `scratch`."""
    hello, plot = os.path.join(HERE, "hello.py"), os.path.join(HERE, "plot.py")
    for _ in range(2):  # warm caches and every slot's zygote
        bare(plot, scratch), bare(hello, scratch)
        call_latency(bin_dir, url, plot, "python-zygote", n=4)
    figures = {}
    for name, script in (("plot", plot), ("hello", hello)):
        b, z, c = [], [], []
        for _ in range(iterations):
            b.append(bare(script, scratch))
            z.append(call_latency(bin_dir, url, script, "python-zygote"))
            c.append(call_latency(bin_dir, url, script, "python"))
        figures[name] = {k: statistics.median(x) * 1e3
                         for k, x in (("bare_ms", b), ("zygote_ms", z), ("cold_ms", c))}
    tb, tz = [], []
    for _ in range(rounds):
        tb.append(bare_throughput(hello, scratch, concurrency, duration))
        tz.append(service_throughput(bin_dir, url, hello, "python-zygote", concurrency, duration))
    figures["throughput"] = {"bare_rps": statistics.mean(tb), "zygote_rps": statistics.mean(tz),
                             "concurrency": concurrency}
    return figures


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "build", "bin"))
    ap.add_argument("--url", help="a running sandboxd started with --zygote")
    ap.add_argument("--preload", default="numpy,matplotlib,matplotlib.pyplot")
    ap.add_argument("--workers", type=int, default=0, help="server workers (0: its default)")
    ap.add_argument("--max-forks", type=int, default=0,
                    help="the server's --zygote-max-forks (0: its default)")
    ap.add_argument("--iterations", type=int, default=15, help="latency samples of each")
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per throughput round")
    ap.add_argument("--rounds", type=int, default=2, help="throughput rounds of each")
    ap.add_argument("--json", action="store_true",
                    help="print the figures as one JSON object instead of text")
    a = ap.parse_args()
    bin_dir = os.path.abspath(a.bin_dir)
    cpus = os.cpu_count() or 1
    concurrency = 2 * cpus
    tmp = tempfile.mkdtemp(prefix="sbx-zygote-bench-")
    scratch = os.path.join(tmp, "bare")
    os.makedirs(scratch)
    server, url = (None, a.url)
    if url is None:
        if os.geteuid() != 0:
            sys.exit("zygote.py: starting sandboxd needs root (or pass --url)")
        server, url = start_server(bin_dir, tmp, a.preload, a.workers, a.max_forks)
    try:
        figures = measure(bin_dir, url, scratch, a.iterations, a.duration, a.rounds,
                          concurrency)
        info = subprocess.run([f"{bin_dir}/sandbox-run", "-e", url, "--info"],
                              capture_output=True, text=True).stdout
        figures["zygotes"] = {k: v for k, v in json.loads(info).items() if "zygote" in k}
        if a.json:
            print(json.dumps(figures))
            return
        print(f"cpus={cpus} concurrency={concurrency} samples={a.iterations} "
              f"throughput_rounds={a.rounds}x{a.duration:g}s preload={a.preload}")
        goals = {"plot": 0.25, "hello": 0.30}
        for name in ("plot", "hello"):
            b, z, c = (figures[name][k] for k in ("bare_ms", "zygote_ms", "cold_ms"))
            print(f"{name}: bare {b:.1f} ms, zygote call {z:.1f} ms, ratio {z / b:.3f} "
                  f"(goal <= {goals[name]}); cold call {c:.1f} ms, ratio {c / b:.3f}")
        mb, mz = figures["throughput"]["bare_rps"], figures["throughput"]["zygote_rps"]
        print(f"throughput: bare {mb:.1f}/s, zygote service {mz:.1f}/s, ratio {mz / mb:.2f} "
              f"(goal >= 3)")
        print("zygotes:", json.dumps(figures["zygotes"], sort_keys=True))
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            server.wait(60)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
