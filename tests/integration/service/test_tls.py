"""End-to-end tests of sandboxd's tls+tcp:// listeners through sandbox-run
and sandbox-bench, with certificates made by openssl in each test's own
directory (tests/lib/tls_certs.py: a CA, a server certificate for
127.0.0.1/localhost, client certificates from the CA, from another CA and
an expired one, a server certificate for another name).

Each refusal is checked where it matters: the client says UNAVAILABLE and
"nothing was sent", the server's runs_total (GetInfo over its plain tcp
listener) and its event=run lines stay as they were, the server logs the
failed handshakes, and the right client is served right after. Needs root
(the engine does); without it the test skips loudly (exit 77), or fails
when CI=true (tests/conftest.py).
"""
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

from lib import mcp_stdio
from lib.harness import (Server, allocate_uids, check, closed_by_peer, free_port, sp_connect,
                         wait_log)
from lib.tls_certs import make_certs

HELLO = 'print("hello")\n'
CONNECT = ["--connect-timeout-ms", "1500"]
REFUSED = "TLS handshakes failed"


class TLSServer(Server):
    """A sandboxd with a tls+tcp:// listener beside its tcp and ipc ones.
    tls_flags: the --tls-* flags (certificates from certs)."""

    def __init__(self, bin_dir, certs, *tls_flags, extra=()):
        self.certs = certs
        self.tls_port = free_port()
        self.tls = f"tls+tcp://127.0.0.1:{self.tls_port}"
        self.tls_flags = list(tls_flags)
        super().__init__(bin_dir, *extra)

    def extra_args(self):
        return ["--listen", self.tls, *self.tls_flags]

    def client(self, cert="client", ca="ca_crt", *more):
        """sandbox-run's TLS flags: the CA it trusts, the client certificate
        (None: none)."""
        flags = ["--tls-ca", self.certs[ca]]
        if cert is not None:
            flags += ["--tls-cert", self.certs[f"{cert}_crt"], "--tls-key", self.certs[f"{cert}_key"]]
        return flags + list(more)

    def runs(self):
        """(runs_total from GetInfo over plain tcp, event=run lines logged)."""
        p = subprocess.run([f"{self.bin_dir}/sandbox-run", "-e", self.tcp, "--info"],
                           capture_output=True, text=True, timeout=30)
        total = json.loads(p.stdout)["runs_total"] if p.returncode == 0 else None
        return total, self.log_text().count("event=run ")


def certs_dir():
    d = tempfile.mkdtemp(prefix="sbx-tls-certs-")
    return d, make_certs(d)


def standard_flags(certs, mode=None):
    flags = ["--tls-cert", certs["server_crt"], "--tls-key", certs["server_key"]]
    if mode != "none-without-ca":
        flags += ["--tls-ca", certs["ca_crt"]]
    if mode is not None and mode != "none-without-ca":
        flags += ["--tls-client-auth", mode]
    return flags


def refused(s, what, out, rc, before):
    """One refusal: UNAVAILABLE, nothing sent, nothing ran."""
    err = out.get("error", "")
    check(rc == 125 and out.get("status") == "UNAVAILABLE" and "nothing was sent" in err,
          f"{what}: refused, UNAVAILABLE, nothing was sent", out)
    check(s.runs() == before, f"{what}: nothing ran (runs_total and event=run lines unchanged)",
          (before, s.runs()))
    return err


def test_tls_required(bin_dir, check):
    d, certs = certs_dir()
    s = TLSServer(bin_dir, certs, *standard_flags(certs), "--workers", "2")
    try:
        log = s.log_text()
        check(re.search(r"event=ready .* tls=on tls_client_auth=required", log) is not None
              and f"event=listening url={s.tls} tls=on" in log,
              "ready says TLS is on and client certificates are required", log[-1500:])
        serves_the_right_client(s)
        refuses_wrong_clients(s)
        refuses_plain_tcp(s)
        rc, out = s.run(HELLO, *s.client(), url=s.tls)
        check(out.get("stdout") == "hello\n", "after every refusal the right client is served", out)
    finally:
        check(s.stop() == 0, "server exits 0 on SIGTERM")
        shutil.rmtree(d)


