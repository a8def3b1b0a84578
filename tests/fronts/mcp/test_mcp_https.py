#!/usr/bin/python3
"""/mcp over https:// with --tls-client-auth required: the MCP front, like
every front route, serves only a client with a certificate from --tls-ca;
one without (or with another CA's) gets 403 and nothing runs. Raw MCP
requests through Python's ssl (the SDK tests, tests/fronts/mcp/*.mjs, cover
the protocol over plain http://). Needs root (uid base 61250)."""
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "lib"))
from harness import Server, check, free_port, run_groups  # noqa: E402
from tls_certs import https_post_json, make_certs  # noqa: E402

CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "run_code", "arguments": {"code": 'print("hello")\n'}}}


def post(port, certs, body, cert=None, key=None):
    """POST /mcp over TLS: (status, parsed answer or the error)."""
    return https_post_json(port, "/mcp", body, certs["ca_crt"], cert, key,
                           {"Accept": "application/json, text/event-stream"})


def runs(s):
    return s.log_text().count("event=run ")


def group_mcp_https(b):
    d = tempfile.mkdtemp(prefix="sbx-mcp-certs-")
    c = make_certs(d)
    port = free_port()
    s = Server(b, 61250, "--http-listen", f"https://127.0.0.1:{port}", "--http-fronts", "mcp",
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
            check(st == 403, f"https: {what}: 403, nothing run", (st, reply))
        check(runs(s) == before + 1, "https: only the admitted call ran", (before, runs(s)))
    finally:
        check(s.stop() == 0, "sandboxd exits 0")
        shutil.rmtree(d, ignore_errors=True)


GROUPS = {name[len("group_"):]: fn for name, fn in globals().items() if name.startswith("group_")}

if __name__ == "__main__":
    sys.exit(run_groups(GROUPS, "fronts_"))
