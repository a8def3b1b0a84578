"""End-to-end tests of per-run network policy (RunCodeRequest.allow_net,
issue 27, docs/EGRESS.md): the real sandboxd, its egress proxy, real HTTP
and HTTPS origins on a loopback address of this test's own (127.a.b.c,
ports 80, 443 and one more; the HTTPS one with a certificate from a CA made
by openssl here, tests/lib/tls_certs.py), and names resolved by a small
DNS server of the test's (tests/lib/dns_server.py) that the server is pointed
at with --egress-dns. Loopback is private: an allowed name that resolves
to the origin works only with a CIDR entry containing it (127.0.0.0/8),
and the server's ceiling names both. Nothing here leaves the machine: no
name resolves to anything the test does not serve, and a public address is
never dialled. Calls are raw request envelopes built from the build's
sandbox_pb2 (an API key in the envelope where a tenant is needed).

  egress_allowed   an allowed name through urllib (http, https), http.client
                   as requests uses it (absolute-form GET, CONNECT tunnel),
                   curl in the sandbox, a 1 MiB download; the reply's
                   egress counts; pip install --user from a local index,
                   imported in the same run; each connection's name
                   resolved once (the DNS server's questions)
  egress_refused   every bypass, refused with its reason in the program's
                   view (the proxy's status line) and in the reply's
                   feedback: a name not listed, a listed name on another
                   port, IPv4 and IPv6 literals, names resolving to
                   127.0.0.1, 10.0.0.1, 169.254.169.254, ::1, rebinding (one
                   public and one private answer), SNI != CONNECT host;
                   without the proxy: a direct connect(), the server's own
                   ports, UDP (DNS to 8.8.8.8), raw and packet sockets,
                   proxy variables unset, /etc/hosts; the caps
                   (egress-connections, egress-bytes)
  egress_ceiling   --egress-allow empty, entries outside the ceiling, bad
                   syntax (request and flag), a tenant's egress_allow,
                   GetInfo's egress_allow; nothing ran for a refused request
  egress_modes     python-zygote (a fresh interpreter, said in feedback) and
                   an INTERPRETER session (the first call's allow_net holds);
                   two concurrent runs: each sees only its own proxy
  egress_metrics   /metrics' egress counters by tenant and decision, bytes by
                   direction, against the replies; one event=egress log line
                   per connection with its run_id

Needs root (the engine does); without it the test skips loudly (exit 77).
"""
import hashlib
import http.client
import http.server
import json
import os
import random
import re
import secrets
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.request

from lib.dns_server import DnsServer
from lib.harness import Server, WireCaller, check, free_port, load_pb2
from lib.prometheus import parse_metrics
from lib.tls_certs import make_origin_certs
from lib.wheelhouse import make_module_wheel

OK, INVALID_ARGUMENT, FAILED_PRECONDITION = 0, 3, 9
INTERP = 2
KIB, MIB = 1 << 10, 1 << 20
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
CA_IN_RUN = "/workspace/mounts/ca.crt"
CIDR = "127.0.0.0/8"  # the origins' addresses, and every loopback name's


# ---- the test's own small internet on loopback ----

