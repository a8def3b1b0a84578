#!/usr/bin/python3
"""Hello-world latency through the MCP front against the native C client,
in one run: the run_code tool of one persistent sandbox-mcp (stdio, an
initialized session, one tools/call at a time, timed in this process from
writing the request line to reading the response line) against
libsandbox-client called in this process through ctypes (timed around
sbxc_run_code), the two interleaved in random order so that a shared
machine's noise hits both alike. Prints the medians and their ratio
(goal <= 1.10), and with --http the same through /mcp (Streamable HTTP,
one keep-alive connection). native-pipe is the same C call made by a child
process one line at a time over pipes: the process hop sandbox-mcp adds,
without MCP, so mcp-stdio/native-pipe is the protocol's own cost.

    bench/mcp_latency.py [--bin-dir build/bin] [--lib-dir build/lib]
                         [--url tcp://HOST:PORT] [--samples 200] [--warmup 20] [--http]

Without --url it starts its own sandboxd (root; uid base 61900, state in a
temporary directory; with --http also --http-listen and --http-fronts mcp).
"""
import argparse
import ctypes
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
import harness  # noqa: E402
import mcp_stdio  # noqa: E402

HELLO = 'print("hello")\n'


class NativeClient:
    """libsandbox-client in this process: one client, one request."""

    def __init__(self, lib_path, url):
        lib = ctypes.CDLL(lib_path)
        lib.sbxc_request_new.restype = ctypes.c_void_p
        lib.sbxc_client_open.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p,
                                         ctypes.c_char_p, ctypes.c_size_t]
        lib.sbxc_request_set_code.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.sbxc_run_code.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        lib.sbxc_result_free.argtypes = [ctypes.c_void_p]
        lib.sbxc_client_close.argtypes = [ctypes.c_void_p]
        self.lib = lib
        self.client = ctypes.c_void_p()
        err = ctypes.create_string_buffer(256)
        if lib.sbxc_client_open(ctypes.byref(self.client), url.encode(), err, 256) != 0:
            sys.exit("sbxc_client_open: " + err.value.decode())
        self.req = lib.sbxc_request_new()
        code = HELLO.encode()
        lib.sbxc_request_set_code(self.req, code, len(code))
        self.result = ctypes.create_string_buffer(1024)  # larger than struct sbxc_result

    def call(self):
        t0 = time.perf_counter_ns()
        rc = self.lib.sbxc_run_code(self.client, self.req, self.result)
        ms = (time.perf_counter_ns() - t0) / 1e6
        self.lib.sbxc_result_free(self.result)
        if rc != 0:
            sys.exit("native call failed")
        return ms


PIPE_DRIVER = r'''
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.sbxc_request_new.restype = ctypes.c_void_p
lib.sbxc_client_open.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
lib.sbxc_request_set_code.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
lib.sbxc_run_code.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
lib.sbxc_result_free.argtypes = [ctypes.c_void_p]
client = ctypes.c_void_p()
err = ctypes.create_string_buffer(256)
if lib.sbxc_client_open(ctypes.byref(client), sys.argv[2].encode(), err, 256) != 0:
    sys.exit("sbxc_client_open: " + err.value.decode())
req = lib.sbxc_request_new()
code = b'print("hello")\n'
lib.sbxc_request_set_code(req, code, len(code))
result = ctypes.create_string_buffer(1024)
for line in sys.stdin:
    rc = lib.sbxc_run_code(client, req, result)
    lib.sbxc_result_free(result)
    sys.stdout.write("ok\n" if rc == 0 else "failed\n")
    sys.stdout.flush()
'''


