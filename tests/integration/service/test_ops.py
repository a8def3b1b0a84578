"""End-to-end tests of sandboxd's operations side (server/ops/): the HTTP
listener (--http-listen) with /healthz, /readyz, /metrics, its limits and
timeouts, the metrics as promtool and a real Prometheus server read them,
and --log-format json.

Each test (one ctest entry, service_<name>) starts its own sandboxd (uids
from the harness) with the operations listener on a free loopback port and
talks to it over plain sockets and http.client: nothing is mocked. Needs
root (the engine does); without it the test skips loudly (exit 77), or
fails when CI=true (tests/conftest.py).
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from lib.harness import Server, allocate_uids, check, closed_by_peer, free_port, wait_log
from lib.prometheus import parse_metrics, start_prometheus, stop_prometheus, wait_query_sum

HERE = os.path.dirname(os.path.abspath(__file__))

REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
HELLO = 'print("hello")\n'


class OpsServer(Server):
    """A sandboxd with the operations listener on a free loopback port."""

    def __init__(self, bin_dir, *extra, **kw):
        self.http_port = free_port()
        super().__init__(bin_dir, "--http-listen",
                         f"http://127.0.0.1:{self.http_port}", *extra, **kw)

    def http(self, method, path, headers=None, body=None, timeout=10):
        """One request on its own connection: (status, headers, body), or
        (None, {}, the error) when the connection failed."""
        c = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        except (OSError, http.client.HTTPException) as e:
            return None, {}, repr(e).encode()
        finally:
            c.close()

    def metrics(self):
        status, headers, body = self.http("GET", "/metrics")
        if status != 200:
            raise RuntimeError(f"/metrics answered {status}: {body[:200]!r}")
        return parse_metrics(body.decode())

    def start_run(self, code, *flags):
        path = os.path.join(self.tmp, f"bg-{time.monotonic_ns()}.py")
        with open(path, "w") as f:
            f.write(code)
        return subprocess.Popen([f"{self.bin_dir}/sandbox-run", "-e", self.tcp, "--json", *flags,
                                 path], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_metric(s, name, want, timeout=15, **labels):
    """Polls /metrics until name{labels} == want; the last value seen."""
    deadline = time.monotonic() + timeout
    v = None
    while time.monotonic() < deadline:
        v = s.metrics().get(name, **labels)
        if v == want:
            return v
        time.sleep(0.05)
    return v


def raw_connect(port, timeout=5):
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


# ---- the listener: probes, routes, limits, timeouts ----

def check_start_fault(b):
    """A port that cannot be bound: the start fails, says why, leaves nothing."""
    tmp = tempfile.mkdtemp(prefix="sbx-ops-")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    state = os.path.join(tmp, "state")
    try:
        p = subprocess.run([f"{b}/sandboxd", "--listen", f"tcp://127.0.0.1:{free_port()}",
                            "--state-dir", state, "--uid-base", str(allocate_uids()),
                            "--http-listen", f"http://127.0.0.1:{port}"],
                           capture_output=True, text=True, timeout=30)
        check(p.returncode == 1 and f"http listen http://127.0.0.1:{port}: Address already in use"
              in p.stderr, "a port in use: the start fails and says so", (p.returncode, p.stderr))
        with open("/proc/self/mountinfo") as f:
            left = [l.split()[4] for l in f if os.path.realpath(tmp) in l]
        check(not left, "and leaves no mount behind", left)
    finally:
        taken.close()
        subprocess.run(["umount", "-R", "-l", state], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def test_ops_http(bin_dir, check):
    check_start_fault(bin_dir)
    s = OpsServer(bin_dir, "--workers", "1", "--queue", "1", "--http-timeout-s", "2",
                  "--http-max-connections-per-ip", "4", "--http-max-request-bytes", "8192")
    try:
        check_probes_and_routes(s)
        check_limits(s)
        check_slow_and_idle_clients(s)
        check_queue_full(s)
        check_drain(s)
    finally:
        s.stop()


def check_probes_and_routes(s):
    st, h, body = s.http("GET", "/healthz")
    check(st == 200 and body == b"ok\n", "/healthz: 200 ok", (st, body))
    st, h, body = s.http("GET", "/readyz")
    check(st == 200 and body == b"ready\n", "/readyz: 200 when idle", (st, body))
    st, h, body = s.http("HEAD", "/metrics")
    check(st == 200 and body == b"" and h.get("content-type", "").startswith(
        "text/plain; version=0.0.4") and int(h.get("content-length", "0")) > 1000,
        "HEAD /metrics: the headers of the exposition, no body", (st, h, body[:100]))
    for path in ("/", "/nope", "/metrics/x", "/healthz/", "/METRICS"):
        st, h, body = s.http("GET", path)
        check(st == 404, f"GET {path}: 404", (st, body))
    for method, path in (("POST", "/metrics"), ("DELETE", "/readyz"), ("PUT", "/healthz"),
                         ("OPTIONS", "/metrics")):
        st, h, body = s.http(method, path)
        check(st == 405 and h.get("allow") == "GET, HEAD",
              f"{method} {path}: 405 with Allow: GET, HEAD", (st, h, body))
    # Keep-alive: two requests on one connection.
    c = http.client.HTTPConnection("127.0.0.1", s.http_port, timeout=5)
    answers = []
    for path in ("/healthz", "/readyz"):
        c.request("GET", path)
        r = c.getresponse()
        answers.append((r.status, r.read()))
    c.close()
    check(answers == [(200, b"ok\n"), (200, b"ready\n")], "two requests on one connection",
          answers)


def check_limits(s):
    """Request line and headers within --http-max-request-bytes; no body."""
    st, h, body = s.http("GET", "/metrics?" + "a" * 20000)
    check(st == 414, "a URL past the request cap: 414", (st, body[:200]))
    st, h, body = s.http("GET", "/healthz", headers={"X-Big": "b" * 20000})
    check(st == 431, "headers past the request cap: 431", (st, body[:200]))
    st, h, body = s.http("GET", "/healthz", body=b"x" * 100)
    check(st == 413, "a request with a body: 413", (st, body[:200]))
    st, h, body = s.http("POST", "/nope", body=b"x" * 100)
    check(st == 404, "a body to an unknown path: 404", (st, body[:200]))
    st, h, body = s.http("GET", "/healthz")
    check(st == 200, "the listener serves after refusals", st)
    # Past --http-max-connections-per-ip the next connection is closed at
    # once. First a moment for the listener to see the connections above
    # closed (under load it may still count them).
    time.sleep(1.0)
    held = [raw_connect(s.http_port) for _ in range(4)]
    time.sleep(0.2)
    extra = raw_connect(s.http_port)
    t0 = time.monotonic()
    closed = closed_by_peer(extra, 1.5)
    check(closed and time.monotonic() - t0 < 1.0,
          "a connection past --http-max-connections-per-ip is closed at once",
          time.monotonic() - t0)
    answers = []
    for c in held:
        c.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        try:
            answers.append(c.recv(100)[:12])
        except OSError as e:
            answers.append(repr(e))
    check(answers == [b"HTTP/1.1 200"] * 4, "the four within the cap are served", answers)
    for c in held + [extra]:
        c.close()
    time.sleep(0.3)
    st, h, body = s.http("GET", "/healthz")
    check(st == 200, "the listener serves again once they are closed", st)


def check_slow_and_idle_clients(s):
    """--http-timeout-s 2: half a request line, or nothing, is cut off."""
    slow = raw_connect(s.http_port, timeout=10)
    slow.sendall(b"GET /heal")
    idle = raw_connect(s.http_port, timeout=10)
    t0 = time.monotonic()
    closed = closed_by_peer(slow, 8)
    waited = time.monotonic() - t0
    check(closed and 1.5 <= waited <= 6,
          "a client that sent half a request line is cut off after --http-timeout-s", waited)
    check(closed_by_peer(idle, 3), "a connection that sent nothing is closed too")
    slow.close()
    idle.close()
    # A request sent slowly, but within the timeout between bytes, is served.
    c = raw_connect(s.http_port, timeout=10)
    for part in (b"GET /hea", b"lthz HTTP/1.1\r\n", b"Host: 127.0.0.1\r\n", b"\r\n"):
        c.sendall(part)
        time.sleep(0.5)
    reply = c.recv(4096)
    c.close()
    check(reply.startswith(b"HTTP/1.1 200"), "a request sent in pieces within the timeout is "
          "answered", reply[:60])


def check_queue_full(s):
    """--workers 1 --queue 1: a running call and a queued one fill it."""
    running = s.start_run("import time\ntime.sleep(3)\nprint('first')\n")
    check(wait_metric(s, "sandboxd_runs_in_progress", 1) == 1,
          "sandboxd_runs_in_progress is 1 while a call runs")
    st, h, body = s.http("GET", "/readyz")
    check(st == 200, "/readyz: 200 with a worker busy and the queue empty", (st, body))
    queued = s.start_run("print('second')\n")
    check(wait_metric(s, "sandboxd_queue_depth", 1) == 1, "sandboxd_queue_depth is 1")
    st, h, body = s.http("GET", "/readyz")
    check(st == 503 and body.startswith(b"queue full") and body.count(b"\n") == 1,
          "/readyz: 503 'queue full' on one line when the queue is full", (st, body))
    check(s.metrics().get("sandboxd_ready") == 0, "sandboxd_ready is 0 then")
    rc, out = s.run(HELLO, "--retries", "0")
    check(out.get("status") == "RESOURCE_EXHAUSTED", "a call past the queue: RESOURCE_EXHAUSTED",
          out)
    m = s.metrics()
    check(m.get("sandboxd_rejections_total", reason="queue_full") == 1,
          "sandboxd_rejections_total{reason=queue_full} counts it",
          m.get("sandboxd_rejections_total", reason="queue_full"))
    check_rejected_total_agrees(s)
    outs = [json.loads(p.communicate(timeout=30)[0]).get("stdout") for p in (running, queued)]
    check(outs == ["first\n", "second\n"], "the running and the queued call finish", outs)
    st, h, body = s.http("GET", "/readyz")
    check(st == 200, "/readyz: 200 again once the queue drained", (st, body))


def check_rejected_total_agrees(s):
    """GetInfo's rejected_total (sandbox-run --info) is the sum of the
    sandboxd_rejections_total series: one source. It once counted every
    answer that was not OK (a bad argument too) while the metric counted
    refusals by reason, and a user saw 1 against all zeros."""
    rc, out = s.run(HELLO, "--timeout-ms", "-1")
    check(out.get("status") == "INVALID_ARGUMENT", "a bad argument: INVALID_ARGUMENT", out)
    p = subprocess.run([f"{s.bin_dir}/sandbox-run", "-e", s.tcp, "--info"], capture_output=True)
    info = json.loads(p.stdout)
    m = s.metrics()
    series = {labels: v for (name, labels), v in m.samples.items()
              if name == "sandboxd_rejections_total"}
    check(len(series) >= 5, "sandboxd_rejections_total has a series per reason", series)
    check(info.get("rejected_total") == sum(series.values()) >= 1,
          "GetInfo's rejected_total is the sum of sandboxd_rejections_total",
          (info.get("rejected_total"), series))


def check_drain(s):
    """SIGTERM: /readyz says draining while the running call finishes."""
    running = s.start_run("import time\ntime.sleep(3)\nprint('last')\n")
    check(wait_metric(s, "sandboxd_runs_in_progress", 1) == 1, "a call runs before SIGTERM")
    s.proc.send_signal(signal.SIGTERM)
    st, body = None, b""
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        st, h, body = s.http("GET", "/readyz")
        if st == 503:
            break
        time.sleep(0.02)
    check(st == 503 and body == b"draining: the server is shutting down\n",
          "/readyz: 503 'draining' after SIGTERM", (st, body))
    st, h, body = s.http("GET", "/healthz")
    check(st == 200, "/healthz: still 200 while draining", st)
    m = s.metrics()
    check(m.get("sandboxd_draining") == 1 and m.get("sandboxd_ready") == 0,
          "sandboxd_draining 1, sandboxd_ready 0", (m.get("sandboxd_draining"),
                                                    m.get("sandboxd_ready")))
    still_running = running.poll() is None
    out = json.loads(running.communicate(timeout=30)[0])
    check(still_running and out.get("stdout") == "last\n", "the running call finishes the drain",
          out)
    check(s.proc.wait(30) == 0, "sandboxd exits 0")
    try:
        raw_connect(s.http_port, timeout=2).close()
        refused = False
    except OSError:
        refused = True
    check(refused, "the operations listener is closed after the drain")


# ---- the listener's request bodies (for the fronts): caps, clocks, refusals ----

EXECUTE = "/api/v2/execute"
JSON_TYPE = {"Content-Type": "application/json"}


def hello_body():
    return json.dumps({"language": "python", "version": "*",
                       "files": [{"content": HELLO}]}).encode()


def check_still_serving(s, what):
    """HTTP and the nng RPC both still answer, after what."""
    st, h, body = s.http("POST", EXECUTE, JSON_TYPE, hello_body(), timeout=60)
    ok = st == 200 and json.loads(body).get("run", {}).get("stdout") == "hello\n"
    check(ok, f"after {what}: a run through the HTTP front answers", (st, body[:300]))
    rc, out = s.run(HELLO)
    check(out.get("stdout") == "hello\n", f"after {what}: a RunCode over nng answers", out)


def runs_total(s):
    m = s.metrics()
    return sum(v for (name, lab), v in m.samples.items() if name == "sandboxd_runs_total")


def test_ops_fronts_http(bin_dir, check):
    """The listener with a front on it (--http-fronts piston): POST bodies
    within --http-max-body-bytes (413 before the body is read), a request
    that trickles in cut off after --http-request-timeout-s, Origin 403,
    invalid JSON 400; nothing runs for any of them and both sides keep
    serving."""
    s = OpsServer(bin_dir, "--workers", "1", "--http-fronts", "piston",
                  "--http-max-body-bytes", "65536", "--http-request-timeout-s", "3",
                  "--http-timeout-s", "2")
    try:
        check_still_serving(s, "the start")
        before = runs_total(s)
        check_body_cap(s)
        check_origin_and_json(s)
        check_request_timeout(s)
        check(runs_total(s) == before, "nothing ran for any refused request",
              (before, runs_total(s)))
        check_still_serving(s, "the refusals")
        m = s.metrics()
        check(m.get("sandboxd_http_requests_total", route=EXECUTE, code="413") == 1
              and m.get("sandboxd_http_requests_total", route=EXECUTE, code="403") == 1
              and m.get("sandboxd_http_requests_total", route=EXECUTE, code="200") == 2
              and (m.get("sandboxd_http_requests_total", route=EXECUTE, code="400") or 0) >= 2,
              "sandboxd_http_requests_total counts the answers by route and code",
              {dict(lab)["code"]: v for (n, lab), v in m.samples.items()
               if n == "sandboxd_http_requests_total" and dict(lab).get("route") == EXECUTE})
        check(m.get("sandboxd_http_connections_cut_total", reason="request_timeout") >= 1
              and m.get("sandboxd_http_connections_cut_total", reason="body_too_large") == 1,
              "sandboxd_http_connections_cut_total counts the cut-offs by reason",
              [m.get("sandboxd_http_connections_cut_total", reason=r)
               for r in ("request_timeout", "body_too_large")])
        check(wait_log(s, "event=http_slow_requests_cut"), "the cut-off is logged")
    finally:
        check(s.stop() == 0, "sandboxd exits 0")


def check_body_cap(s):
    # Announced over the cap: 413 at once, before a byte of the body is sent.
    c = raw_connect(s.http_port, timeout=10)
    c.sendall(b"POST /api/v2/execute HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              b"Content-Type: application/json\r\n"
              b"Content-Length: 10000000\r\n\r\n")
    reply = c.recv(4096)
    c.close()
    check(reply.startswith(b"HTTP/1.1 413") and b"--http-max-body-bytes" in reply,
          "a body announced over --http-max-body-bytes: 413 before it is sent", reply[:200])
    # Exactly at the cap it is read (and is not JSON: 400).
    st, h, body = s.http("POST", EXECUTE, JSON_TYPE, b"x" * 65536)
    check(st == 400 and b"invalid JSON" in body, "a body of exactly the cap is read (400: not "
          "JSON)", (st, body[:200]))
    # Chunked, with no length announced: cut off once past the cap.
    c = raw_connect(s.http_port, timeout=10)
    c.sendall(b"POST /api/v2/execute HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              b"Content-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n")
    chunk = b"x" * 16384
    sent, closed = 0, False
    try:
        for _ in range(40):
            c.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += len(chunk)
        c.sendall(b"0\r\n\r\n")
        closed = closed_by_peer(c, 5)
    except OSError:
        closed = True
    c.close()
    check(closed, "a chunked body past the cap: the connection is closed", sent)


def check_origin_and_json(s):
    st, h, body = s.http("POST", EXECUTE, {**JSON_TYPE, "Origin": "http://evil.example"},
                         hello_body())
    check(st == 403 and b"Origin" in body, "a POST with an Origin header (a browser's): 403",
          (st, body[:200]))
    st, h, body = s.http("POST", EXECUTE, JSON_TYPE, b'{"language": "python", ')
    ok = st == 400 and json.loads(body).get("message", "").startswith("invalid JSON at line 1")
    check(ok, "invalid JSON: 400 {message} saying where", (st, body[:200]))
    st, h, body = s.http("GET", EXECUTE)
    check(st == 405 and h.get("allow") == "POST", "GET on a POST route: 405, Allow: POST",
          (st, h.get("allow")))


def check_request_timeout(s):
    """One byte a second is never idle for --http-timeout-s (2), but the
    whole request must be in within --http-request-timeout-s (3)."""
    request = (b"POST /api/v2/execute HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               b"Content-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n%s" % (len(hello_body()), hello_body()))
    c = raw_connect(s.http_port, timeout=30)
    t0 = time.monotonic()
    sent, closed, reply = 0, False, b""
    try:
        while sent < len(request) and time.monotonic() - t0 < 20 and not closed:
            c.sendall(request[sent:sent + 1])
            sent += 1
            closed = closed_by_peer(c, 0.7)
    except OSError:
        closed = True
    c.close()
    check(closed and sent < len(request),
          "a request sent a byte at a time is cut off before it is all in",
          (closed, sent, len(request), round(time.monotonic() - t0, 1)))


# ---- before any route: the request's Host, its framing, its media type ----

ALLOWED_EXTRA = "sandboxd.sandboxd.svc,10.255.0.7"


def raw_exchange(port, data, timeout=10):
    """Sends data on a connection of its own: (status, headers, body, closed),
    the answer read up to its Content-Length, closed whether the server then
    closed the connection (None, {}, the bytes read, True when it closed
    without an answer)."""
    c = raw_connect(port, timeout=timeout)
    try:
        c.sendall(data)
        got = b""
        while b"\r\n\r\n" not in got:
            d = c.recv(65536)
            if not d:
                return None, {}, got, True
            got += d
        head, _, body = got.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in
                   (line.partition(":") for line in lines[1:])}
        want = int(headers.get("content-length", "0"))
        while len(body) < want:
            d = c.recv(65536)
            if not d:
                break
            body += d
        return int(lines[0].split()[1]), headers, body[:want], closed_by_peer(c, 3)
    except OSError as e:
        return None, {}, repr(e).encode(), True
    finally:
        c.close()


def own_addresses():
    """This machine's non-loopback interface addresses (ip -j addr), as a
    kubelet's probe or a Prometheus scrape of a pod would put them in Host:
    [(address, family)]."""
    p = subprocess.run(["ip", "-j", "addr", "show"], capture_output=True, text=True)
    try:
        ifs = json.loads(p.stdout)
    except ValueError:
        return []
    return [(a["local"], a["family"]) for i in ifs if i.get("ifname") != "lo"
            for a in i.get("addr_info", []) if a.get("scope") == "global"]


def json_body(headers, body):
    """The answer's JSON when it is labelled application/json, else None."""
    if not headers.get("content-type", "").startswith("application/json"):
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def piston_error(headers, body):
    """Piston's error shape: exactly {"message": a string}; the message."""
    j = json_body(headers, body)
    ok = isinstance(j, dict) and set(j) == {"message"} and isinstance(j["message"], str)
    return j["message"] if ok else None