class Origins:
    """HTTP on ADDR:80, HTTPS on ADDR:443 (a certificate for ok.test,
    other.test and idx.test from a CA of the test's), HTTP on ADDR:alt_port,
    ADDR a loopback address of this test's (127.a.b.c); a PEP 503 index
    under /simple/ and /files/; a DNS server for the test's names. Every
    request is recorded in hits as (scheme, Host header, path), every TLS
    server name asked for in snis."""

    def __init__(self):
        self.addr = "127.%d.%d.%d" % (random.randint(100, 250), random.randint(1, 250),
                                      random.randint(1, 250))
        self.dir = tempfile.mkdtemp(prefix="sbx-egress-")
        os.chmod(self.dir, 0o755)
        self.certs = make_origin_certs(self.dir, ["ok.test", "other.test", "idx.test"])
        with open(self.certs["origin_ca_crt"], "rb") as f:
            self.ca = f.read()
        self.www = os.path.join(self.dir, "www")
        self.files = os.path.join(self.www, "files")
        os.makedirs(self.files)
        self.hits = []
        self.snis = []
        self.servers = []
        self.serve(80, tls=False)
        self.serve(443, tls=True)
        self.alt_port = self.serve(0, tls=False)
        self.dns = DnsServer({
            "ok.test": [self.addr], "other.test": [self.addr], "idx.test": [self.addr],
            "loop.test": ["127.0.0.1"], "private.test": ["10.0.0.1"],
            "meta.test": ["169.254.169.254"], "v6loop.test": ["::1"],
            "rebind.test": ["93.184.216.34", "127.0.0.1"]}).start()

    def serve(self, port, tls):
        origins = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            timeout = 20  # a connection a test holds open ends by itself

            def __init__(self, *a, **kw):
                super().__init__(*a, directory=origins.www, **kw)

            def setup(self):
                if tls:  # the handshake here, in the request's thread, not in accept()
                    self.request.settimeout(self.timeout)
                    self.request.do_handshake()
                super().setup()

            def do_GET(self):
                origins.hits.append(("https" if tls else "http", self.headers.get("Host", ""),
                                     self.path))
                if self.path == "/hello":
                    body = f"hello over {'https' if tls else 'http'}\n".encode()
                    return self.reply(body)
                m = re.fullmatch(r"/bytes/(\d+)", self.path)
                if m:
                    return self.stream(int(m.group(1)))
                return super().do_GET()

            def reply(self, body):
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def stream(self, n):
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(n))
                self.end_headers()
                chunk = b"x" * (64 * KIB)
                try:
                    while n > 0:
                        self.wfile.write(chunk[:min(n, len(chunk))])
                        n -= len(chunk)
                except OSError:
                    pass  # cut by the proxy (the byte cap test)

            def log_message(self, *a):
                pass

        class Quiet(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def get_request(self):
                sock, peer = self.socket.accept()
                if tls:
                    sock = ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                return sock, peer

            def handle_error(self, request, client_address):
                pass  # cut tunnels and refused handshakes are what some tests do

        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(self.certs["origin_crt"], self.certs["origin_key"])
            ctx.sni_callback = lambda sslobj, name, c: self.snis.append(name)
        httpd = Quiet((self.addr, port), Handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        self.servers.append(httpd)
        return httpd.server_address[1]

    def add_wheel(self, project, path):
        d = os.path.join(self.www, "simple", project)
        os.makedirs(d, exist_ok=True)
        name = os.path.basename(path)
        with open(os.path.join(d, "index.html"), "a") as f:
            f.write(f'<a href="../../files/{name}">{name}</a>\n')

    def stop(self):
        for h in self.servers:
            h.shutdown()
            h.server_close()
        self.dns.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class EgressServer(Server):
    """A sandboxd pointed at the origins' DNS server, with the operations
    listener (for /metrics and the ops-port probe)."""
    tmp_prefix = "sbx-egress-"

    def __init__(self, bin_dir, origins, *extra, **kw):
        self.http_port = free_port()
        super().__init__(bin_dir, "--http-listen", f"http://127.0.0.1:{self.http_port}",
                         "--egress-dns", f"127.0.0.1:{origins.dns.port}", *extra, **kw)

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics",
                                    timeout=10) as r:
            return parse_metrics(r.read().decode())


class Caller(WireCaller):
    """One REQ peer calling as one tenant (key None: no credential)."""

    def __init__(self, server, pb, key=None, timeout=180):
        super().__init__(server.port, pb, timeout=timeout, key=key)
        self.pb = pb

    def run(self, code, allow_net=(), ca=None, timeout_ms=60000, **kw):
        """RunCode: (status, message, RunCodeResponse or None). ca: the
        origins' CA as the input file mounts/ca.crt."""
        req = self.pb.RunCodeRequest(code=code, allow_net=list(allow_net), **kw)
        if ca is not None:
            req.files.append(self.pb.File(path="ca.crt", content=ca))
        req.limits.CopyFrom(self.pb.Limits(timeout_ms=timeout_ms))
        st, msg, pl = self.call("RunCode", req)
        return st, msg, (self.pb.RunCodeResponse.FromString(pl) if st == OK else None)

    def info(self):
        st, msg, pl = self.call("GetInfo", self.pb.GetInfoRequest())
        if st != OK:
            raise RuntimeError(f"GetInfo: {st} {msg}")
        return self.pb.GetInfoResponse.FromString(pl)

    def close_session(self, sid):
        return self.call("CloseSession", self.pb.CloseSessionRequest(session_id=sid))[:2]


# What every program here starts with: R printed as JSON at the end, the
# proxy asked directly (its status line, as the program sees it), errors by
# class and errno name.
PRELUDE = r'''
import errno, http.client, json, os, socket, ssl, subprocess, sys, time
import urllib.error, urllib.parse, urllib.request
R = {}
CA = "/workspace/mounts/ca.crt"
PROXY = urllib.parse.urlsplit(os.environ.get("HTTP_PROXY", "http://127.0.0.1:3128"))
def head_of(s):
    head = b""
    while b"\r\n\r\n" not in head:
        c = s.recv(1)
        if not c:
            break
        head += c
    return head
def status_line(head):
    return head.split(b"\r\n")[0].decode(errors="replace")
def ask(request):
    """Sends request to the proxy: its answer's status line."""
    s = socket.create_connection((PROXY.hostname, PROXY.port), timeout=20)
    s.sendall(request)
    line = status_line(head_of(s))
    s.close()
    return line
def connect(target):
    t = target.encode()
    return ask(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (t, t))
def tunnel(target):
    """A CONNECT tunnel: (socket, status line)."""
    s = socket.create_connection((PROXY.hostname, PROXY.port), timeout=20)
    t = target.encode()
    s.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (t, t))
    return s, status_line(head_of(s))
def err(f, *a, **k):
    try:
        f(*a, **k)
        return "ok"
    except OSError as e:
        name = errno.errorcode.get(e.errno, str(e.errno)) if isinstance(e.errno, int) and e.errno > 0 else ""
        return type(e).__name__ + (":" + name if name else "")
def get(url, **kw):
    with urllib.request.urlopen(url, timeout=20, **kw) as r:
        return [r.status, r.read().decode()]
def done():
    print(json.dumps(R))
'''


def result(r):
    """The program's R (its last stdout line), or {} when it printed none."""
    if r is None:
        return {}
    lines = r.stdout.decode(errors="replace").strip().splitlines()
    try:
        return json.loads(lines[-1]) if lines else {}
    except ValueError:
        return {}


def show(r):
    """A reply, short, for a failed check's detail."""
    if r is None:
        return "no reply"
    return (f"exit={r.exit_code} killed_by={r.killed_by} feedback={list(r.feedback)} "
            f"egress=({r.egress.connections},{r.egress.refused},{r.egress.bytes_up},"
            f"{r.egress.bytes_down}) stdout={r.stdout[-600:]!r} stderr={r.stderr[-1200:]!r}")


def network_feedback(r):
    return [line for line in r.feedback if line.startswith("network:")] if r else []


def proxy_says(reason, status=403):
    return f"HTTP/1.1 {status} sandboxd egress: {reason}"


def egress_lines(s, **fields):
    """The log's event=egress lines whose fields have these values."""
    out = []
    for line in s.log_text().splitlines():
        if " event=egress " in line and all(f" {k}={v} " in line + " "
                                            for k, v in fields.items()):
            out.append(line)
    return out


def host_address():
    """An address of this host other than loopback, if it has one."""
    p = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"],
                       capture_output=True, text=True)
    m = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", p.stdout)
    return m.group(1) if m else ""


# ---- egress_allowed ----

