#!/usr/bin/python3
"""Front overhead: hello-world latency through an HTTP front of sandboxd
against the native C client, as a ratio, measured in one interleaved run.

Each round asks every column for --requests sequential hello-world runs
(concurrency 1, from a client that is already running and connected) and
keeps the round's median; rounds alternate between the columns so that the
noise of a shared machine hits them alike. The figure per column is the
median of its round medians; the ratio is that over the C column's, and
"paired" is the median of the per-round ratios (which cancels slow drifts
of the machine's load). Goal: <= 1.10.

Columns:
  c       sandbox-bench --concurrency 1 (libsandbox-client, its own process;
          start-up and first connection fall outside its latencies)
  piston  POST /api/v2/execute from this process on one kept-alive HTTP/1.1
          connection (http.client), the answer parsed as JSON and checked
  mcp     tools/call run_code through /mcp (Streamable HTTP) from this
          process on one kept-alive connection (bench/mcp_latency.py's
          HttpCaller); sandbox-mcp over stdio is in bench/mcp_latency.py
Another front adds a column: a class with name, round_median_s(n), close().

Starts its own sandboxd (needs root; uids 60950-60999) with
--http-fronts piston,mcp on loopback.

  /usr/bin/python3 bench/fronts.py --bin-dir build/bin [--json]

--json prints the figures as one JSON object; bench/run-all builds the same
columns() against its own server.
"""
import argparse
import http.client
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
from clients import HELLO, ExternalColumn, interleave  # noqa: E402
from harness import SandboxdProcess, free_port  # noqa: E402
from mcp_latency import HttpCaller  # noqa: E402


class PistonColumn:
    """The Piston front, one keep-alive connection for the whole run."""
    name = "piston"

    def __init__(self, port, code):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.body = json.dumps({"language": "python", "version": "*",
                                "files": [{"content": code}]}).encode()

    def call(self):
        self.conn.request("POST", "/api/v2/execute", body=self.body,
                          headers={"Content-Type": "application/json"})
        r = self.conn.getresponse()
        reply = json.loads(r.read())
        if r.status != 200 or reply["run"]["stdout"] != "hello\n":
            raise RuntimeError(f"piston: unexpected answer {r.status} {reply}")

    def round_median_s(self, n):
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            self.call()
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples)

    def close(self):
        self.conn.close()


class McpColumn:
    """The MCP front's run_code tool through /mcp, one keep-alive connection
    for the whole run (the hello world of bench/mcp_latency.py)."""
    name = "mcp"

    def __init__(self, http_url):
        self.caller = HttpCaller(http_url)

    def round_median_s(self, n):
        return statistics.median(self.caller.call() for _ in range(n)) / 1e3

    def close(self):
        self.caller.conn.close()


def columns(bin_dir, url, http_port):
    """The C client, Piston and MCP columns against one sandboxd serving
    both fronts on http://127.0.0.1:HTTP_PORT."""
    with open(HELLO) as f:
        code = f.read()
    return [ExternalColumn("c", [f"{bin_dir}/sandbox-bench", "-e", url, "--concurrency", "1",
                                 "--json", HELLO]),
            PistonColumn(http_port, code),
            McpColumn(f"http://127.0.0.1:{http_port}")]


class FrontServer(SandboxdProcess):
    def __init__(self, bin_dir, uid_base):
        self.tmp = tempfile.mkdtemp(prefix="sbx-bench-fronts-")
        self.log_path = os.path.join(self.tmp, "sandboxd.log")
        self.url = f"tcp://127.0.0.1:{free_port()}"
        self.http_port = free_port()
        self.spawn([f"{bin_dir}/sandboxd", "--listen", self.url, "--state-dir",
                    os.path.join(self.tmp, "state"), "--uid-base", str(uid_base),
                    "--http-listen", f"http://127.0.0.1:{self.http_port}",
                    "--http-fronts", "piston,mcp"])

    def close(self):
        self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "build", "bin"))
    ap.add_argument("--rounds", type=int, default=30, help="rounds of each column")
    ap.add_argument("--requests", type=int, default=5, help="calls per round")
    ap.add_argument("--uid-base", type=int, default=60950)
    ap.add_argument("--json", action="store_true",
                    help="print the figures as one JSON object instead of text")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("fronts.py: starting sandboxd needs root")
    bin_dir = os.path.abspath(a.bin_dir)
    server = FrontServer(bin_dir, a.uid_base)
    cols = []
    try:
        cols = columns(bin_dir, server.url, server.http_port)
        figures = interleave(cols, a.rounds, a.requests, 1.10, quiet=a.json)
        if a.json:
            print(json.dumps({"rounds": a.rounds, "requests": a.requests, "columns": figures}))
    finally:
        for c in cols:
            c.close()
        server.close()


if __name__ == "__main__":
    main()
