#!/usr/bin/python3
"""Service overhead against bare CPython, measured in one interleaved run.

Latency: median latency of a hello-world RunCode call from a running client
(sandbox-bench, concurrency 1) divided by the median wall time of
`/usr/bin/python3 -u hello.py` (as the service runs a program), alternating so that machine noise hits both
alike; the same with a fresh `sandbox-run` process per call is printed too. Throughput: hello world runs per second at
concurrency 2 x CPUs through the service (sandbox-bench) divided by bare
interpreters at the same concurrency, rounds alternating.
Goal: latency ratio <= 1.10, throughput ratio >= 0.90.

Starts its own sandboxd on defaults (needs root) unless --url is given.
--json prints the figures as one JSON object; bench/run-all calls
throughput() itself.
"""
import argparse
import concurrent.futures
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

PY = "/usr/bin/python3"
HERE = os.path.dirname(os.path.abspath(__file__))


def timed(cmd):
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def bare_throughput(script, concurrency, duration):
    end = time.perf_counter() + duration

    def worker(_):
        n = 0
        while time.perf_counter() < end:
            subprocess.run([PY, "-u", script], stdout=subprocess.DEVNULL, check=True)
            n += 1
        return n

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as ex:
        total = sum(ex.map(worker, range(concurrency)))
    return total / (time.perf_counter() - t0)


def service_throughput(bench, url, script, concurrency, duration):
    p = subprocess.run([bench, "-e", url, "--concurrency", str(concurrency), "--duration",
                        str(duration), "--json", script], capture_output=True, text=True)
    out = json.loads(p.stdout)
    ok = out["status"].get("OK", 0)
    if ok != out["requests"]:
        raise RuntimeError(f"not every request succeeded: {out['status']}")
    return ok / out["elapsed_s"]


def latency(bin_dir, url, script, iterations):
    """Medians (ms) of `iterations` interleaved samples: bare_ms (python3
    -u), cli_ms (a sandbox-run process per call) and call_ms (p50 of 3 calls
    from a running sandbox-bench)."""
    run = [f"{bin_dir}/sandbox-run", "-e", url, script]
    bare = [PY, "-u", script]
    for _ in range(3):  # warm caches on both sides
        timed(run), timed(bare)
    lat_bare, lat_svc, lat_call = [], [], []
    bench = [f"{bin_dir}/sandbox-bench", "-e", url, "--concurrency", "1", "--requests", "3",
             "--json", script]
    for _ in range(iterations):
        lat_bare.append(timed(bare))
        lat_svc.append(timed(run))
        # The call's own latency, from a client that is already running
        # (what a service client sees), median of 3 calls on one socket.
        out = json.loads(subprocess.run(bench, capture_output=True, text=True,
                                        check=True).stdout)
        lat_call.append(out["latency_ms"]["p50"] / 1e3)
    return {k: statistics.median(v) * 1e3
            for k, v in (("bare_ms", lat_bare), ("cli_ms", lat_svc), ("call_ms", lat_call))}


def throughput(bin_dir, url, script, concurrency, duration, rounds):
    """Means of `rounds` alternating rounds of `duration` s at
    `concurrency`: bare_rps (python3 -u) and service_rps (sandbox-bench,
    the server's default runtime)."""
    tp_bare, tp_svc = [], []
    for _ in range(rounds):
        tp_bare.append(bare_throughput(script, concurrency, duration))
        tp_svc.append(service_throughput(f"{bin_dir}/sandbox-bench", url, script,
                                         concurrency, duration))
    return {"bare_rps": statistics.mean(tp_bare), "service_rps": statistics.mean(tp_svc),
            "concurrency": concurrency}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "build", "bin"))
    ap.add_argument("--url", help="use a running sandboxd instead of starting one")
    ap.add_argument("--iterations", type=int, default=40, help="latency samples of each")
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per throughput round")
    ap.add_argument("--rounds", type=int, default=2, help="throughput rounds of each")
    ap.add_argument("--json", action="store_true",
                    help="print the figures as one JSON object instead of text")
    a = ap.parse_args()
    bin_dir = os.path.abspath(a.bin_dir)
    script = os.path.join(HERE, "hello.py")
    cpus = os.cpu_count() or 1
    concurrency = 2 * cpus

    server = None
    url = a.url
    if url is None:
        if os.geteuid() != 0:
            sys.exit("ratio.py: starting sandboxd needs root (or pass --url)")
        tmp = tempfile.mkdtemp(prefix="sbx-bench-")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        url = f"tcp://127.0.0.1:{port}"
        log = open(os.path.join(tmp, "sandboxd.log"), "wb")
        server = subprocess.Popen([f"{bin_dir}/sandboxd", "--listen", url, "--state-dir",
                                   os.path.join(tmp, "state")], stdout=log, stderr=log)
        for _ in range(200):
            if subprocess.run([f"{bin_dir}/sandbox-run", "-e", url, "--health"],
                              capture_output=True).returncode == 0:
                break
            time.sleep(0.05)
    try:
        lat = latency(bin_dir, url, script, a.iterations)
        tp = throughput(bin_dir, url, script, concurrency, a.duration, a.rounds)
        if a.json:
            print(json.dumps({"cpus": cpus, "concurrency": concurrency, "latency": lat,
                              "throughput": tp}))
            return
        mb, mc, ms = lat["bare_ms"], lat["call_ms"], lat["cli_ms"]
        tb, ts = tp["bare_rps"], tp["service_rps"]
        print(f"cpus={cpus} concurrency={concurrency} latency_samples={a.iterations} "
              f"throughput_rounds={a.rounds}x{a.duration:g}s")
        print(f"latency median: bare {mb:.2f} ms, service call {mc:.2f} ms, "
              f"ratio {mc / mb:.3f} (goal <= 1.10)")
        print(f"latency median incl. starting the sandbox-run CLI: {ms:.2f} ms, "
              f"ratio {ms / mb:.3f}")
        print(f"throughput: bare {tb:.1f}/s, service {ts:.1f}/s, "
              f"ratio {ts / tb:.3f} (goal >= 0.90)")
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            server.wait(30)


if __name__ == "__main__":
    main()