def test_egress_allowed(bin_dir):
    o = Origins()
    pb = load_pb2(bin_dir)
    ceiling = f"ok.test,idx.test,{CIDR}"
    s = EgressServer(bin_dir, o, "--workers", "2", "--egress-allow", ceiling)
    c = Caller(s, pb)
    allow = ["ok.test", CIDR]
    curl = os.path.exists("/usr/bin/curl")
    try:
        code = PRELUDE + r'''
R["env"] = {k: os.environ.get(k) for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")}
ctx = ssl.create_default_context(cafile=CA)
R["urllib_http"] = get("http://ok.test/hello")
R["urllib_https"] = get("https://ok.test/hello", context=ctx)
# What requests does with the proxy variables: an absolute-form GET to the
# proxy for http, a CONNECT tunnel (set_tunnel) for https.
h = http.client.HTTPConnection(PROXY.hostname, PROXY.port, timeout=20)
h.request("GET", "http://ok.test/hello")
r = h.getresponse()
R["client_http"] = [r.status, r.read().decode()]
h.close()
h = http.client.HTTPSConnection(PROXY.hostname, PROXY.port, timeout=20, context=ctx)
h.set_tunnel("ok.test", 443)
h.request("GET", "/hello")
r = h.getresponse()
R["client_https"] = [r.status, r.read().decode()]
h.close()
t0 = time.monotonic()
n = 0
with urllib.request.urlopen("http://ok.test/bytes/1048576", timeout=20) as r:
    while True:
        b = r.read(65536)
        if not b:
            break
        n += len(b)
R["big"] = n
if CURL:
    for url, extra in (("http://ok.test/hello", []), ("https://ok.test/hello", ["--cacert", CA])):
        p = subprocess.run(["curl", "-sS", "--max-time", "20", *extra, url], capture_output=True, text=True)
        R["curl " + url.split(":")[0]] = [p.returncode, p.stdout, p.stderr[-300:]]
done()
'''.replace("CURL:", "True:" if curl else "False:")
        st, msg, r = c.run(code, allow_net=allow, ca=o.ca)
        R = result(r)
        check(st == OK and r.exit_code == 0 and R, "a run with allow_net runs", (st, msg, show(r)))
        check(R.get("env") == {k: "http://127.0.0.1:3128" for k in PROXY_VARS},
              "the six proxy variables name the proxy inside the run", R.get("env"))
        check(R.get("urllib_http") == [200, "hello over http\n"], "urllib over http", R)
        check(R.get("urllib_https") == [200, "hello over https\n"],
              "urllib over https (CONNECT; the origin's certificate checked against the test CA)",
              R)
        check(R.get("client_http") == [200, "hello over http\n"]
              and R.get("client_https") == [200, "hello over https\n"],
              "http.client as requests uses the proxy: absolute-form GET and a CONNECT tunnel", R)
        check(R.get("big") == MIB, "a 1 MiB download arrives whole", R.get("big"))
        want = 5
        if curl:
            want += 2
            check(R.get("curl http", [None])[:2] == [0, "hello over http\n"]
                  and R.get("curl https", [None])[:2] == [0, "hello over https\n"],
                  "curl in the sandbox, http and https (--cacert), through the proxy variables",
                  R)
        else:
            print("note: no /usr/bin/curl on this host: the curl checks are left out")
        sizes = 4 * len("hello over http\n") + MIB
        check(r is not None and r.egress.connections == want and r.egress.refused == 0
              and r.egress.bytes_down >= sizes and r.egress.bytes_up > 0,
              f"the reply counts {want} connections, none refused, bytes down >= the bodies "
              f"({sizes})", show(r))
        check(network_feedback(r) == [], "no network feedback for a run nothing was refused",
              list(r.feedback) if r else None)
        hosts = {(scheme, host) for scheme, host, path in o.hits if path == "/hello"}
        check(hosts <= {("http", "ok.test"), ("https", "ok.test")} and len(hosts) == 2,
              "the origins saw ok.test as the Host, over http and https", o.hits)
        check(o.snis and set(o.snis) == {"ok.test"}, "the HTTPS origin saw the server name ok.test",
              o.snis)
        check(len(egress_lines(s, run_id=r.run_id, status=200)) == want if r else False,
              "one event=egress line per connection, status=200", s.log_text()[-2000:])

        # Resolved once: one connection asks the DNS server once for its name.
        def asked():
            return (o.dns.asked("ok.test", "A"), o.dns.asked("ok.test", "AAAA"),
                    sum(o.dns.queries.values()))
        before = asked()
        st, msg, r = c.run(PRELUDE + 'R["a"] = get("http://ok.test/hello")\ndone()\n',
                           allow_net=allow)
        a_n, aaaa_n, all_n = (x - y for x, y in zip(asked(), before))
        check(result(r).get("a") == [200, "hello over http\n"] and a_n == 1 and aaaa_n <= 1
              and all_n == a_n + aaaa_n,
              "one connection: its name resolved once by the server (one A question, at most "
              "one AAAA), nothing else asked", ((a_n, aaaa_n, all_n), dict(o.dns.queries),
                                                show(r)))

        # pip install --user from an index the run allows, imported at once.
        o.add_wheel("sbx-egress-pkg", make_module_wheel(o.files, "sbx-egress-pkg", "1.0",
                                                        "from the index"))
        o.hits.clear()
        code = r'''
import os, site, subprocess, sys
p = subprocess.run([sys.executable, "-m", "pip", "install", "--user", "--break-system-packages",
                    "--disable-pip-version-check", "--no-cache-dir", "--index-url",
                    "http://idx.test/simple/", "--trusted-host", "idx.test", "sbx-egress-pkg"],
                   capture_output=True, text=True)
print("pip exit", p.returncode, p.stdout[-800:], p.stderr[-1500:], file=sys.stderr)
sys.path.insert(0, site.getusersitepackages())
import sbx_egress_pkg
print(sbx_egress_pkg.VALUE)
'''
        st, msg, r = c.run(code, allow_net=["idx.test", CIDR], timeout_ms=60000)
        check(st == OK and r.exit_code == 0 and r.stdout == b"from the index\n",
              "pip install --user through the proxy from http://idx.test/simple/, then import",
              (st, msg, show(r)))
        check(any(h == "idx.test" and p.startswith("/simple/sbx-egress-pkg") for _, h, p in o.hits)
              and any(h == "idx.test" and p.startswith("/files/") for _, h, p in o.hits),
              "the index served pip the project page and the wheel (Host: idx.test)", o.hits)
        check(r is not None and r.egress.connections >= 2 and r.egress.refused == 0,
              "pip's connections are counted, none refused", show(r))
    finally:
        c.close()
        s.stop()
        o.stop()


# ---- egress_refused ----

