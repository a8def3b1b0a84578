"""/mcp over https:// with --tls-client-auth required: the MCP front, like
every front route, serves only a client with a certificate from --tls-ca;
one without (or with another CA's) gets 403 and nothing runs. Raw MCP
requests through Python's ssl (the SDK tests, tests/fronts/mcp/*.mjs, cover
the protocol over plain http://). Needs root; pytest (tests/conftest.py:
bin_dir, check), ctest's fronts_mcp_https."""
import shutil
import tempfile

from lib.harness import Server, free_port
from lib.tls_certs import https_post_json, make_certs

CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "run_code", "arguments": {"code": 'print("hello")\n'}}}


def post(port, certs, body, cert=None, key=None):
    """POST /mcp over TLS: (status, parsed answer or the error)."""
    return https_post_json(port, "/mcp", body, certs["ca_crt"], cert, key,
                           {"Accept": "application/json, text/event-stream"})


def runs(s):
    return s.log_text().count("event=run ")


def test_mcp_https(bin_dir, check):
    d = tempfile.mkdtemp(prefix="sbx-mcp-certs-")
    c = make_certs(d)
    port = free_port()
    s = Server(bin_dir, "--http-listen", f"https://127.0.0.1:{port}", "--http-fronts", "mcp",
               "--tls-cert", c["server_crt"], "--tls-key", c["server_enc_key"],
               "--tls-key-password-file", c["key_password_txt"], "--tls-ca", c["ca_crt"])
    try:
        before = runs(s)
        st, reply = post(port, c, CALL, c["client_crt"], c["client_key"])
        sc = reply.get("result", {}).get("structuredContent", {})
        check(st == 200 and sc.get("stdout") == "hello\n",
              "https: a client with a certificate from --tls-ca calls run_code", (st, reply))
        for what, kw in (("no client certificate", {}),
                         ("a certificate from another CA",
                          dict(cert=c["other_client_crt"], key=c["other_client_key"]))):
            st, reply = post(port, c, CALL, **kw)
            # A certificate shown that does not verify ends the handshake.
            check(st == (403 if not kw else None),
                  f"https: {what}: {'403' if not kw else 'the handshake fails'}, nothing run",
                  (st, reply))
        check(runs(s) == before + 1, "https: only the admitted call ran", (before, runs(s)))
    finally:
        check(s.stop() == 0, "sandboxd exits 0")
        shutil.rmtree(d, ignore_errors=True)