def serves_the_right_client(s):
    for url in (s.tls, f"tls+tcp://localhost:{s.tls_port}"):
        rc, out = s.run(HELLO, *s.client(), url=url)
        check(rc == 0 and out.get("stdout") == "hello\n" and out.get("endpoint") == s.tls,
              f"the right client certificate: hello world over {url}", out)
    p = subprocess.run([f"{s.bin_dir}/sandbox-run", "-e", s.tls, *s.client(), "--info"],
                       capture_output=True, text=True, timeout=30)
    info = json.loads(p.stdout) if p.returncode == 0 else {}
    iso = info.get("isolation", {})
    check(iso.get("seccomp") is True and "pid" in iso.get("namespaces", "") and iso.get("backend"),
          "the isolation report over TLS (GetInfo)", p.stdout[-800:] + p.stderr[-400:])
    script = os.path.join(s.tmp, "hello.py")
    with open(script, "w") as f:
        f.write(HELLO)
    p = subprocess.run([f"{s.bin_dir}/sandbox-bench", "-e", s.tls, *s.client(), "--requests", "6",
                        "--concurrency", "3", "--json", script],
                       capture_output=True, text=True, timeout=120)
    summary = json.loads(p.stdout) if p.returncode == 0 else {"raw": p.stdout, "err": p.stderr}
    check(summary.get("status", {}).get("OK") == 6, "sandbox-bench: 6 of 6 OK over TLS", summary)
    # sandbox-mcp (the MCP front over stdio) takes the same flags.
    mcp = mcp_stdio.McpStdio(s.bin_dir, s.tls, *s.client())
    try:
        r = mcp.tool("run_code", {"code": HELLO})
        check(not r.get("isError") and r["structuredContent"]["stdout"] == "hello\n",
              "sandbox-mcp: run_code over TLS with the right client certificate", r)
    finally:
        check(mcp.close() == 0, "sandbox-mcp exits 0")
    mcp = mcp_stdio.McpStdio(s.bin_dir, s.tls, *s.client(None), *CONNECT)
    try:
        r = mcp.tool("run_code", {"code": HELLO})
        check(r.get("isError") and "UNAVAILABLE" in mcp_stdio.texts(r)
              and REFUSED in mcp_stdio.texts(r),
              "sandbox-mcp without a client certificate: a tool error, nothing sent",
              mcp_stdio.texts(r))
    finally:
        mcp.close()


def refuses_wrong_clients(s):
    cases = [
        ("no client certificate", s.client(None)),
        ("a client certificate from another CA", s.client("other_client")),
        ("an expired client certificate", s.client("expired_client")),
        ("a server certificate from a CA the client does not trust",
         s.client("client", "other_ca_crt")),
        ("a wrong server name (--tls-server-name other.test)",
         s.client("client", "ca_crt", "--tls-server-name", "other.test")),
    ]
    for what, flags in cases:
        before = s.runs()
        failed_before = s.log_text().count("event=tls_handshake_failed")
        rc, out = s.run('print("must not run")\n', *flags, *CONNECT, url=s.tls)
        err = refused(s, what, out, rc, before)
        check(REFUSED in err and s.tls in err, f"{what}: the message says the TLS handshake "
              "failed, and where", err)
        check(wait_log_count(s, "event=tls_handshake_failed", failed_before + 1),
              f"{what}: the server logs the failed handshakes", s.log_text()[-600:])
    # The name the client dials is checked: a server whose certificate names
    # only other.test, dialed as localhost and as 127.0.0.1.
    other = TLSServer(s.bin_dir, s.certs, "--tls-cert", s.certs["wrong_name_crt"],
                      "--tls-key", s.certs["wrong_name_key"], "--tls-ca", s.certs["ca_crt"],
                      extra=("--workers", "1"))
    try:
        for host in ("localhost", "127.0.0.1"):
            before = other.runs()
            rc, out = other.run('print("must not run")\n', *other.client(), *CONNECT,
                                url=f"tls+tcp://{host}:{other.tls_port}")
            err = refused(other, f"a server certificate for other.test dialed as {host}", out, rc,
                          before)
            check(REFUSED in err, f"dialed as {host}: a failed TLS handshake", err)
        rc, out = other.run(HELLO, *other.client("client", "ca_crt", "--tls-server-name",
                                                 "other.test"), url=other.tls)
        check(out.get("stdout") == "hello\n",
              "the same server is served when the client expects the name it carries", out)
    finally:
        other.stop()