def test_egress_refused(bin_dir):
    o = Origins()
    pb = load_pb2(bin_dir)
    cap_bytes = MIB
    s = EgressServer(bin_dir, o, "--workers", "2", "--egress-allow", f"*.test,{CIDR}",
                     "--egress-connections", "3", "--egress-bytes", str(cap_bytes))
    c = Caller(s, pb)
    a = o.addr
    allow = ["ok.test", CIDR]
    try:
        # (what, allow_net, program, the proxy's status line the program
        # sees, the reason in the reply's feedback)
        def not_listed(target):
            return f"connection to {target} refused: not in the run's allow list"

        def literal(target):
            return not_listed(target) + " (an address matches CIDR entries only)"

        def private(name, addr, label):
            return (f"connection to {name}:443 refused: {name} resolves to {addr}, {label}; "
                    "only a CIDR entry allows it")

        cases = [
            ("a name not listed (CONNECT), though its address is in a CIDR entry", allow,
             'R["view"] = connect("other.test:443")', not_listed("other.test:443")),
            ("a name not listed (absolute-form GET)", allow,
             'R["view"] = ask(b"GET http://other.test/hello HTTP/1.1\\r\\nHost: other.test\\r\\n\\r\\n")',
             not_listed("other.test:80")),
            ("a listed name on another port", allow,
             f'R["view"] = connect("ok.test:{o.alt_port}")', not_listed(f"ok.test:{o.alt_port}")),
            ("an IPv4 literal not in a CIDR entry (CONNECT)", ["ok.test"],
             f'R["view"] = connect("{a}:443")', literal(f"{a}:443")),
            ("an IPv4 literal not in a CIDR entry (absolute-form GET)", ["ok.test"],
             f'R["view"] = ask(b"GET http://{a}/hello HTTP/1.1\\r\\nHost: {a}\\r\\n\\r\\n")',
             literal(f"{a}:80")),
            ("an IPv6 literal not in a CIDR entry", allow,
             'R["view"] = connect("[::1]:443")', literal("[::1]:443")),
            ("a listed name resolving to 127.0.0.1 without a CIDR entry", ["loop.test"],
             'R["view"] = connect("loop.test:443")',
             private("loop.test", "127.0.0.1", "loopback (127.0.0.0/8)")),
            ("a listed name resolving to 10.0.0.1", ["private.test"],
             'R["view"] = connect("private.test:443")',
             private("private.test", "10.0.0.1", "private (10.0.0.0/8)")),
            ("a listed name resolving to the metadata address", ["meta.test"],
             'R["view"] = connect("meta.test:443")',
             private("meta.test", "169.254.169.254", "link-local (169.254.0.0/16, cloud metadata)")),
            ("a listed name resolving to ::1", ["v6loop.test"],
             'R["view"] = connect("v6loop.test:443")',
             private("v6loop.test", "::1", "loopback (::1)")),
            ("rebinding: a listed name with one public and one private answer", ["rebind.test"],
             'R["view"] = connect("rebind.test:443")',
             private("rebind.test", "127.0.0.1", "loopback (127.0.0.0/8)")),
        ]
        # The server's own ports, as IP literals on a port no entry names (a
        # CIDR entry holds the address but not the port): the reason may say
        # more after "not in the run's allow list".
        prefix_cases = [
            ("the server's RPC port through the proxy", allow,
             f'R["view"] = connect("127.0.0.1:{s.port}")', not_listed(f"127.0.0.1:{s.port}")),
            ("the server's operations port through the proxy", allow,
             f'R["view"] = connect("127.0.0.1:{s.http_port}")',
             not_listed(f"127.0.0.1:{s.http_port}")),
        ]
        for what, allow_net, prog, reason in cases + prefix_cases:
            exact = (what, allow_net, prog, reason) in cases
            before = len(o.hits)
            t0 = time.monotonic()
            st, msg, r = c.run(PRELUDE + prog + "\ndone()\n", allow_net=allow_net)
            took = time.monotonic() - t0
            R = result(r)
            view = R.get("view") or ""
            check(view == proxy_says(reason) if exact else view.startswith(proxy_says(reason)),
                  f"{what}: the program gets 403 with the reason", (R, show(r)))
            check(f"network: {reason}" in r.feedback if exact and r else
                  any(line.startswith(f"network: {reason}") for line in network_feedback(r)),
                  f"{what}: the reply's feedback says why", show(r))
            check(r is not None and r.egress.connections == 1 and r.egress.refused == 1,
                  f"{what}: counted as one connection, refused", show(r))
            check(len(o.hits) == before, f"{what}: the origins got nothing", o.hits[before:])
            check(took < 10, f"{what}: answered at once ({took:.1f} s), no public address dialled")

        # urllib's view of a refusal: the proxy's reason in its exceptions.
        code = PRELUDE + r'''
try:
    get("http://other.test/hello")
except urllib.error.HTTPError as e:
    R["http"] = [e.code, e.reason]
try:
    get("https://other.test/hello", context=ssl.create_default_context(cafile=CA))
except urllib.error.URLError as e:
    R["https"] = str(e.reason)
done()
'''
        st, msg, r = c.run(code, allow_net=allow, ca=o.ca)
        R = result(r)
        check(R.get("http") == [403, "sandboxd egress: " + not_listed("other.test:80")],
              "urllib (http): HTTPError 403 whose reason is the proxy's", (R, show(r)))
        check(R.get("https") == "Tunnel connection failed: 403 sandboxd egress: "
              + not_listed("other.test:443"),
              "urllib (https): 'Tunnel connection failed: 403' with the proxy's reason",
              (R, show(r)))
        check(f"network: {not_listed('other.test:80')} (2 refusals in all)" in
              (r.feedback if r else []),
              "two refusals: the feedback names the first and counts them", show(r))

        # SNI != CONNECT host: the tunnel is cut after the ClientHello; the
        # same tunnel with the right name works.
        code = PRELUDE + r'''
ctx = ssl.create_default_context(cafile=CA)
s, R["wrong_connect"] = tunnel("ok.test:443")
try:
    t = ctx.wrap_socket(s, server_hostname="other.test")
    t.sendall(b"GET /hello HTTP/1.0\r\nHost: other.test\r\n\r\n")
    R["wrong"] = "handshake ok: " + t.recv(200).decode(errors="replace")
except OSError as e:
    R["wrong"] = type(e).__name__
s, R["right_connect"] = tunnel("ok.test:443")
t = ctx.wrap_socket(s, server_hostname="ok.test")
t.sendall(b"GET /hello HTTP/1.0\r\nHost: ok.test\r\n\r\n")
data = b""
while True:
    b = t.recv(4096)
    if not b:
        break
    data += b
R["right"] = data.split(b"\r\n\r\n", 1)[-1].decode()
done()
'''
        o.snis.clear()
        st, msg, r = c.run(code, allow_net=allow, ca=o.ca)
        R = result(r)
        cut = "connection to ok.test:443 cut: TLS server name other.test is not ok.test"
        check((R.get("wrong_connect") or "").startswith("HTTP/1.1 200 "),
              "SNI != CONNECT host: the CONNECT itself is answered 200", (R, show(r)))
        check(R.get("wrong") in ("SSLEOFError", "SSLZeroReturnError", "ConnectionResetError",
                                 "SSLError", "BrokenPipeError"),
              "SNI != CONNECT host: the tunnel is cut during the handshake", (R, show(r)))
        check("other.test" not in o.snis, "the origin never saw the name other.test", o.snis)
        check(R.get("right") == "hello over https\n",
              "the same tunnel with SNI = the CONNECT host works", (R, show(r)))
        check(f"network: {cut}" in (r.feedback if r else []), "the feedback says the tunnel "
              "was cut and why", show(r))
        check(r is not None and r.egress.connections == 2 and r.egress.refused == 1,
              "two connections, one refused (cut)", show(r))
        check(egress_lines(s, run_id=r.run_id if r else "-", target="ok.test:443")
              and cut in s.log_text(), "the log line of the cut tunnel says why",
              s.log_text()[-1500:])

        # The other TLS gates of a tunnel to a name on 443: a ClientHello
        # naming no server, and bytes that are not TLS at all.
        gates = [
            ("a ClientHello without a server name", r'''
ctx = ssl.create_default_context(cafile=CA)
ctx.check_hostname = False
s, R["connect"] = tunnel("ok.test:443")
try:
    ctx.wrap_socket(s, server_hostname=None)
    R["got"] = "handshake ok"
except OSError as e:
    R["got"] = type(e).__name__
''', "the TLS ClientHello names no server (the CONNECT host is ok.test)"),
            ("plain HTTP through a tunnel on 443", r'''
s, R["connect"] = tunnel("ok.test:443")
s.sendall(b"GET /hello HTTP/1.0\r\nHost: ok.test\r\n\r\n")
try:
    R["got"] = s.recv(4096).decode(errors="replace") or "closed"
except OSError as e:
    R["got"] = type(e).__name__
''', "not TLS on port 443"),
        ]
        for what, prog, why in gates:
            before = len(o.hits)
            st, msg, r = c.run(PRELUDE + prog + "done()\n", allow_net=allow, ca=o.ca)
            R = result(r)
            reason = f"connection to ok.test:443 cut: {why}"
            check((R.get("connect") or "").startswith("HTTP/1.1 200 ")
                  and R.get("got") in ("closed", "SSLEOFError", "SSLZeroReturnError",
                                       "ConnectionResetError", "SSLError", "BrokenPipeError"),
                  f"{what}: the tunnel is cut", (R, show(r)))
            check(f"network: {reason}" in (r.feedback if r else [])
                  and r.egress.connections == 1 and r.egress.refused == 1,
                  f"{what}: the feedback says why, one connection refused", show(r))
            check(len(o.hits) == before, f"{what}: the origin got no request", o.hits[before:])

        # No way around the proxy.
        addr = host_address()
        code = PRELUDE + f'''
def sock(*a):
    return err(lambda: socket.socket(*a).close())
R["direct origin"] = err(socket.create_connection, ("{a}", 80), timeout=5)
R["direct origin alt"] = err(socket.create_connection, ("{a}", {o.alt_port}), timeout=5)
R["sandboxd port"] = err(socket.create_connection, ("127.0.0.1", {s.port}), timeout=5)
R["ops port"] = err(socket.create_connection, ("127.0.0.1", {s.http_port}), timeout=5)
R["host address"] = err(socket.create_connection, ("{addr or '192.0.2.1'}", {s.port}), timeout=5)
R["udp4"] = sock(socket.AF_INET, socket.SOCK_DGRAM)
R["udp6"] = sock(socket.AF_INET6, socket.SOCK_DGRAM)
def dns_to_google():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.sendto(b"\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x02ok\\x04test\\x00\\x00\\x01\\x00\\x01", ("8.8.8.8", 53))
R["dns 8.8.8.8"] = err(dns_to_google)
R["raw4"] = sock(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
R["raw6"] = sock(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
R["raw tcp"] = sock(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
R["packet"] = sock(socket.AF_PACKET, socket.SOCK_RAW, 0x0300)
R["packet dgram"] = sock(socket.AF_PACKET, socket.SOCK_DGRAM, 0x0300)
R["netlink"] = sock(socket.AF_NETLINK, socket.SOCK_RAW, 0)
R["tcp4"] = sock(socket.AF_INET, socket.SOCK_STREAM)
R["tcp6"] = sock(socket.AF_INET6, socket.SOCK_STREAM)
R["getaddrinfo"] = err(socket.getaddrinfo, "ok.test", 80)
R["hosts"] = err(lambda: open("/etc/hosts", "a").write("{a} evil.test\\n"))
R["resolv"] = err(lambda: open("/etc/resolv.conf", "w").write("nameserver {a}\\n"))
R["resolv.conf"] = open("/etc/resolv.conf").read() if os.path.lexists("/etc/resolv.conf") else None
R["nss hosts"] = [l for l in open("/etc/nsswitch.conf").read().splitlines() if l.startswith("hosts:")]
R["env"] = sorted(k for k in os.environ if k.lower().endswith("_proxy"))
os.environ.clear()
for url in ("http://ok.test/hello", "http://{a}/hello", "https://ok.test/hello"):
    try:
        get(url)
        R["no proxy " + url] = "ok"
    except urllib.error.URLError as e:
        R["no proxy " + url] = type(e.reason).__name__
done()
'''
        before = len(o.hits)
        st, msg, r = c.run(code, allow_net=allow)
        R = result(r)
        print("no-proxy probes:", R)
        check(R.get("direct origin") == "ConnectionRefusedError:ECONNREFUSED"
              and R.get("direct origin alt") == "ConnectionRefusedError:ECONNREFUSED",
              "a direct connect() to the origin, ignoring the proxy: ECONNREFUSED (the run's own "
              "lo has nothing there)", (R, show(r)))
        check(R.get("sandboxd port") == "ConnectionRefusedError:ECONNREFUSED"
              and R.get("ops port") == "ConnectionRefusedError:ECONNREFUSED",
              "the server's RPC and operations ports: ECONNREFUSED", R)
        check(R.get("host address") == "OSError:ENETUNREACH",
              f"the host's address {addr or '(none; TEST-NET 192.0.2.1)'}: ENETUNREACH (no route)",
              R)
        eacces = "PermissionError:EACCES"
        check(all(R.get(k) == eacces for k in ("udp4", "udp6", "dns 8.8.8.8")),
              "UDP sockets, and so DNS to 8.8.8.8:53: EACCES", R)
        check(all(R.get(k) == eacces for k in ("raw4", "raw6", "raw tcp", "packet",
                                                "packet dgram", "netlink")),
              "raw, packet and netlink sockets: EACCES", R)
        check(R.get("tcp4") == "ok" and R.get("tcp6") == "ok",
              "TCP sockets are allowed (the way to the proxy)", R)
        check(R.get("getaddrinfo") in ("gaierror", "PermissionError:EACCES"),
              "no resolver in the run: getaddrinfo fails (no name server; or its UDP socket "
              "refused, EAI_SYSTEM)", R)
        check(R.get("hosts", "ok") != "ok" and R.get("resolv", "ok") != "ok",
              "/etc/hosts and /etc/resolv.conf cannot be written", R)
        check(R.get("resolv.conf") in (None, "") and R.get("nss hosts") == ["hosts: files"],
              "no resolver in the run's /etc: resolv.conf absent or empty, hosts from files "
              "only", (R.get("resolv.conf"), R.get("nss hosts")))
        check(R.get("env") == sorted(PROXY_VARS), "the proxy variables were set", R)
        check(all(R.get(f"no proxy {u}") in ("gaierror", "PermissionError",
                                             "ConnectionRefusedError")
                  for u in ("http://ok.test/hello", f"http://{a}/hello",
                            "https://ok.test/hello")),
              "proxy variables unset: urllib fails (no name, no route), never a way around",
              R)
        check(r is not None and r.exit_code == 0 and r.egress.connections == 0
              and network_feedback(r) == [], "none of it reached the proxy", show(r))
        check(len(o.hits) == before, "the origins got nothing", o.hits[before:])

        # The caps. At most 3 connections at once: the fourth gets 503, one
        # closed makes room again.
        code = PRELUDE + r'''
held = []
R["first"] = []
for i in range(3):
    s, line = tunnel("ok.test:80")
    held.append(s)
    R["first"].append(line.split(" ")[1] if line else "")
R["fourth"] = connect("ok.test:80")
held.pop().close()
time.sleep(0.5)
s, line = tunnel("ok.test:80")
R["after close"] = line.split(" ")[1] if line else ""
done()
'''
        st, msg, r = c.run(code, allow_net=allow)
        R = result(r)
        why = "more than 3 connections at once for one run (egress-connections)"
        check(R.get("first") == ["200"] * 3
              and R.get("fourth") == proxy_says("connection refused: " + why, 503)
              and R.get("after close") == "200",
              "--egress-connections 3: three tunnels at once, the fourth 503 with the reason, "
              "one closed makes room", (R, show(r)))
        check(any(why in line for line in network_feedback(r)),
              "the feedback names the connection cap", show(r))
        check(r is not None and r.egress.connections == 5 and r.egress.refused == 1,
              "five connections, one refused", show(r))

        # More bytes than --egress-bytes: the connection is cut, the run goes on.
        code = PRELUDE + r'''
n = 0
try:
    with urllib.request.urlopen("http://ok.test/bytes/4194304", timeout=20) as r:
        while True:
            b = r.read(65536)
            if not b:
                break
            n += len(b)
    R["ended"] = "eof"
except Exception as e:
    R["ended"] = type(e).__name__
R["got"] = n
R["after"] = "the run goes on"
done()
'''
        st, msg, r = c.run(code, allow_net=allow)
        R = result(r)
        why = f"more than {cap_bytes} bytes for one run (egress-bytes)"
        check(st == OK and r.exit_code == 0 and R.get("after") == "the run goes on"
              and 0 < R.get("got", 0) < 4 * MIB,
              "--egress-bytes: a 4 MiB download is cut short and the run ends normally",
              (R, show(r)))
        check(r is not None and r.egress.bytes_up + r.egress.bytes_down <= cap_bytes,
              f"no more than {cap_bytes} bytes relayed (up and down together)", show(r))
        check(any(why in line for line in network_feedback(r)),
              "the feedback names the byte cap", show(r))
        st, msg, r = c.run(PRELUDE + 'R["a"] = get("http://ok.test/hello")\ndone()\n',
                           allow_net=allow)
        check(result(r).get("a") == [200, "hello over http\n"],
              "the caps are per run: the next run fetches", show(r))
    finally:
        c.close()
        s.stop()
        o.stop()