def mcp_error(headers, body):
    """A JSON-RPC error with id null (no id is known); its message."""
    j = json_body(headers, body)
    ok = (isinstance(j, dict) and j.get("jsonrpc") == "2.0" and "id" in j and j["id"] is None
          and isinstance(j.get("error"), dict) and isinstance(j["error"].get("code"), int)
          and isinstance(j["error"].get("message"), str))
    return j["error"]["message"] if ok else None


MCP_RUN = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "run_code", "arguments": {"code": HELLO}}}).encode()
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}


def test_ops_http_requests(bin_dir, check):
    """What the listener checks before it serves any route (the fronts' and
    the operations' alike): the Host names the server (421, DNS rebinding;
    400 missing or repeated), one way to frame a body (400, 501), a POST
    body labelled JSON (415); and every refusal on a front's path in that
    front's JSON. Nothing runs for a refused request; both sides keep
    serving."""
    check_allowed_hosts_setting(bin_dir)
    s = OpsServer(bin_dir, "--workers", "1", "--http-fronts", "piston,mcp",
                  "--http-max-body-bytes", "65536", "--http-allowed-hosts", ALLOWED_EXTRA)
    try:
        check_still_serving(s, "the start")
        before = runs_total(s)
        check_hosts_refused(s)
        ran = check_hosts_served(s)
        check_host_header_rules(s)
        check_framing(s)
        check(runs_total(s) == before + ran, "nothing ran for a refused Host or framing",
              (before, ran, runs_total(s)))
        ran += check_media_types(s)
        check_front_errors(s)
        check(runs_total(s) == before + ran,
              f"only the {ran} requests labelled as taken ran", (before, runs_total(s)))
        check_still_serving(s, "every refusal")
        m = s.metrics()
        check(m.get("sandboxd_http_requests_total", route="/healthz", code="421") >= 2
              and m.get("sandboxd_http_requests_total", route=EXECUTE, code="421") >= 2
              and m.get("sandboxd_http_requests_total", route="none", code="421") >= 2,
              "421s are counted per route (none: no route)",
              {(dict(lab)["route"], dict(lab)["code"]): v for (n, lab), v in m.samples.items()
               if n == "sandboxd_http_requests_total"})
    finally:
        check(s.stop() == 0, "sandboxd exits 0")