def wait_log_count(s, needle, count, timeout=5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if s.log_text().count(needle) >= count:
            return True
        time.sleep(0.05)
    return False


def refuses_plain_tcp(s):
    before = s.runs()
    rc, out = s.run('print("must not run")\n', *CONNECT, url=f"tcp://127.0.0.1:{s.tls_port}")
    refused(s, "plain tcp:// to the TLS port", out, rc, before)
    c = sp_connect(s.tls_port, handshake=False)
    try:
        c.sendall(b"\x00SP\x00\x00\x30\x00\x00")  # nng's SP header, not a TLS ClientHello
        check(closed_by_peer(c, 5), "plain SP bytes on the TLS port: the server closes the "
              "connection")
    finally:
        c.close()
    check(s.runs() == before, "and nothing ran", (before, s.runs()))


def test_tls_client_auth_none(bin_dir, check):
    """No --tls-ca: client certificates are not asked for (the default);
    the client still verifies the server."""
    d, certs = certs_dir()
    s = TLSServer(bin_dir, certs, *standard_flags(certs, "none-without-ca"), "--workers", "1")
    try:
        check(re.search(r"event=ready .* tls=on tls_client_auth=none", s.log_text()) is not None,
              "without --tls-ca the default is client auth none, said at ready")
        for what, flags in (("without a client certificate", s.client(None)),
                            ("with a client certificate", s.client()),
                            ("with one from another CA (not asked for, not checked)",
                             s.client("other_client"))):
            rc, out = s.run(HELLO, *flags, url=s.tls)
            check(out.get("stdout") == "hello\n", f"client auth none: served {what}", out)
        before = s.runs()
        rc, out = s.run(HELLO, *s.client(None, "other_ca_crt"), *CONNECT, url=s.tls)
        refused(s, "client auth none: a client that does not trust the server's CA", out, rc,
                before)
    finally:
        s.stop()
        shutil.rmtree(d)


def test_tls_client_auth_optional(bin_dir, check):
    """optional: asked for, served either way; every connection without a
    verified certificate is counted and logged (nng 1.5.2 cannot tell a
    missing certificate from one that did not verify)."""
    d, certs = certs_dir()
    s = TLSServer(bin_dir, certs, *standard_flags(certs, "optional"), "--workers", "1")
    try:
        check("tls_client_auth=optional" in s.log_text()
              and "--tls-client-auth optional: clients without a verified certificate are "
              "served too" in s.log_text(), "ready says optional, with a warning")
        rc, out = s.run(HELLO, *s.client(), url=s.tls)
        check(out.get("stdout") == "hello\n", "optional: served with the right certificate", out)
        time.sleep(1.1)  # the unverified line is written once a second at most
        check("event=tls_client_unverified listener=" not in s.log_text(),
              "optional: a verified client is not logged as unverified")
        rc, out = s.run(HELLO, *s.client(None), url=s.tls)
        check(out.get("stdout") == "hello\n", "optional: served without a certificate", out)
        check(wait_log(s, "event=tls_client_unverified listener=", 5)
              and "unverified_total=1 " in s.log_text(),
              "optional: the connection without a certificate is logged as unverified",
              s.log_text()[-600:])
        time.sleep(1.1)
        rc, out = s.run(HELLO, *s.client("other_client"), url=s.tls)
        check(out.get("stdout") == "hello\n",
              "optional: served with a certificate from another CA (as documented)", out)
        check(wait_log(s, "unverified_total=2 ", 5),
              "optional: and that connection is logged as unverified", s.log_text()[-600:])
    finally:
        s.stop()
        shutil.rmtree(d)


def start(b, tmp, *flags):
    """sandboxd with a tls+tcp:// listener and flags: (exit status, its
    output) when it stops by itself, or (None, its output) once it logged
    event=ready (it is then stopped with SIGTERM)."""
    state = os.path.join(tmp, "state")
    log_path = os.path.join(tmp, "start.log")
    cmd = [f"{b}/sandboxd", "--listen", f"tls+tcp://127.0.0.1:{free_port()}", "--state-dir", state,
           "--uid-base", str(allocate_uids("--workers", "1")), "--workers", "1", *flags]
    with open(log_path, "w") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while p.poll() is None and time.monotonic() < deadline:
        with open(log_path) as f:
            if "event=ready" in f.read():
                break
        time.sleep(0.05)
    rc = p.poll()
    if rc is None:
        p.terminate()
        p.wait(30)
    with open(log_path) as f:
        return rc, f.read()


def test_tls_start_faults(bin_dir, check):
    """Settings that cannot work are refused before anything starts (exit 2);
    files that cannot work fail the start (exit 1) naming the setting and the
    file, and leave nothing behind (no state directory)."""
    d, c = certs_dir()
    tmp = tempfile.mkdtemp(prefix="sbx-tls-start-")
    try:
        settings_errors(bin_dir, tmp, c)
        file_errors(bin_dir, tmp, c)
        rc, log = start(bin_dir, tmp, "--tls-cert", c["server_crt"], "--tls-key",
                        c["server_enc_key"], "--tls-key-password-file", c["key_password_txt"])
        check(rc is None and "key_encrypted=true" in log and "event=ready" in log,
              "an encrypted key with its password file: the server starts", log[-800:])
    finally:
        shutil.rmtree(tmp)
        shutil.rmtree(d)


def settings_errors(b, tmp, c):
    cases = [
        ("tls+tcp:// without --tls-cert and --tls-key", [],
         "a tls+tcp:// listener needs --tls-cert FILE and --tls-key FILE"),
        ("--tls-client-auth required without --tls-ca",
         ["--tls-cert", c["server_crt"], "--tls-key", c["server_key"], "--tls-client-auth",
          "required"], "tls-client-auth required: needs --tls-ca FILE"),
        ("--tls-client-auth sometimes",
         ["--tls-cert", c["server_crt"], "--tls-key", c["server_key"], "--tls-client-auth",
          "sometimes"], "is not one of none, optional, required"),
        ("--tls-cert without --tls-key", ["--tls-cert", c["server_crt"]],
         "a tls+tcp:// listener needs --tls-cert FILE and --tls-key FILE"),
    ]
    for what, flags, want in cases:
        rc, err = start(b, tmp, *flags)
        check(rc == 2 and want in err, f"settings error: {what} (exit 2, says so)", (rc, err))
        check(not os.path.exists(os.path.join(tmp, "state")), f"{what}: nothing made")


def file_errors(b, tmp, c):
    missing = os.path.join(tmp, "nope.crt")
    cases = [
        ("an unreadable certificate", ["--tls-cert", missing, "--tls-key", c["server_key"]],
         f"tls-cert {missing}: No such file or directory"),
        ("a certificate file holding no certificate",
         ["--tls-cert", c["server_key"], "--tls-key", c["server_key"]],
         f"tls-cert {c['server_key']}: not a PEM certificate nng can use"),
        ("a key that is not the certificate's",
         ["--tls-cert", c["server_crt"], "--tls-key", c["mismatch_key"]],
         f"tls-key {c['mismatch_key']} does not belong to the certificate in tls-cert "
         f"{c['server_crt']}"),
        ("an encrypted key without a password",
         ["--tls-cert", c["server_crt"], "--tls-key", c["server_enc_key"]],
         "the key is encrypted; give its password with --tls-key-password-file FILE"),
        ("a wrong password",
         ["--tls-cert", c["server_crt"], "--tls-key", c["server_enc_key"],
          "--tls-key-password-file", c["ca_crt"]],
         f"tls-key {c['server_enc_key']}: the password in {c['ca_crt']} does not decrypt it"),
        ("an expired certificate",
         ["--tls-cert", c["expired_client_crt"], "--tls-key", c["expired_client_key"]],
         "the certificate expired at 2020-01-02T00:00:00Z"),
        ("an unreadable CA bundle",
         ["--tls-cert", c["server_crt"], "--tls-key", c["server_key"], "--tls-ca", missing],
         f"tls-ca {missing}: No such file or directory"),
    ]
    for what, flags, want in cases:
        rc, err = start(b, tmp, *flags)
        check(rc == 1 and want in err, f"start fails: {what} (exit 1, names the file)", (rc, err))
        check(not os.path.exists(os.path.join(tmp, "state")), f"{what}: nothing left behind")


KEY_A, KEY_B = "tls-test-key-of-a", "tls-test-key-of-b"
NO_TENANT_CERT = "the client certificate names no tenant of this server"
NO_CREDENTIAL = ("this server needs an API key (RequestEnvelope.credential, Authorization: "
                 "Bearer) or a client certificate of a tenant")
UNKNOWN_KEY = "the API key belongs to no tenant of this server"


def tenants_file(tmp):
    """Tenant a known by its mesh identity (URI SAN), b by its CN; each has
    a key too."""
    import hashlib
    from lib.tls_certs import SPIFFE_A

    def digest(k):
        return hashlib.sha256(k.encode()).hexdigest()
    path = os.path.join(tmp, "tenants.json")
    with open(path, "w") as f:
        json.dump({"tenants": [
            {"name": "a", "api_keys_sha256": [digest(KEY_A)], "cert_identities": [SPIFFE_A]},
            {"name": "b", "api_keys_sha256": [digest(KEY_B)], "cert_identities": ["CN=b"]}]}, f)
    return path


def as_tenant(s, cert, code, *more):
    """Runs code in session "demo" over TLS with cert (and more flags)."""
    return s.run(code, *s.client(cert), "--session", "demo", *more, url=s.tls)


def unauthenticated(s, what, rc, out, message, before):
    check(rc == 125 and out.get("status") == "UNAUTHENTICATED"
          and message in out.get("error", ""),
          f"{what}: UNAUTHENTICATED, \"{message}\"", out)
    check(s.runs() == before, f"{what}: nothing ran", (before, s.runs()))


def drip_until_closed(c, limit_s):
    """Sends c a byte a second until the server closes it (True) or
    limit_s passed (False)."""
    for _ in range(limit_s):
        try:
            c.sendall(b"\x01")
        except OSError:
            return True
        if closed_by_peer(c, 1):
            return True
    return False


def test_tls_tenants(bin_dir, check):
    """A client certificate names the tenant (docs/SECURITY.md, "TLS"): its
    URI subjectAltName (a SPIFFE id) or CN=<subject CN>, matched against the
    tenants file's cert_identities. Two tenants use the same session id and
    each sees only its own; a certificate of no tenant is UNAUTHENTICATED;
    an expired one gets no connection; a key beside a certificate decides;
    no identity comes from plain tcp://, nor from a certificate that did not
    verify (--tls-client-auth optional serves it, as nobody)."""
    d, certs = certs_dir()
    tmp = tempfile.mkdtemp(prefix="sbx-tls-tenants-")
    tenants = tenants_file(tmp)
    s = TLSServer(bin_dir, certs, *standard_flags(certs), "--tenants", tenants, "--workers", "2")
    # A handshake that drips (a record header, then a byte a second): it
    # ends at its first step past 10 s; everyone else is served meanwhile.
    dripping = sp_connect(s.tls_port, handshake=False)
    try:
        dripping.sendall(b"\x16\x03\x01\x01\x00")
        write = 'open("who.txt", "w").write("{}")\nprint("wrote")\n'
        read = 'import os\nprint(open("who.txt").read() if os.path.exists("who.txt") else "none")\n'
        rc, out = as_tenant(s, "spiffe_a", write.format("a"))
        check(out.get("stdout") == "wrote\n", "tenant a (URI SAN spiffe://...): runs in demo", out)
        rc, out = as_tenant(s, "cn_b", read)
        check(out.get("stdout") == "none\n", "tenant b (CN=b): its demo is not a's", out)
        rc, out = as_tenant(s, "cn_b", write.format("b"))
        check(out.get("stdout") == "wrote\n", "tenant b: writes in its own demo", out)
        for cert, who in (("spiffe_a", "a"), ("cn_b", "b")):
            rc, out = as_tenant(s, cert, read)
            check(out.get("stdout") == f"{who}\n", f"tenant {who} reads its own file", out)
        # A key beside a certificate: the key decides (tenants_authenticate).
        rc, out = as_tenant(s, "spiffe_a", read, "--api-key", KEY_B)
        check(out.get("stdout") == "b\n", "a's certificate with b's key: tenant b", out)
        before = s.runs()
        rc, out = as_tenant(s, "spiffe_a", read, "--api-key", "no-such-key")
        unauthenticated(s, "a's certificate with an unknown key", rc, out, UNKNOWN_KEY, before)
        rc, out = as_tenant(s, "client", read)  # CN=tenant-a: in no tenant
        unauthenticated(s, "a certificate of no tenant", rc, out, NO_TENANT_CERT, before)
        check(wait_log(s, "event=auth_failed reason=unknown_certificate", 5),
              "the server logs the unknown certificate", s.log_text()[-800:])
        rc, out = s.run(read, "--session", "demo")  # plain tcp on loopback, no key
        unauthenticated(s, "plain tcp:// without a key (no certificate there)", rc, out,
                        NO_CREDENTIAL, before)
        failed_before = s.log_text().count("event=tls_handshake_failed")
        rc, out = s.run(read, *s.client("expired_client"), *CONNECT, url=s.tls)
        err = refused(s, "an expired certificate", out, rc, before)
        check(REFUSED in err, "an expired certificate: no connection (TLS handshake)", err)
        check(wait_log_count(s, "event=tls_handshake_failed", failed_before + 1),
              "the expired certificate's handshake is logged", s.log_text()[-600:])
        check(drip_until_closed(dripping, 30), "a dripping handshake is closed by the server")
    finally:
        dripping.close()
        check(s.stop() == 0, "server exits 0 on SIGTERM")
    # optional: a certificate from another CA carrying a's URI is served (as
    # documented) but proves nothing.
    s = TLSServer(bin_dir, certs, *standard_flags(certs, "optional"), "--tenants", tenants,
                  "--workers", "1")
    try:
        rc, out = as_tenant(s, "spiffe_a", 'print("a")\n')
        check(out.get("stdout") == "a\n", "optional: a's verified certificate is tenant a", out)
        before = s.runs()
        rc, out = as_tenant(s, "forged_a", 'print("must not run")\n')
        unauthenticated(s, "optional: a's URI in a certificate from another CA", rc, out,
                        NO_CREDENTIAL, before)
    finally:
        check(s.stop() == 0, "server exits 0 on SIGTERM")
        shutil.rmtree(tmp)
        shutil.rmtree(d)