class PipeNativeCaller:
    """The same C library call in a child process, one line per call over
    pipes: the process hop sandbox-mcp adds too, without MCP. mcp-stdio
    against this is the cost of the protocol itself."""

    def __init__(self, lib_path, url):
        self.proc = subprocess.Popen(["/usr/bin/python3", "-c", PIPE_DRIVER, lib_path, url],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def call(self):
        t0 = time.perf_counter_ns()
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        ms = (time.perf_counter_ns() - t0) / 1e6
        if line != "ok\n":
            sys.exit(f"native-pipe call failed: {line!r}")
        return ms


class McpCaller:
    """tools/call run_code through one sandbox-mcp."""

    def __init__(self, bin_dir, url):
        self.mcp = mcp_stdio.McpStdio(bin_dir, url)

    def call(self):
        t0 = time.perf_counter_ns()
        r = self.mcp.tool("run_code", {"code": HELLO})
        ms = (time.perf_counter_ns() - t0) / 1e6
        if r.get("isError") or r["structuredContent"]["stdout"] != "hello\n":
            sys.exit(f"mcp call failed: {r}")
        return ms


class HttpCaller:
    """tools/call run_code through /mcp, one keep-alive connection."""

    def __init__(self, http_url):
        host, port = http_url[len("http://"):].rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=60)
        self.body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                "params": {"name": "run_code", "arguments": {"code": HELLO}}})
        self.headers = {"Content-Type": "application/json",
                        "Accept": "application/json, text/event-stream",
                        "MCP-Protocol-Version": mcp_stdio.PROTOCOL_VERSION}

    def call(self):
        t0 = time.perf_counter_ns()
        self.conn.request("POST", "/mcp", self.body, self.headers)
        resp = self.conn.getresponse()
        data = resp.read()
        ms = (time.perf_counter_ns() - t0) / 1e6
        r = json.loads(data)["result"]
        if resp.status != 200 or r["structuredContent"]["stdout"] != "hello\n":
            sys.exit(f"http call failed: {resp.status} {data[:300]}")
        return ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "build", "bin"))
    ap.add_argument("--lib-dir", default=os.path.join(HERE, "..", "build", "lib"))
    ap.add_argument("--url")
    ap.add_argument("--http-url", help="http://HOST:PORT of a listener serving /mcp")
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--http", action="store_true", help="also through /mcp (Streamable HTTP)")
    a = ap.parse_args()
    server = None
    url, http_url = a.url, a.http_url
    if url is None:
        extra = []
        if a.http:
            http_url = f"http://127.0.0.1:{harness.free_port()}"
            extra = ["--http-listen", http_url, "--http-fronts", "mcp"]
        server = harness.Server(a.bin_dir, 61900, *extra)
        url = server.tcp
    try:
        lib = os.path.join(a.lib_dir, "libsandbox-client.so")
        callers = {"native": NativeClient(lib, url), "native-pipe": PipeNativeCaller(lib, url),
                   "mcp-stdio": McpCaller(a.bin_dir, url)}
        if a.http:
            callers["mcp-http"] = HttpCaller(http_url)
        samples = {k: [] for k in callers}
        order = [k for k in callers for _ in range(a.warmup + a.samples)]
        random.shuffle(order)
        seen = {k: 0 for k in callers}
        for k in order:
            ms = callers[k].call()
            seen[k] += 1
            if seen[k] > a.warmup:
                samples[k].append(ms)
        base = statistics.median(samples["native"])
        for k, xs in samples.items():
            xs.sort()
            print(f"{k:10s} median {statistics.median(xs):7.2f} ms  p90 "
                  f"{xs[int(len(xs) * 0.9)]:7.2f} ms  ({len(xs)} calls)")
        for k in callers:
            if k != "native":
                print(f"ratio {k}/native: {statistics.median(samples[k]) / base:.3f} "
                      f"(medians; goal <= 1.10)")
        print(f"ratio mcp-stdio/native-pipe: "
              f"{statistics.median(samples['mcp-stdio']) / statistics.median(samples['native-pipe']):.3f}"
              " (the protocol's own cost: both cross a process boundary)")
        callers["mcp-stdio"].mcp.close()
        callers["native-pipe"].proc.stdin.close()
        callers["native-pipe"].proc.wait(30)
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