def check_allowed_hosts_setting(b):
    for value in ("a.example:8080", "a.example,,b.example", "x/y"):
        p = subprocess.run([f"{b}/sandboxd", "--http-listen", "http://127.0.0.1:1",
                            "--http-allowed-hosts", value], capture_output=True, text=True,
                           timeout=30)
        check(p.returncode == 2 and "http-allowed-hosts" in p.stderr
              and "is not a host name or an IP address" in p.stderr,
              f"--http-allowed-hosts {value!r}: refused at start (exit 2), naming the setting",
              (p.returncode, p.stderr[-300:]))


HOST_ROUTES = [("GET", "/metrics"), ("HEAD", "/metrics"), ("GET", "/healthz"),
               ("GET", "/readyz"), ("GET", "/nope"), ("GET", "/api/v2/runtimes"),
               ("POST", EXECUTE), ("POST", "/mcp"), ("GET", "/mcp")]


def host_request(s, method, path, host):
    headers, body = {"Host": host}, None
    if path == EXECUTE:
        headers, body = {**headers, **JSON_TYPE}, hello_body()
    elif path == "/mcp" and method == "POST":
        headers, body = {**headers, **MCP_HEADERS}, MCP_RUN
    return s.http(method, path, headers, body, timeout=60)


def check_hosts_refused(s):
    """A page whose name now resolves here (DNS rebinding) sends its own
    name: 421 on every route, GET and POST, in the front's shape."""
    for host in ("evil.example", f"evil.example:{s.http_port}", "127.0.0.1.evil.example",
                 "localhost.evil.example", "198.51.100.250", "[2001:db8::1]:80"):
        for method, path in HOST_ROUTES:
            st, h, body = host_request(s, method, path, host)
            if method == "HEAD":
                shaped = body == b""
            elif path.startswith("/api/v2/"):
                shaped = "DNS rebinding" in (piston_error(h, body) or "")
            elif path == "/mcp":
                shaped = "DNS rebinding" in (mcp_error(h, body) or "")
            else:
                shaped = h.get("content-type", "").startswith("text/plain") and \
                    b"--http-allowed-hosts" in body
            check(st == 421 and shaped,
                  f"Host {host}: {method} {path} is 421 (in its front's shape)",
                  (st, h.get("content-type"), body[:300]))


