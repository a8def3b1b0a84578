#!/usr/bin/python3
"""What a network policy costs (issue 27, docs/EGRESS.md), measured in one
run against its own sandboxd.

Throughput: --mb MB (default 100) from an HTTP server of this script's on
127.0.0.1, first as fast as loopback goes, then paced at --link-mb-s (the
origin behind a network link, 1000 MB/s by default), read to /dev/null by the same small raw-socket client three
ways, in alternating order each round: direct (by /usr/bin/python3 on the
host, no proxy: the baseline), and in a run with allow_net through the
egress proxy, once as an absolute-form GET (what a plain-http client sends
to HTTP_PROXY) and once through a CONNECT tunnel (what every https client
does; plain HTTP inside, so that TLS's cost, the same with or without the
proxy, does not hide the proxy's). Each client times itself from its
connect() to the last byte, inside the run for the proxied ones. Printed:
each round, the medians in MB/s, proxied/direct (goal >= 0.8), and the
server's CPU time per proxied download against its time in the run (a
relay near 1.0 is CPU-bound).

Hello world: --pairs runs with and without allow_net, side by side on the
same server (alternating which goes first), timed by the caller from
request to reply. Printed: both medians and the median of the paired
differences (goal <= 2 ms).

Starts its own sandboxd (needs root); nothing leaves the machine.

  flock /tmp/sbx-e2e.lock /usr/bin/python3 bench/egress.py --bin-dir build/bin
"""
import argparse
import http.server
import json
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
from harness import Server, WireCaller, load_pb2  # noqa: E402

# The client, the same code on the host and in the run: argv mode (direct,
# get, tunnel), origin port, byte count; prints {"bytes", "seconds"}.
CLIENT = r'''
import json, os, socket, sys, time
mode, port, size, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
target = "127.0.0.1:%d" % port
path = "/bytes/%d/%d" % (size, rate)
sink = os.open("/dev/null", os.O_WRONLY)
buf = bytearray(1 << 20)
view = memoryview(buf)
t0 = time.perf_counter()
if mode == "direct":
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" % (path.encode(), target.encode()))
else:
    s = socket.create_connection(("127.0.0.1", 3128))
    if mode == "get":
        s.sendall(b"GET http://%s%s HTTP/1.0\r\nHost: %s\r\n\r\n"
                  % (target.encode(), path.encode(), target.encode()))
    else:
        s.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target.encode(), target.encode()))
        head = b""
        while b"\r\n\r\n" not in head:
            c = s.recv(1)
            if not c:
                sys.exit("the proxy closed the tunnel: %r" % head)
            head += c
        if not head.startswith(b"HTTP/1.1 200"):
            sys.exit("CONNECT refused: %r" % head)
        s.sendall(b"GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" % (path.encode(), target.encode()))
total = 0
while True:
    n = s.recv_into(view)
    if not n:
        break
    os.write(sink, view[:n])
    total += n
dt = time.perf_counter() - t0
print(json.dumps({"bytes": total, "seconds": dt}))
'''


