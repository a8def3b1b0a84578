"""TLS: the Python client against sandboxd's own tls+tcp:// listener
(client certificates required), with certificates made by openssl for the
test (tests/lib/tls_certs.py). The right certificate works, in both forms the
client takes it (cert_file/key_file, cert_key_file) and from the async
client; a server certificate from a CA the client does not trust, a
client certificate from another CA or a wrong server name is refused:
Unavailable, nothing ran, and the message says the TLS handshake failed. A fleet of two servers dialed
by different names checks each server against its own name."""
import asyncio
import os
import tempfile

import pytest

import sandboxd
from conftest import runs_of
from lib.harness import free_port
from lib.tls_certs import make_certs


@pytest.fixture(scope="module")
def certs():
    with tempfile.TemporaryDirectory(prefix="sbx-py-tls-") as d:
        yield make_certs(d)


def tls_server(servers, certs, cert="server_crt"):
    """A sandboxd with a tls+tcp:// listener beside its tcp and ipc ones; its
    TLS URL is server.tls."""
    port = free_port()
    s = servers.start("--workers", "1", "--listen", f"tls+tcp://127.0.0.1:{port}",
                      "--tls-cert", certs[cert], "--tls-key", certs["server_key"],
                      "--tls-ca", certs["ca_crt"], "--tls-client-auth", "required")
    s.tls = f"tls+tcp://127.0.0.1:{port}"
    s.tls_port = port
    return s


@pytest.fixture(scope="module")
def server(module_servers, certs):
    return tls_server(module_servers, certs)


def good(certs, **kw):
    return sandboxd.TLS(ca_file=certs["ca_crt"], cert_file=certs["client_crt"],
                        key_file=certs["client_key"], **kw)


def test_the_right_certificate_works(server, certs):
    forms = (good(certs), sandboxd.TLS(ca_file=certs["ca_crt"], cert_key_file=certs["client_pem"]))
    for i, tls in enumerate(forms):
        for j, url in enumerate((server.tls, f"tls+tcp://localhost:{server.tls_port}")):
            with sandboxd.Client(url, tls=tls) as c:
                r = c.run_code("print('over tls')", run_id=f"py-tls-{i}-{j}")
            assert r.stdout == b"over tls\n" and r.endpoint == server.tls, (url, r)
            assert runs_of(server, r.run_id) == 1
    with sandboxd.Client(server.tls, tls=good(certs)) as c:
        info = c.info()
    assert info.isolation.seccomp, info


def test_the_async_client_over_tls(server, certs):
    async def main():
        async with sandboxd.AsyncClient(server.tls, tls=good(certs)) as c:
            return await asyncio.gather(*(c.run_code(f"print({i})") for i in range(4)))
    results = asyncio.run(main())
    assert [r.stdout for r in results] == [f"{i}\n".encode() for i in range(4)]


@pytest.mark.parametrize("what", ["the server's CA is not trusted",
                                  "a client certificate from another CA",
                                  "a wrong server name"])
def test_a_wrong_ca_or_name_is_refused(server, certs, what):
    tls = {
        "the server's CA is not trusted": sandboxd.TLS(
            ca_file=certs["other_ca_crt"], cert_file=certs["client_crt"],
            key_file=certs["client_key"]),
        "a client certificate from another CA": sandboxd.TLS(
            ca_file=certs["ca_crt"], cert_file=certs["other_client_crt"],
            key_file=certs["other_client_key"]),
        "a wrong server name": good(certs, server_name="other.test"),
    }[what]
    runs_before = server.log_text().count("event=run ")
    with sandboxd.Client(server.tls, tls=tls, connect_timeout_s=1.5) as c:
        with pytest.raises(sandboxd.Unavailable) as e:
            c.run_code("print('must not run')")
    assert e.value.nothing_ran, e.value
    assert "TLS handshakes failed" in str(e.value) and "nothing was sent" in str(e.value), e.value
    assert server.log_text().count("event=run ") == runs_before
    with sandboxd.Client(server.tls, tls=good(certs)) as c:  # and it still serves
        assert c.run_code("print('still')").stdout == b"still\n"


def test_each_server_is_checked_against_its_own_name(servers, certs):
    """Two servers, dialed as localhost (its certificate names only
    localhost) and as 127.0.0.1: one TLS configuration per name. (Before,
    the client set the name on each dialer, which nng 1.5.2 writes into the
    one configuration they shared: the last name was checked for both.)"""
    by_name = tls_server(servers, certs, cert="server_localhost_crt")
    by_ip = tls_server(servers, certs)
    urls = [f"tls+tcp://localhost:{by_name.tls_port}", by_ip.tls]
    with sandboxd.Client(urls, tls=good(certs)) as c:
        keys = {by_name.tls, by_ip.tls}  # localhost may also resolve to ::1: not listened on
        assert c.wait_connected(2, timeout_s=10), c.endpoints()
        live = {k for k, up in c.endpoints().items() if up}
        assert keys <= live, c.endpoints()
        seen = {c.run_code("print(1)").endpoint for _ in range(6)}
    assert seen == keys, seen


def test_tls_settings_are_checked_when_the_client_opens(certs, tmp_path):
    with pytest.raises(ValueError, match="cert_file and key_file go together"):
        sandboxd.Client("tls+tcp://127.0.0.1:1", tls=sandboxd.TLS(ca_file=certs["ca_crt"],
                                                                   cert_file=certs["client_crt"]))
    missing = os.path.join(tmp_path, "nope.key")
    with pytest.raises(ValueError, match=f"key_file {missing}"):
        sandboxd.Client("tls+tcp://127.0.0.1:1",
                        tls=sandboxd.TLS(ca_file=certs["ca_crt"], cert_file=certs["client_crt"],
                                         key_file=missing))