def check_hosts_served(s):
    """The listener's own names and addresses, with or without a port (a
    port mapping changes it), and those of --http-allowed-hosts."""
    port = s.http_port
    hosts = ["127.0.0.1", f"127.0.0.1:{port}", "localhost", f"localhost:{port}", "LocalHost.",
             f"[::1]:{port}", "[::1]", "127.0.0.2:1", socket.gethostname(),
             f"{socket.gethostname()}:{port}", "sandboxd.sandboxd.svc",
             "sandboxd.sandboxd.svc:9090", "10.255.0.7:80"]
    for host in hosts:
        for path in ("/healthz", "/api/v2/runtimes"):
            st, h, body = s.http("GET", path, {"Host": host})
            check(st == 200, f"Host {host}: GET {path} 200", (st, body[:200]))
    # A kubelet's httpGet probe sends the pod's IP and port; a Prometheus
    # scrape of the pod, its target address: an interface's address.
    addrs = own_addresses()
    if not addrs:
        print("note: no non-loopback interface address here; the pod-IP Host is not tried")
    for addr, family in addrs:
        host = f"[{addr}]:{port}" if family == "inet6" else f"{addr}:{port}"
        for path in ("/readyz", "/healthz", "/metrics"):
            st, h, body = s.http("GET", path, {"Host": host})
            check(st == 200, f"Host {host} (an interface's address, as a probe or a scrape "
                  f"sends it): GET {path} 200", (st, body[:200]))
    st, h, body = s.http("POST", EXECUTE, {"Host": f"sandboxd.sandboxd.svc:{port}",
                                           **JSON_TYPE}, hello_body(), timeout=60)
    ok = st == 200 and json.loads(body).get("run", {}).get("stdout") == "hello\n"
    check(ok, "a run through a name of --http-allowed-hosts", (st, body[:200]))
    return int(ok)