# ---- egress_ceiling ----

def new_key():
    return "sbx_" + secrets.token_hex(24)


def write_tenants(path, tenants):
    doc = {"tenants": [dict({"name": n, "api_keys_sha256": [
        hashlib.sha256(k.encode()).hexdigest()]}, **extra) for n, (k, extra) in tenants.items()]}
    with open(path, "w") as f:
        json.dump(doc, f)


def test_egress_ceiling(bin_dir):
    o = Origins()
    pb = load_pb2(bin_dir)
    hello = 'print("ran")\n'
    # No --egress-allow: the feature is off, allow_net refused.
    s = EgressServer(bin_dir, o, "--workers", "1")
    c = Caller(s, pb)
    try:
        check(list(c.info().egress_allow) == [], "GetInfo: egress_allow empty by default")
        before = c.info().runs_total
        st, msg, r = c.run(hello, allow_net=["ok.test"])
        check(st == INVALID_ARGUMENT and msg == 'allow_net[0] ("ok.test"): this server gives '
              "runs no network (--egress-allow is empty); nothing ran",
              "without --egress-allow: INVALID_ARGUMENT naming the entry", (st, msg))
        check(c.info().runs_total == before, "nothing ran")
        st, msg, r = c.run(PRELUDE + 'R["tcp"] = err(socket.socket, socket.AF_INET, '
                           'socket.SOCK_STREAM)\nR["env"] = [k for k in os.environ if '
                           'k.lower().endswith("_proxy")]\ndone()\n')
        check(result(r) == {"tcp": "PermissionError:EACCES", "env": []},
              "a run without allow_net: no TCP socket at all, no proxy variables", show(r))
    finally:
        c.close()
        s.stop()

    ceiling = ["ok.test", "*.good.test", f"{CIDR}", "127.0.0.1:8080", "10.9.0.0/16:*"]
    s = EgressServer(bin_dir, o, "--workers", "1", "--egress-allow", ",".join(ceiling))
    c = Caller(s, pb)
    try:
        check(list(c.info().egress_allow) == ceiling, "GetInfo: egress_allow is the ceiling",
              list(c.info().egress_allow))
        before = c.info().runs_total
        outside = [
            (["evil.example"], 0, "evil.example"),
            (["ok.test", "evil.example"], 1, "evil.example"),
            (["ok.test:8443"], 0, "ok.test:8443"),
            (["good.test"], 0, "good.test"),
            (["*.test"], 0, "*.test"),
            (["*"], 0, "*"),
            (["10.0.0.0/8"], 0, "10.0.0.0/8"),
            (["126.0.0.0/7"], 0, "126.0.0.0/7"),
            (["127.0.0.1:8081"], 0, "127.0.0.1:8081"),
            (["127.0.0.1:8080", "127.0.0.1:9090"], 1, "127.0.0.1:9090"),
            (["10.8.0.0/16:80"], 0, "10.8.0.0/16:80"),
            (["10.0.0.0/8:*"], 0, "10.0.0.0/8:*"),
            (["ok.test:*"], 0, "ok.test:*"),
        ]
        for allow_net, i, entry in outside:
            st, msg, r = c.run(hello, allow_net=allow_net)
            check(st == INVALID_ARGUMENT and msg == f'allow_net[{i}] ("{entry}"): not within '
                  "this server's --egress-allow; nothing ran",
                  f"{allow_net}: refused, naming the entry outside the ceiling", (st, msg))
        bad = [
            ("exa mple.test", "a space (an entry has none)"),
            ("ok.test:0", "port 0 is out of range (1-65535)"),
            ("ok.test:65536", None),
            ("1.2.3.4/33", "CIDR prefix /33 is longer than 32"),
            ("10.0.0.1/8", "host bits set; did you mean 10.0.0.0/8?"),
            ("a.*.test", "'*' only as the whole first label"),
            ("http://ok.test/", None),
            ("", None),
            ("a" * 301, "301 bytes; allowed: 1 to 300"),
        ]
        for entry, why in bad:
            st, msg, r = c.run(hello, allow_net=[entry])
            check(st == INVALID_ARGUMENT and msg.startswith("allow_net[0]")
                  and (len(entry) > 64 or f'("{entry}")' in msg) and (why is None or why in msg),
                  f"bad syntax {entry[:20]!r}: INVALID_ARGUMENT naming the entry"
                  + (f" ({why})" if why else ""), (st, msg))
        # The proxy variables are the server's for a run with allow_net; a
        # run without it may set them (it has no network to use them on).
        for key in PROXY_VARS:
            st, msg, r = c.run(hello, allow_net=["ok.test"], env={key: "http://evil.test:1"})
            check(st == INVALID_ARGUMENT and msg == f"env[{key}]: set by the server for a run "
                  "with allow_net (its egress proxy); nothing ran",
                  f"a run with allow_net setting {key} itself: INVALID_ARGUMENT", (st, msg))
        st, msg, r = c.run(hello, allow_net=["ok.test"] * 33)
        check(st == INVALID_ARGUMENT and "32" in msg, "more than 32 entries: INVALID_ARGUMENT",
              (st, msg))
        check(c.info().runs_total == before, "nothing ran for any refused request",
              (before, c.info().runs_total))
        st, msg, r = c.run('import os\nprint(os.environ["HTTP_PROXY"])\n',
                           env={"HTTP_PROXY": "http://evil.test:1"})
        check(st == OK and r.stdout == b"http://evil.test:1\n",
              "a run without allow_net may set HTTP_PROXY (it has no network)", (st, msg, show(r)))
        for allow_net in (["ok.test"], ["a.good.test", "x.y.good.test:443"], ["127.0.0.1/32"],
                          ["127.1.0.0/16:80", "OK.TEST"], ["127.0.0.1:8080"],
                          ["10.9.1.0/24:8081", "10.9.0.0/16:*", "10.9.0.1"]):
            st, msg, r = c.run(hello, allow_net=allow_net)
            check(st == OK and r.stdout == b"ran\n", f"{allow_net}: within the ceiling, runs",
                  (st, msg, show(r)))
    finally:
        c.close()
        s.stop()

    # A bad --egress-allow: the server does not start, and says which entry.
    # (A state dir of the test's: a server that started anyway touches
    # nothing of the host's.)
    def refused_at_start(*flags):
        state = tempfile.mkdtemp(prefix="sbx-egress-state-")
        try:
            p = subprocess.run([f"{bin_dir}/sandboxd", "--state-dir", state,
                                "--listen", f"tcp://127.0.0.1:{free_port()}", *flags],
                               capture_output=True, text=True, timeout=30)
            return p.returncode, p.stderr
        except subprocess.TimeoutExpired:
            return None, "still running after 30 s"
        finally:
            shutil.rmtree(state, ignore_errors=True)

    for value, entry in (("ok.test,exa mple.test", "exa mple.test"), ("ok.test:0", "ok.test:0")):
        rc, err = refused_at_start("--egress-allow", value)
        check(rc == 2 and "egress-allow" in err and f'"{entry}"' in err,
              f"--egress-allow {value!r}: refused at start (exit 2), naming the entry",
              (rc, err[-400:]))
    rc, err = refused_at_start("--egress-dns", "not-an-address")
    check(rc == 2 and "--egress-dns" in err,
          "--egress-dns that is not an address: refused at start", (rc, err[-400:]))

    # Tenants: a's own ceiling under the server's; b has none of its own.
    tdir = tempfile.mkdtemp(prefix="sbx-egress-tenants-")
    keys = {"a": new_key(), "b": new_key()}
    path = os.path.join(tdir, "tenants.json")
    write_tenants(path, {"a": (keys["a"], {"egress_allow": ["ok.test", CIDR]}),
                         "b": (keys["b"], {})})
    s = EgressServer(bin_dir, o, "--workers", "1", "--tenants", path, "--egress-allow",
                     f"ok.test,other.test,{CIDR}")
    ca, cb = Caller(s, pb, keys["a"]), Caller(s, pb, keys["b"])
    try:
        ia, ib = ca.info(), cb.info()
        check(list(ia.tenant.egress_allow) == ["ok.test", CIDR]
              and list(ib.tenant.egress_allow) == []
              and list(ia.egress_allow) == list(ib.egress_allow) == ["ok.test", "other.test", CIDR],
              "GetInfo: the server's egress_allow, and each tenant's own", (ia.tenant, ib.tenant))
        st, msg, r = ca.run(hello, allow_net=["other.test"])
        check(st == INVALID_ARGUMENT
              and msg == 'allow_net[0] ("other.test"): not within tenant a\'s egress_allow; '
                        'nothing ran',
              "tenant a asking beyond its egress_allow: INVALID_ARGUMENT naming it", (st, msg))
        def code(name):
            return PRELUDE + f'R["a"] = get("http://{name}/hello")\ndone()\n'
        st, msg, r = ca.run(code("ok.test"), allow_net=["ok.test", CIDR])
        check(result(r).get("a") == [200, "hello over http\n"], "tenant a within its own: runs",
              (st, msg, show(r)))
        st, msg, r = cb.run(code("other.test"), allow_net=["other.test", CIDR])
        check(result(r).get("a") == [200, "hello over http\n"],
              "tenant b (no egress_allow): the server's ceiling alone", (st, msg, show(r)))
        st, msg, r = cb.run(hello, allow_net=["evil.example"])
        check(st == INVALID_ARGUMENT and msg == 'allow_net[0] ("evil.example"): not within '
              "this server's --egress-allow; nothing ran", "tenant b beyond the server's ceiling",
              (st, msg))
    finally:
        ca.close()
        cb.close()
        s.stop()
        shutil.rmtree(tdir, ignore_errors=True)
        o.stop()