def start_origin():
    """An HTTP/1.0 server on 127.0.0.1 answering /bytes/N/R with N bytes, in
    1 MiB writes, at most R MB/s (0: as fast as loopback goes; R stands for
    a network link the origin is behind); its port."""
    chunk = memoryview(os.urandom(1 << 20))

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            n, rate = (int(x) for x in self.path.rsplit("/", 2)[-2:])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            t0, sent = time.perf_counter(), 0
            try:
                while n > 0:
                    k = min(n, len(chunk))
                    self.wfile.write(chunk[:k])
                    n -= k
                    sent += k
                    ahead = sent / (rate * 1e6) - (time.perf_counter() - t0) if rate else 0
                    if ahead > 0:
                        time.sleep(ahead)
            except OSError:
                pass

        def log_message(self, *a):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd.server_address[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "build", "bin"))
    ap.add_argument("--mb", type=int, default=100, help="MB (10^6 bytes) per download")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=100, help="hello-world pairs")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--link-mb-s", type=int, default=1000,
                    help="the paced rounds' origin rate, MB/s (a link of 8 Gbit/s by default)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("egress.py: needs root (sandboxd does)")
    bin_dir = os.path.abspath(a.bin_dir)
    pb = load_pb2(bin_dir)
    port = start_origin()
    size = a.mb * 10 ** 6
    entry = f"127.0.0.1:{port}"
    s = Server(bin_dir, "--workers", str(a.workers), "--egress-allow", entry)
    w = WireCaller(s.port, pb, timeout=300)

    def run(code, args=(), allow=True, timeout_ms=60000):
        req = pb.RunCodeRequest(code=code, args=list(args),
                                allow_net=[entry] if allow else [])
        req.limits.CopyFrom(pb.Limits(timeout_ms=timeout_ms))
        t0 = time.perf_counter()
        st, msg, pl = w.call("RunCode", req)
        took = (time.perf_counter() - t0) * 1e3
        if st != 0:
            raise RuntimeError(f"RunCode: {st} {msg}")
        return pb.RunCodeResponse.FromString(pl), took

    def server_cpu_s():
        with open(f"/proc/{s.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    cpu_share = {"get": [], "tunnel": []}

    def download(mode, rate=0):
        args = [mode, str(port), str(size), str(rate)]
        cpu0 = server_cpu_s()
        if mode == "direct":
            p = subprocess.run(["/usr/bin/python3", "-c", CLIENT, *args], capture_output=True,
                               text=True, timeout=300)
            out, err = p.stdout, p.stderr
        else:
            r, _ = run(CLIENT, args)
            out, err = r.stdout.decode(), r.stderr.decode()
        try:
            got = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise RuntimeError(f"{mode}: no result: {out[-500:]} {err[-1500:]}")
        if got["bytes"] < size:
            raise RuntimeError(f"{mode}: {got['bytes']} bytes of {size}: {err[-500:]}")
        if mode in cpu_share and rate == 0:  # the server's CPU for the run, per download second
            cpu_share[mode].append((server_cpu_s() - cpu0) / got["seconds"])
        return got["bytes"] / got["seconds"] / 1e6

    modes = ["direct", "get", "tunnel"]
    mbps = {m: [] for m in modes}
    paced = {m: [] for m in modes}
    try:
        download("direct")  # warm-up: page cache, the origin's thread, the slot
        download("get")
        print(f"{a.mb} MB from 127.0.0.1, MB/s:")
        for i in range(a.rounds):
            order = modes if i % 2 == 0 else modes[::-1]
            for m in order:
                mbps[m].append(download(m))
            print(f"round {i + 1}: " + "  ".join(f"{m} {mbps[m][-1]:8.1f}" for m in modes),
                  flush=True)
        print(f"the same, the origin paced at {a.link_mb_s} MB/s (a network link), MB/s:")
        for i in range(a.rounds):
            order = modes if i % 2 == 0 else modes[::-1]
            for m in order:
                paced[m].append(download(m, a.link_mb_s))
            print(f"round {i + 1}: " + "  ".join(f"{m} {paced[m][-1]:8.1f}" for m in modes),
                  flush=True)

        hello = 'print("hello")\n'
        for _ in range(10):  # warm-up
            run(hello, allow=False)
            run(hello, allow=True)
        off, on, diff = [], [], []
        for i in range(a.pairs):
            if i % 2 == 0:
                t_off = run(hello, allow=False)[1]
                t_on = run(hello, allow=True)[1]
            else:
                t_on = run(hello, allow=True)[1]
                t_off = run(hello, allow=False)[1]
            off.append(t_off)
            on.append(t_on)
            diff.append(t_on - t_off)
    finally:
        w.close()
        s.stop()

    med = {m: statistics.median(v) for m, v in mbps.items()}
    print(f"\nmedian MB/s: direct {med['direct']:.1f}, through the proxy: GET {med['get']:.1f}, "
          f"CONNECT tunnel {med['tunnel']:.1f}")
    for m in ("get", "tunnel"):
        ratio = med[m] / med["direct"]
        print(f"throughput {m}/direct: {ratio:.3f} (goal >= 0.8: "
              f"{'met' if ratio >= 0.8 else 'NOT met'}); the server's CPU seconds per second "
              f"of download: {statistics.median(cpu_share[m]):.2f}")
    pm = {m: statistics.median(v) for m, v in paced.items()}
    print(f"paced at {a.link_mb_s} MB/s: direct {pm['direct']:.1f}, GET {pm['get']:.1f} "
          f"({pm['get'] / pm['direct']:.3f}), CONNECT tunnel {pm['tunnel']:.1f} "
          f"({pm['tunnel'] / pm['direct']:.3f})")
    d = statistics.median(diff)
    print(f"\nhello world, {a.pairs} pairs: median without allow_net {statistics.median(off):.2f} "
          f"ms, with {statistics.median(on):.2f} ms")
    print(f"median paired difference with - without: {d:+.2f} ms (goal <= 2 ms: "
          f"{'met' if d <= 2 else 'NOT met'})")


if __name__ == "__main__":
    main()