def check_host_header_rules(s):
    """RFC 9112, 3.2: one Host in HTTP/1.1, of the form host[:port]."""
    port = s.http_port
    for what, request, want in (
            ("HTTP/1.1 without Host", b"GET /healthz HTTP/1.1\r\n\r\n", 400),
            ("two Host headers", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: localhost"
             b"\r\n\r\n", 400),
            ("an empty Host", b"GET /healthz HTTP/1.1\r\nHost: \r\n\r\n", 400),
            ("Host [::1 (unclosed)", b"GET /healthz HTTP/1.1\r\nHost: [::1\r\n\r\n", 400),
            ("Host with a bad port", b"GET /healthz HTTP/1.1\r\nHost: localhost:x\r\n\r\n", 400),
            ("Host with a path", b"GET /healthz HTTP/1.1\r\nHost: localhost/x\r\n\r\n", 400),
            ("HTTP/1.0 without Host (allowed)", b"GET /healthz HTTP/1.0\r\n\r\n", 200)):
        st, h, body, closed = raw_exchange(port, request)
        check(st == want, f"{what}: {want}", (st, body[:200]))
    st, h, body, closed = raw_exchange(port, b"POST /api/v2/execute HTTP/1.1\r\n"
                                       b"Content-Type: application/json\r\nContent-Length: %d"
                                       b"\r\n\r\n%s" % (len(hello_body()), hello_body()))
    check(st == 400 and "Host" in (piston_error(h, body) or "") and closed,
          "a run without Host: 400 {message}, the connection closed", (st, body[:200], closed))