# ---- egress_modes ----

FETCH_PAIR = PRELUDE + r'''
R["allowed"] = get("http://ok.test/hello")
R["refused"] = connect("other.test:80")
done()
'''


def check_pair(r, what):
    R = result(r)
    reason = "connection to other.test:80 refused: not in the run's allow list"
    check(R.get("allowed") == [200, "hello over http\n"], f"{what}: an allowed name works",
          show(r))
    check(R.get("refused") == proxy_says(reason)
          and f"network: {reason}" in (r.feedback if r else []),
          f"{what}: a name not listed is refused, in its view and the feedback", show(r))


def test_egress_modes(bin_dir):
    o = Origins()
    pb = load_pb2(bin_dir)
    allow = ["ok.test", CIDR]
    s = EgressServer(bin_dir, o, "--workers", "2", "--zygote", "--max-interpreters", "2",
                     "--egress-allow", f"ok.test,other.test,{CIDR}")
    c = Caller(s, pb)
    try:
        st, msg, r = c.run(FETCH_PAIR, allow_net=allow, runtime="python-zygote")
        check(st == OK and r.exit_code == 0, "python-zygote with allow_net runs",
              (st, msg, show(r)))
        check_pair(r, "python-zygote")
        check(any("fresh interpreter" in line for line in r.feedback) if r else False,
              "python-zygote with allow_net: a feedback line says it ran as a fresh interpreter",
              show(r))
        st, msg, r = c.run(PRELUDE + 'R["tcp"] = err(socket.socket, socket.AF_INET, '
                           'socket.SOCK_STREAM)\ndone()\n', runtime="python-zygote")
        check(result(r) == {"tcp": "PermissionError:EACCES"}
              and not any("fresh interpreter" in line for line in r.feedback),
              "python-zygote without allow_net: forked from the zygote, no network", show(r))

        # A FILES session: every run is a fresh interpreter with its own list.
        sid = "egress-files"
        st, msg, r = c.run(FETCH_PAIR, allow_net=allow, session_id=sid)
        check_pair(r, "a FILES session's first run")
        st, msg, r = c.run(PRELUDE + 'R["a"] = get("http://other.test/hello")\ndone()\n',
                           allow_net=["other.test", CIDR], session_id=sid)
        check(result(r) == {"a": [200, "hello over http\n"]},
              "a FILES session's later run with another allow_net: that run's own list",
              (st, msg, show(r)))
        st, msg, r = c.run(PRELUDE + 'R["tcp"] = err(socket.socket, socket.AF_INET, '
                           'socket.SOCK_STREAM)\ndone()\n', session_id=sid)
        check(result(r) == {"tcp": "PermissionError:EACCES"},
              "a FILES session's later run without allow_net: no network", (st, msg, show(r)))
        c.close_session(sid)

        # An interpreter session: the first call's allow_net holds for the
        # interpreter's life.
        sid = "egress-interp"
        st, msg, r = c.run(FETCH_PAIR + "kept = 42\n", allow_net=allow, session_id=sid,
                           session_mode=INTERP)
        check(st == OK, "an interpreter session's first call with allow_net", (st, msg, show(r)))
        check_pair(r, "interpreter, first call")
        st, msg, r = c.run(FETCH_PAIR + "R['kept'] = kept\ndone()\n", session_id=sid,
                           session_mode=INTERP)
        check_pair(r, "interpreter, a later call without allow_net")
        check(st == OK and r.egress.connections == 2 and r.egress.refused == 1,
              "the later call's reply counts its own connections", show(r))
        st, msg, r = c.run(PRELUDE + 'R["a"] = get("http://ok.test/hello")\nR["kept"] = kept\n'
                           'done()\n', allow_net=allow, session_id=sid, session_mode=INTERP)
        check(result(r) == {"a": [200, "hello over http\n"], "kept": 42},
              "a later call repeating allow_net: the same interpreter, still fetches", show(r))
        st, msg, r = c.run("print(kept)\n", allow_net=["ok.test"], session_id=sid,
                           session_mode=INTERP)
        check(st == FAILED_PRECONDITION and "allow_net" in msg,
              "a later call with another allow_net: FAILED_PRECONDITION", (st, msg))
        c.close_session(sid)
        sid = "egress-interp-none"
        st, msg, r = c.run("x = 1\n", session_id=sid, session_mode=INTERP)
        st, msg, r = c.run("print(x)\n", allow_net=allow, session_id=sid, session_mode=INTERP)
        check(st == FAILED_PRECONDITION and "allow_net" in msg,
              "an interpreter started without network: a later call asking for it is "
              "FAILED_PRECONDITION", (st, msg))
        c.close_session(sid)

        # Two runs at once: each has only its own proxy on its loopback.
        listeners = PRELUDE + r'''
def listening(path):
    out = []
    try:
        lines = open(path).read().splitlines()[1:]
    except OSError:
        return out
    for line in lines:
        f = line.split()
        if f[3] == "0A":
            out.append(f[1])
    return out
def decode(a):
    ip, port = a.split(":")
    if len(ip) == 8:
        ip = ".".join(str(int(ip[i:i + 2], 16)) for i in (6, 4, 2, 0))
    return "%s:%d" % (ip, int(port, 16))
R["listening"] = sorted(decode(a) for a in listening("/proc/net/tcp") + listening("/proc/net/tcp6"))
'''
        holder_code = listeners + r'''
l = socket.socket()
R["bind"] = err(l.bind, ("127.0.0.1", 4444))
if R["bind"] == "ok":
    R["listen"] = err(l.listen, 4)
print(json.dumps(R), flush=True)
time.sleep(4)
'''
        prober_code = listeners + r'''
R["other run's listener"] = err(socket.create_connection, ("127.0.0.1", 4444), timeout=5)
R["own proxy"] = connect("other.test:80").split(" ")[1]
done()
'''
        box = {}

        def holder():
            h = Caller(s, pb)
            try:
                box["holder"] = h.run(holder_code, allow_net=allow)
            finally:
                h.close()

        t = threading.Thread(target=holder)
        t.start()
        time.sleep(1.5)
        st, msg, r = c.run(prober_code, allow_net=allow)
        t.join()
        R = result(r)
        held = box.get("holder", (None, None, None))[2]
        try:
            H = json.loads(held.stdout.decode().splitlines()[0])
        except (AttributeError, IndexError, ValueError):
            H = {}
        print("holder:", H, "prober:", R)
        check(R.get("listening") == ["127.0.0.1:3128"],
              "a run's network namespace has exactly one listener: its own proxy", (R, show(r)))
        check(R.get("other run's listener") == "ConnectionRefusedError:ECONNREFUSED",
              "another run's listener (127.0.0.1:4444, held at the same time) is not reachable",
              (R, H))
        check(R.get("own proxy") == "403", "the run's own proxy answers it", R)
        check(H.get("listening") == ["127.0.0.1:3128"] or H.get("bind") != "ok",
              "the other run, likewise, sees only its own proxy", H)

        # A server stopped while an interpreter holds its door: the
        # interpreter stops (and closes the door) before the proxy goes.
        st, msg, r = c.run("y = 1\n", allow_net=allow, session_id="egress-held",
                           session_mode=INTERP)
        check(st == OK, "an interpreter session with allow_net, left open", (st, msg))
    finally:
        c.close()
        rc = s.stop()
        o.stop()
    check(rc == 0, "sandboxd stops cleanly (exit 0) with an interpreter holding a door", rc)


