"""End-to-end tests of https:// on the operations listener (--http-listen
https://HOST:PORT): libmicrohttpd's TLS (GnuTLS) with the server's
--tls-cert and --tls-key (here an encrypted key with
--tls-key-password-file), and client certificates from --tls-ca
(--tls-client-auth). Certificates are made by openssl inside each test
(tests/lib/tls_certs.py). Clients: Python's ssl (OpenSSL), curl and a real
Prometheus server scraping /metrics over TLS with a client certificate.

Each test (one ctest entry, service_<name>) starts its own sandboxd (uids
from the harness). Needs root (the engine does); without it the test skips
loudly (exit 77), or fails when CI=true (tests/conftest.py).
"""
import http.client
import os
import shutil
import socket
import ssl
import subprocess
import tempfile

from lib.harness import Server, allocate_uids, check, free_port
from lib.tls_certs import make_certs
from lib.prometheus import parse_metrics, start_prometheus, stop_prometheus, wait_query_sum

HERE = os.path.dirname(os.path.abspath(__file__))


class HttpsServer(Server):
    """A sandboxd whose operations listener is https:// on a free port."""

    def __init__(self, bin_dir, certs, *extra):
        self.http_port = free_port()
        self.certs = certs
        super().__init__(bin_dir, "--http-listen",
                         f"https://127.0.0.1:{self.http_port}", "--tls-cert", certs["server_crt"],
                         *extra)

    def get(self, path, cert=None, key=None, ca=None, server_name="127.0.0.1"):
        """GET over TLS: (status, body), or (None, the error) when the
        handshake or the connection failed."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(ca or self.certs["ca_crt"])
        if cert is not None:
            ctx.load_cert_chain(cert, key)
        try:
            raw = socket.create_connection(("127.0.0.1", self.http_port), timeout=10)
            tls = ctx.wrap_socket(raw, server_hostname=server_name)
        except (OSError, ssl.SSLError) as e:
            return None, repr(e)
        c = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=10)
        c.sock = tls
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read()
        except (OSError, http.client.HTTPException) as e:
            return None, repr(e)
        finally:
            c.close()


def certs_dir():
    d = tempfile.mkdtemp(prefix="sbx-https-certs-")
    return d, make_certs(d)


def test_https_client_auth_required(bin_dir, check):
    d, c = certs_dir()
    s = HttpsServer(bin_dir, c, "--tls-key", c["server_enc_key"], "--tls-key-password-file",
                    c["key_password_txt"], "--tls-ca", c["ca_crt"])
    try:
        log = s.log_text()
        check("tls=on client_certificates=required_but_probes" in log,
              "the log says the listener is https:// and what it asks of clients", log[-1500:])
        me = dict(cert=c["client_crt"], key=c["client_key"])
        status, body = s.get("/metrics", **me)
        check(status == 200 and b"sandboxd_requests_total" in body,
              "the right client certificate: /metrics over https", (status, body[:200]))
        for path in ("/healthz", "/readyz"):
            status, body = s.get(path)
            check(status == 200, f"{path} answers a client without a certificate (a kubelet)",
                  (status, body))
        # The handshake asks for a certificate and goes on without one; the
        # request is what is refused.
        status, body = s.get("/metrics")
        check(status == 403 and b"client certificate" in body,
              "no client certificate: /metrics refused with 403 saying why", (status, body))
        # One shown that does not verify ends the handshake (http_tls.c):
        # no request is read from such a client, on any path.
        for what, kw in (("a certificate from another CA",
                          dict(cert=c["other_client_crt"], key=c["other_client_key"])),
                         ("an expired certificate",
                          dict(cert=c["expired_client_crt"], key=c["expired_client_key"]))):
            for path in ("/metrics", "/healthz"):
                status, body = s.get(path, **kw)
                check(status is None, f"{what}: the handshake fails, {path} is not read",
                      (status, body))
        status, err = s.get("/metrics", ca=c["other_ca_crt"], **me)
        check(status is None and "CERTIFICATE_VERIFY_FAILED" in err,
              "a client trusting another CA refuses the server", err)
        status, err = s.get("/metrics", server_name="other.test", **me)
        check(status is None and "CERTIFICATE_VERIFY_FAILED" in err,
              "a client dialing another name refuses the server", err)
        with socket.create_connection(("127.0.0.1", s.http_port), timeout=5) as raw:
            raw.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            try:
                got = raw.recv(4096)
            except OSError:
                got = b""
            check(not got.startswith(b"HTTP/"), "plain HTTP to the https:// port gets no answer",
                  got[:100])
        p = subprocess.run(["curl", "-sS", "--cacert", c["ca_crt"], "--cert", c["client_crt"],
                            "--key", c["client_key"], f"https://localhost:{s.http_port}/metrics"],
                           capture_output=True, timeout=30)
        check(p.returncode == 0 and b"sandboxd_runs_total" in p.stdout,
              "curl with the client certificate reads /metrics", p.stderr[-300:])
        p = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--cacert",
                            c["ca_crt"], f"https://localhost:{s.http_port}/metrics"],
                           capture_output=True, timeout=30, text=True)
        check(p.stdout in ("403", "000"), "curl without one does not", (p.stdout, p.stderr))
        rc, out = s.run('print("still serving")\n')
        check(out.get("stdout") == "still serving\n", "the RPC listener serves throughout", out)
        check_prometheus_over_tls(s, c)
    finally:
        s.stop()
        shutil.rmtree(d, ignore_errors=True)


def check_prometheus_over_tls(s, c):
    """A real Prometheus scrapes /metrics over TLS with a client certificate."""
    tmp = tempfile.mkdtemp(prefix="sbx-prom-tls-")
    prom = None
    try:
        prom, port = start_prometheus(tmp, s.http_port, tls={
            "ca_file": c["ca_crt"], "cert_file": c["client_crt"], "key_file": c["client_key"],
            "server_name": "localhost"})
        check(wait_query_sum(port, 'up{job="sandboxd"}', 1) == 1,
              "Prometheus scrapes sandboxd over https with its client certificate")
        got = wait_query_sum(port, "sandboxd_runs_total", 1)
        check(got == 1, "and reads sandboxd_runs_total back through its query API", got)
    finally:
        stop_prometheus(prom, tmp)


def test_https_client_auth_none(bin_dir, check):
    d, c = certs_dir()
    s = HttpsServer(bin_dir, c, "--tls-key", c["server_key"])
    try:
        status, body = s.get("/metrics")
        check(status == 200 and b"sandboxd_" in body,
              "without --tls-ca no certificate is asked for: /metrics over https", status)
        m = parse_metrics(body.decode())
        check(m.samples, "the exposition parses", body[:200])
        # Settings: https:// without a certificate is refused before anything starts.
        uid_base = str(allocate_uids())
        p = subprocess.run([f"{bin_dir}/sandboxd", "--http-listen", "https://127.0.0.1:1",
                            "--listen", "tcp://127.0.0.1:1", "--uid-base", uid_base],
                           capture_output=True, text=True, timeout=30)
        check(p.returncode == 2 and "https:// needs --tls-cert" in p.stderr,
              "https:// without --tls-cert: exit 2 naming the setting", (p.returncode, p.stderr))
        p = subprocess.run([f"{bin_dir}/sandboxd", "--http-listen", "https://127.0.0.1:1",
                            "--tls-cert", c["server_crt"], "--tls-key", c["mismatch_key"],
                            "--listen", "tcp://127.0.0.1:1", "--uid-base", uid_base],
                           capture_output=True, text=True, timeout=30)
        check(p.returncode == 1 and "does not belong to the certificate" in p.stderr,
              "https:// with a key that is not the certificate's: exit 1 naming the file",
              (p.returncode, p.stderr))
    finally:
        s.stop()
        shutil.rmtree(d, ignore_errors=True)