def check_framing(s):
    """RFC 9112, 6.3: a body whose end two readers could see in two places
    (two Content-Lengths, one beside Transfer-Encoding) is 400 and the
    connection closes, so what follows is never read as a request; a
    Content-Length that is not digits is 400 (libmicrohttpd's own answer);
    a transfer coding other than chunked 501."""
    body = hello_body()
    head = (b"POST /api/v2/execute HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\n")
    smuggled = b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    for what, request, want, ours in (
            ("two Content-Lengths (first the body's)",
             head + b"Content-Length: %d\r\nContent-Length: 5\r\n\r\n%s%s"
             % (len(body), body, smuggled), 400, True),
            ("two Content-Lengths (first shorter)",
             head + b"Content-Length: 5\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body), 400,
             True),
            ("two equal Content-Lengths",
             head + b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n%s" % (len(body), len(body),
                                                                             body), 400, True),
            ("Transfer-Encoding: chunked with Content-Length",
             head + b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n" + chunked, 400,
             True),
            ("Content-Length with Transfer-Encoding: chunked",
             head + b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%s" % (len(body),
                                                                                     body), 400,
             True),
            ("Transfer-Encoding: gzip", head + b"Transfer-Encoding: gzip\r\n\r\n" + body, 501,
             True),
            ("Transfer-Encoding: gzip, chunked",
             head + b"Transfer-Encoding: gzip, chunked\r\n\r\n" + chunked, 501, True),
            ("two Transfer-Encoding: chunked",
             head + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked,
             501, True),
            ("Content-Length: 12abc", head + b"Content-Length: 12abc\r\n\r\n" + body, 400, False),
            ("Content-Length: +5", head + b"Content-Length: +5\r\n\r\n" + body, 400, False),
            ("Content-Length: -1", head + b"Content-Length: -1\r\n\r\n" + body, 400, False),
            ("Content-Length: 5, 5", head + b"Content-Length: 5, 5\r\n\r\n" + body, 400, False)):
        st, h, got, closed = raw_exchange(s.http_port, request)
        # libmicrohttpd answers a malformed length itself (its own HTML).
        shaped = not ours or "ambiguous" in (piston_error(h, got) or "") or \
            "chunked" in (piston_error(h, got) or "")
        check(st == want and shaped and closed,
              f"{what}: {want}{' {message}' if ours else ''}, the connection closed",
              (st, got[:200], closed))
    st, h, got, closed = raw_exchange(s.http_port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                      b"Content-Length: 0\r\nContent-Length: 0\r\n\r\n")
    check(st == 400 and b"Content-Length" in got and closed,
          "two Content-Lengths on an operations route: 400 too", (st, got[:200], closed))


def check_media_types(s):
    """A POST body is application/json (any parameters): a browser's form
    cannot send that. /api/v2/execute also takes text/plain from a client
    that is no browser (no Sec-Fetch-*), as the npm piston-client labels
    its JSON. The runs that were taken, counted."""
    ran = 0
    for ct in ("application/json", "application/json; charset=utf-8", "Application/JSON",
               "text/plain;charset=UTF-8", "text/plain"):
        st, h, body = s.http("POST", EXECUTE, {"Content-Type": ct}, hello_body(), timeout=60)
        ok = st == 200 and json.loads(body).get("run", {}).get("stdout") == "hello\n"
        check(ok, f"Content-Type {ct}: the run is taken", (st, body[:200]))
        ran += ok
    browser = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate",
               "Sec-Fetch-Dest": "document"}
    for what, headers in (("no Content-Type", {}),
                          ("a form", {"Content-Type": "application/x-www-form-urlencoded"}),
                          ("multipart", {"Content-Type": "multipart/form-data; boundary=x"}),
                          ("application/jsonx", {"Content-Type": "application/jsonx"}),
                          ("text/html", {"Content-Type": "text/html"}),
                          ("a browser's text/plain (Sec-Fetch-*)",
                           {"Content-Type": "text/plain", **browser}),
                          ("text/plain with Sec-Fetch-Mode only",
                           {"Content-Type": "text/plain", "Sec-Fetch-Mode": "no-cors"})):
        st, h, body = s.http("POST", EXECUTE, headers, hello_body())
        msg = piston_error(h, body) or ""
        check(st == 415 and msg.startswith("requests must be of type application/json"),
              f"/api/v2/execute, {what}: 415 {{message}}", (st, body[:200]))
    for what, headers in (("text/plain", {"Content-Type": "text/plain",
                                          "Accept": "application/json"}),
                          ("no Content-Type", {"Accept": "application/json"})):
        st, h, body = s.http("POST", "/mcp", headers, MCP_RUN)
        check(st == 415 and "application/json" in (mcp_error(h, body) or ""),
              f"/mcp, {what}: 415 with a JSON-RPC error, id null", (st, body[:200]))
    return ran


def check_front_errors(s):
    """Every refusal on a front's path is that front's JSON (piston-client
    reads every answer with res.json()); the operations' stay text."""
    big = json.dumps({"language": "python", "version": "*",
                      "files": [{"content": "#" * 70000}]}).encode()
    for what, method, path, headers, body, want in (
            ("an unknown Piston path", "GET", "/api/v2/packages", {}, None, 404),
            ("PUT on execute", "PUT", EXECUTE, {}, b"{}", 405),
            ("POST on runtimes", "POST", "/api/v2/runtimes", JSON_TYPE, b"{}", 405),
            ("a body over the cap", "POST", EXECUTE, JSON_TYPE, big, 413),
            ("a body on runtimes", "GET", "/api/v2/runtimes", {}, b"x" * 10, 413),
            ("an Origin header", "POST", EXECUTE, {**JSON_TYPE, "Origin": "http://a.example"},
             hello_body(), 403)):
        st, h, got = s.http(method, path, headers, body)
        check(st == want and piston_error(h, got) is not None,
              f"Piston: {what}: {want} {{message}}", (st, h.get("content-type"), got[:200]))
    st, h, got = s.http("PUT", EXECUTE)
    check(h.get("allow") == "POST", "and the 405 keeps its Allow header", h)
    mcp_big = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "run_code", "arguments": {"code": "#" * 70000}}}).encode()
    for what, method, headers, body, want in (
            ("a body over the cap", "POST", MCP_HEADERS, mcp_big, 413),
            ("an Origin header", "POST", {**MCP_HEADERS, "Origin": "http://a.example"}, MCP_RUN,
             403),
            ("PUT", "PUT", MCP_HEADERS, b"{}", 405),
            ("GET (no stream)", "GET", {"Accept": "text/event-stream"}, None, 405)):
        st, h, got = s.http(method, "/mcp", headers, body)
        check(st == want and mcp_error(h, got) is not None,
              f"MCP: {what}: {want} with a JSON-RPC error, id null", (st, got[:200]))
    st, h, got = s.http("GET", "/nope")
    check(st == 404 and h.get("content-type", "").startswith("text/plain"),
          "an operations path stays text/plain", (st, h))


# ---- /metrics: what the calls of each kind leave in it ----