# ---- egress_metrics ----

def test_egress_metrics(bin_dir):
    o = Origins()
    pb = load_pb2(bin_dir)
    tdir = tempfile.mkdtemp(prefix="sbx-egress-tenants-")
    keys = {"a": new_key(), "b": new_key()}
    path = os.path.join(tdir, "tenants.json")
    write_tenants(path, {"a": (keys["a"], {}), "b": (keys["b"], {})})
    s = EgressServer(bin_dir, o, "--workers", "2", "--tenants", path, "--egress-allow",
                     f"ok.test,other.test,{CIDR}")
    callers = {n: Caller(s, pb, k) for n, k in keys.items()}
    allow = ["ok.test", CIDR]
    try:
        m0 = s.metrics()

        def counter(m, name, **labels):
            return m.get(name, **labels) or 0

        # a: 2 allowed, 1 refused; b: 1 allowed, 2 refused.
        plan = {"a": (2, 1), "b": (1, 2)}
        replies = {}
        for tenant, (ok_n, bad_n) in plan.items():
            code = PRELUDE + f'''
R["ok"] = [get("http://ok.test/hello")[0] for i in range({ok_n})]
R["bad"] = [connect("other.test:443").split(" ")[1] for i in range({bad_n})]
done()
'''
            st, msg, r = callers[tenant].run(code, allow_net=allow)
            replies[tenant] = r
            check(result(r) == {"ok": [200] * ok_n, "bad": ["403"] * bad_n},
                  f"tenant {tenant}: {ok_n} allowed, {bad_n} refused", show(r))
        m1 = s.metrics()
        for tenant, (ok_n, bad_n) in plan.items():
            r = replies[tenant]
            for decision, n in (("allowed", ok_n), ("refused", bad_n)):
                d = (counter(m1, "sandboxd_egress_connections_total", tenant=tenant,
                             decision=decision)
                     - counter(m0, "sandboxd_egress_connections_total", tenant=tenant,
                               decision=decision))
                check(d == n, f"/metrics: sandboxd_egress_connections_total{{tenant={tenant},"
                      f"decision={decision}}} grew by {n}", d)
            for direction, want in (("up", r.egress.bytes_up if r else -1),
                                    ("down", r.egress.bytes_down if r else -1)):
                d = (counter(m1, "sandboxd_egress_bytes_total", tenant=tenant,
                             direction=direction)
                     - counter(m0, "sandboxd_egress_bytes_total", tenant=tenant,
                               direction=direction))
                check(d == want and want > 0,
                      f"/metrics: sandboxd_egress_bytes_total{{tenant={tenant},"
                      f"direction={direction}}} grew by the reply's count", (d, want))
            lines = egress_lines(s, run_id=r.run_id) if r else []
            check(len(lines) == ok_n + bad_n
                  and all(f" tenant={tenant} " in line for line in lines)
                  and len([l for l in lines if " status=200 " in l or " status=403 " in l])
                  == ok_n + bad_n
                  and len([l for l in lines if " method=GET " in l and " target=ok.test:80 " in l
                           and " status=200 " in l]) == ok_n
                  and len([l for l in lines if " method=CONNECT " in l
                           and " target=other.test:443 " in l and " status=403 " in l]) == bad_n,
                  f"tenant {tenant}: one event=egress line per connection, with run_id, tenant, "
                  "method, target and status", lines)
        for name in ("sandboxd_egress_connections_total", "sandboxd_egress_bytes_total"):
            check(m1.type.get(name) == "counter" and m1.help.get(name),
                  f"{name} is a counter with HELP", (m1.type.get(name), m1.help.get(name)))
        check(m1.bad_lines == [], "/metrics parses", m1.bad_lines[:5])
    finally:
        for c in callers.values():
            c.close()
        s.stop()
        shutil.rmtree(tdir, ignore_errors=True)
        o.stop()