RUNS = [  # (killed_by, code, flags)
    ("none", "print(1)\n", []),
    ("none", "import sys\nsys.exit(3)\n", []),
    ("timeout", "while True: pass\n", ["--timeout-ms", "1000"]),
    ("memory", "x = bytearray(512 << 20)\n", ["--memory-mb", "64"]),
    ("output_limit", 'import sys\nwhile True: sys.stdout.write("x" * 65536)\n',
     ["--output-kb", "16"]),
    ("signal", "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", []),
]


def make_calls(s):
    """Runs of every killed_by, refusals and other methods; what they must
    count, as {(method, code): n}."""
    for want, code, flags in RUNS:
        rc, out = s.run(code, *flags)
        check(out.get("killed_by") == want, f"a run killed_by {want}", out)
    for flags in (["--timeout-ms", "-1"], ["--memory-mb", "1"]):
        rc, out = s.run(HELLO, *flags)
        check(out.get("status") == "INVALID_ARGUMENT", f"refused: {flags}", out)
    p = subprocess.run([f"{s.bin_dir}/sandbox-run", "-e", s.tcp, "--info"], capture_output=True)
    check(p.returncode == 0, "GetInfo answers", p.stderr)
    p = subprocess.run([f"{s.bin_dir}/sandbox-run", "-e", s.tcp, "--health"], capture_output=True)
    check(p.returncode == 0, "Health answers", p.stderr)
    check(s.probe("method", "/sandbox.v1.Sandbox/Nope").startswith("UNIMPLEMENTED"),
          "an unknown method: UNIMPLEMENTED")
    check(s.probe("badpayload").startswith("INVALID_ARGUMENT"), "a bad RunCode payload")
    check(s.probe("garbage").startswith("INVALID_ARGUMENT"), "garbage bytes")
    return {("RunCode", "OK"): 6, ("RunCode", "INVALID_ARGUMENT"): 3, ("GetInfo", "OK"): 1,
            ("Health", "OK"): 1, ("unknown", "UNIMPLEMENTED"): 1,
            ("unknown", "INVALID_ARGUMENT"): 1}


def test_ops_metrics(bin_dir, check):
    s = OpsServer(bin_dir, "--workers", "2")
    try:
        want_requests = make_calls(s)
        st, headers, body = s.http("GET", "/metrics")
        text = body.decode()
        check(st == 200 and headers.get("content-type") ==
              "text/plain; version=0.0.4; charset=utf-8", "/metrics: 200, text format 0.0.4",
              (st, headers))
        m = parse_metrics(text)
        check_counts(m, want_requests)
        check_format(m, text)
        check_promtool(text)
        check_documented(m)
    finally:
        s.stop()


def check_counts(m, want_requests):
    runs = {k: m.get("sandboxd_runs_total", tenant="default", killed_by=k)
            for k in ("none", "timeout", "memory", "output_limit", "signal")}
    check(runs == {"none": 2, "timeout": 1, "memory": 1, "output_limit": 1, "signal": 1},
          "sandboxd_runs_total counts runs by killed_by", runs)
    got, tenants = {}, set()
    for (name, lab), v in m.samples.items():
        if name == "sandboxd_requests_total":
            key = (dict(lab)["method"], dict(lab)["code"])
            got[key] = got.get(key, 0) + v
            tenants.add(dict(lab).get("tenant"))
    check(got == want_requests, "sandboxd_requests_total counts calls by method and code "
          "(summed over the tenant label)", (got, want_requests))
    # Without --tenants every authenticated call is tenant default; Health
    # and requests that did not decode have no tenant.
    check(tenants == {"default", None}, "the tenant label: default, or none", tenants)
    for name in ("sandboxd_run_wall_seconds", "sandboxd_run_cpu_seconds",
                 "sandboxd_queue_wait_seconds"):
        check(m.get(name + "_count") == 6 and m.get(name + "_bucket", le="+Inf") == 6,
              f"{name}: one observation per run", m.get(name + "_count"))
    check(m.get("sandboxd_run_wall_seconds_sum") >= 1.0,
          "the wall-time sum holds the 1 s timeout run", m.get("sandboxd_run_wall_seconds_sum"))
    check(m.get("sandboxd_run_wall_seconds_bucket", le="0.5") <= 5,
          "the timeout run is above the 0.5 s bucket")
    check(m.get("sandboxd_workers") == 2 and m.get("sandboxd_queue_capacity") == 64
          and m.get("sandboxd_queue_depth") == 0 and m.get("sandboxd_runs_in_progress") == 0,
          "the worker and queue gauges", [m.get(n) for n in (
              "sandboxd_workers", "sandboxd_queue_capacity", "sandboxd_queue_depth")])
    check(m.get("process_open_fds", ) > 5 and m.get("process_resident_memory_bytes") > 1 << 20
          and m.get("process_start_time_seconds") > time.time() - 3600,
          "the process collector's figures", [m.get(n) for n in (
              "process_open_fds", "process_resident_memory_bytes")])
    check(m.get("sandboxd_build_info", version="0.1.0") == 1, "sandboxd_build_info")
    check(m.get("sandboxd_ready") == 1 and m.get("sandboxd_draining") == 0, "ready, not draining")


def check_format(m, text):
    check(not m.bad_lines, "every line parses", m.bad_lines[:3])
    families = {m.family_of(name) for name, _ in m.samples}
    check(families <= set(m.type) and families <= set(m.help),
          "every sample's family has HELP and TYPE", families - set(m.type))
    check(set(m.type) == set(m.help) and all(m.help.values()), "every family has a HELP text")
    bad = [n for n, t in m.type.items() if t == "counter" and not n.endswith("_total")]
    check(not bad, "counters end in _total", bad)
    for name, kind in m.type.items():
        if kind != "histogram":
            continue
        buckets = sorted((float(dict(lab)["le"]), v) for (n, lab), v in m.samples.items()
                         if n == name + "_bucket")
        counts = [v for _, v in buckets]
        check(len(buckets) >= 5 and buckets[-1][0] == float("inf") and counts == sorted(counts)
              and counts[-1] == m.get(name + "_count"),
              f"{name}: cumulative buckets up to +Inf equal to _count", buckets)


def check_promtool(text):
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                       text=True)
    check(p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(),
          "promtool check metrics passes with no finding", (p.returncode, p.stdout, p.stderr))


def check_documented(m):
    with open(os.path.join(REPO, "docs", "OPERATIONS.md")) as f:
        doc = f.read()
    missing = [n for n in m.type if f"`{n}`" not in doc]
    check(not missing, "docs/OPERATIONS.md lists every metric", missing)


def test_ops_prometheus(bin_dir, check):
    s = OpsServer(bin_dir)
    tmp = tempfile.mkdtemp(prefix="sbx-prom-")
    prom = None
    try:
        check(os.access("/usr/bin/prometheus", os.X_OK), "/usr/bin/prometheus is installed "
              "(scripts/install-deps)")
        n = 3
        for i in range(n):
            rc, out = s.run(f"print({i})\n")
            check(out.get("stdout") == f"{i}\n", f"run {i}", out)
        prom, port = start_prometheus(tmp, s.http_port)
        check(wait_query_sum(port, 'up{job="sandboxd"}', 1) == 1,
              "Prometheus scrapes sandboxd (up == 1)")
        got = wait_query_sum(port, "sandboxd_runs_total", n)
        check(got == n, f"Prometheus' query API reads sandboxd_runs_total == {n}", got)
        rc, out = s.run("while True: pass\n", "--timeout-ms", "300")
        got = wait_query_sum(port, 'sandboxd_runs_total{killed_by="timeout"}', 1)
        check(got == 1, "and the next scrape's timeout run by its label", got)
    finally:
        stop_prometheus(prom, tmp)
        s.stop()


# ---- --log-format json ----

def test_ops_json_logs(bin_dir, check):
    s = OpsServer(bin_dir, "--log-format", "json", "--workers", "1")
    try:
        rc, out = s.run(HELLO, "--run-id", "json-ok")
        check(out.get("stdout") == "hello\n", "a run on a json-logging server", out)
        rc, out = s.run("while True: pass\n", "--timeout-ms", "500", "--run-id", "json-timeout")
        check(out.get("killed_by") == "timeout", "a timeout run", out)
        rc, out = s.run(HELLO, "--timeout-ms", "-1")
        check(out.get("status") == "INVALID_ARGUMENT", "a refused call", out)
        # A request id with a quote, a newline and an escape (the Python
        # client's ids replaced): the log keeps one line per event.
        py = ("import sandboxd, sandboxd._wire as w\n"
              "w.new_request_id = lambda: 'evil\"\\nts=x event=forged\\x1b'\n"
              f"r = sandboxd.Client({s.tcp!r}).run_code('print(7)', run_id='json-hostile-id')\n"
              "print(r.stdout_text, end='')\n")
        p = subprocess.run(["/usr/bin/python3", "-c", py], capture_output=True, text=True,
                           timeout=60, env=dict(os.environ, PYTHONPATH=os.path.join(bin_dir, "..",
                                                                                    "python")))
        check(p.stdout == "7\n", "a run whose request id is hostile", (p.stdout, p.stderr[-500:]))
    finally:
        check(s.stop() == 0, "server exits 0")
    lines = [l for l in s.log_text().splitlines() if l.strip()]
    objs, bad = [], []
    for l in lines:
        try:
            objs.append(json.loads(l))
        except ValueError:
            bad.append(l)
    check(lines and not bad, "every log line is one JSON object", bad[:3])
    check(all(isinstance(o, dict) and {"time", "level", "event"} <= set(o) for o in objs),
          "each has time, level and event", [o for o in objs if "event" not in o][:2])
    events = [o["event"] for o in objs]
    for e in ("http_listening", "listening", "ready", "draining", "stopped"):
        check(e in events, f"the {e} event is there", events)
    runs = {o.get("run_id"): o for o in objs if o["event"] == "run"}
    ok, to = runs.get("json-ok", {}), runs.get("json-timeout", {})
    check(ok.get("status") == "OK" and ok.get("killed_by") == "none" and ok.get("level") == "info"
          and ok.get("exit_code") == 0 and isinstance(ok.get("wall_ms"), int)
          and isinstance(ok.get("duration_ms"), int) and isinstance(ok.get("queue_ms"), int)
          and ok.get("session") == "-" and re.match(r"\d{4}-\d\d-\d\dT.*Z$", ok.get("time", "")),
          "the run event with its fields (numbers as numbers)", ok)
    check(to.get("killed_by") == "timeout" and to.get("wall_ms", 0) >= 500
          and to.get("signal") == 9, "the timeout run's event", to)
    check(ok.get("method") == "RunCode" and re.match(r"127\.0\.0\.1:\d+$", ok.get("peer", ""))
          and isinstance(ok.get("request_id"), str) and ok.get("request_id"),
          "the run event names the request id, the method and the peer", ok)
    check(len(runs) == 3, "no run event for the refused call", list(runs))
    calls = [o for o in objs if o["event"] == "call"]
    check(len(calls) == 1 and calls[0].get("status") == "INVALID_ARGUMENT"
          and calls[0].get("method") == "RunCode" and calls[0].get("level") == "warning"
          and re.match(r"127\.0\.0\.1:\d+$", calls[0].get("peer", ""))
          and calls[0].get("request_id") and "timeout_ms" in calls[0].get("msg", "")
          and isinstance(calls[0].get("duration_ms"), int),
          "the refused call's event: request id, method, peer, status, why, duration", calls)
    hostile = runs.get("json-hostile-id", {})
    check(hostile.get("request_id") == "evil??ts=x event=forged?"
          and "forged" not in events, "a hostile request id is logged printable, in its field",
          hostile)
    stopped = [o for o in objs if o["event"] == "stopped"]
    check(stopped and stopped[0].get("runs_total") == 3 and stopped[0].get("requests_total") == 4,
          "the stopped event's counters", stopped)
