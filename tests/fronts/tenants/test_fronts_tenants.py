"""Tenants on the HTTP fronts (server/fronts/caller.c): with --tenants, every
Piston and MCP request is made in-process under the caller the HTTP request
proves (Authorization: Bearer KEY, a verified client certificate's URI
subjectAltNames and CN, a loopback address), and one without a valid
credential is 401 with WWW-Authenticate before anything is read or run.

- tenants_piston: two tenants through the real npm piston-client (its
  requests carry the key: tests/fronts/piston/client.mjs); no key, a wrong
  key and malformed Authorization headers: 401, the exact {"message"} and
  challenge, nothing run; without --tenants an Authorization header changes
  nothing.
- tenants_mcp: two tenants through the official MCP SDK client with an
  Authorization header (tests/fronts/mcp/tenant_client.mjs) and through
  sandbox-mcp over stdio with SANDBOX_API_KEY: sessions started without an
  id get an unguessable one; the same id ("demo") is each tenant's own; each
  sees only its own session files, and another tenant's id answers as one
  nobody has; no key and a wrong key: 401, exact JSON-RPC error body.
- tenants_https: https:// with client certificates (openssl, tests/lib/
  tls_certs.py): a SAN URI spiffe://mesh.local/ns/a/sa/api is tenant a, CN=b
  is b, through MCP and Piston; a certificate of the CA that names no
  tenant: 401; an expired certificate and another CA's: the TLS handshake
  fails, no request is read, nothing runs.
- tenants_forwarded: nothing an HTTP client writes makes it someone else:
  from a non-loopback address, X-Forwarded-For, Forwarded, X-Real-IP,
  X-Forwarded-Client-Cert and the like do not make it the anonymous
  loopback tenant nor the tenant a certificate would; from loopback the
  anonymous tenant is served.

Needs root (the engine); pytest (tests/conftest.py), ctest fronts_tenants_*.
"""
import hashlib
import http.client
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import tempfile

from lib import tls_certs
from lib.harness import Server, check, free_port
from lib.mcp_stdio import McpStdio, texts
from lib.piston import program

HERE = os.path.dirname(os.path.abspath(__file__))
FRONTS = os.path.dirname(HERE)

KEY_A = "key-a-" + "0123456789abcdef" * 2
KEY_B = "key-b-" + "fedcba9876543210" * 2
SPIFFE_A = "spiffe://mesh.local/ns/a/sa/api"

NO_CREDENTIAL = ("this server needs an API key (RequestEnvelope.credential, Authorization: "
                 "Bearer) or a client certificate of a tenant")
UNKNOWN_KEY = "the API key belongs to no tenant of this server"
UNKNOWN_CERT = "the client certificate names no tenant of this server"
MALFORMED = ('the Authorization header is not "Bearer <API key>" (a key of 1 to 512 printable '
             'ASCII characters)')
CHALLENGE = 'Bearer realm="sandboxd"'
CHALLENGE_TOKEN = 'Bearer realm="sandboxd", error="invalid_token"'
CHALLENGE_REQUEST = 'Bearer realm="sandboxd", error="invalid_request"'
UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def sha256(key):
    return hashlib.sha256(key.encode()).hexdigest()


def tenants_file(d, anonymous=False):
    path = os.path.join(d, "tenants.json")
    with open(path, "w") as f:
        json.dump({"tenants": [
            {"name": "a", "api_keys_sha256": [sha256(KEY_A)], "cert_identities": [SPIFFE_A]},
            {"name": "b", "api_keys_sha256": [sha256(KEY_B)], "cert_identities": ["CN=b"]},
        ]}, f)
    os.chmod(path, 0o644)
    return path


class FrontServer(Server):
    """A sandboxd with the fronts on http(s)://HOST:PORT."""
    tmp_prefix = "sbx-tenants-"

    def __init__(self, bin_dir, fronts, *extra, host="127.0.0.1", scheme="http", **kw):
        self.http_host = host
        self.http_port = free_port()
        super().__init__(bin_dir, "--workers", "2", "--http-listen",
                         f"{scheme}://{host}:{self.http_port}", "--http-fronts", fronts,
                         *extra, **kw)

    def runs(self):
        return self.log_text().count("event=run ")

    def request(self, method, path, body=None, headers=None):
        """(status, lower-cased headers, raw body) over http://."""
        c = http.client.HTTPConnection(self.http_host, self.http_port, timeout=120)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body).encode()
                headers = {"Content-Type": "application/json", **(headers or {})}
            c.putrequest(method, path)
            for k, v in (headers or {}).items():
                c.putheader(k, v)
            if body is not None:
                c.putheader("Content-Length", str(len(body)))
            c.endheaders(body)
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()


def bearer(key):
    return {"Authorization": f"Bearer {key}"}


def mcp_body(name, arguments, rid=1):
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}


MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def jsonrpc_error(message):
    return {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": message}}


def refused_401(what, st, h, raw, body, challenge):
    """A 401 with exactly body (parsed) and the challenge."""
    try:
        got = json.loads(raw)
    except ValueError:
        got = raw
    check(st == 401 and got == body and h.get("www-authenticate") == challenge,
          f"{what}: 401, WWW-Authenticate {challenge}, exact body", (st, h, raw))


# ---- clients ----

def npm_ready(front):
    """node, and tests/fronts/FRONT/node_modules as its lockfile pins it."""
    if not check(shutil.which("node") and shutil.which("npm"), "node and npm are installed"):
        return False
    folder = os.path.join(FRONTS, front)
    p = subprocess.run([os.path.join(FRONTS, "..", "..", "scripts", "npm-ci"), folder],
                       capture_output=True, text=True, timeout=300)
    return check(p.returncode == 0, f"npm ci in {folder}", p.stderr[-2000:])


def tenants_server(bin_dir, fronts):
    """(a FrontServer with tenants a and b, the folder of their file)."""
    d = tempfile.mkdtemp(prefix="sbx-tenants-file-")
    return FrontServer(bin_dir, fronts, "--tenants", tenants_file(d)), d


def piston_client(s, key, calls):
    env = dict(os.environ)
    env.pop("PISTON_API_KEY", None)
    if key:
        env["PISTON_API_KEY"] = key
    p = subprocess.run(["node", os.path.join(FRONTS, "piston", "client.mjs"),
                        f"http://127.0.0.1:{s.http_port}", json.dumps(calls)],
                       capture_output=True, text=True, timeout=300, env=env)
    try:
        return json.loads(p.stdout)
    except ValueError:
        return [{"raw": p.stdout[-2000:], "stderr": p.stderr[-2000:]}] * len(calls)


def sdk_client(s, key, calls):
    p = subprocess.run(["node", os.path.join(FRONTS, "mcp", "tenant_client.mjs"),
                        f"http://127.0.0.1:{s.http_port}/mcp", key, json.dumps(calls)],
                       capture_output=True, text=True, timeout=600)
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {"error": "no JSON", "raw": p.stdout[-2000:], "stderr": p.stderr[-2000:]}


def stdio_client(s, key):
    """sandbox-mcp over stdio on the server's nng endpoint, its key from
    SANDBOX_API_KEY (None: none)."""
    saved = os.environ.pop("SANDBOX_API_KEY", None)
    try:
        if key is not None:
            os.environ["SANDBOX_API_KEY"] = key
        return McpStdio(s.bin_dir, s.tcp)
    finally:
        os.environ.pop("SANDBOX_API_KEY", None)
        if saved is not None:
            os.environ["SANDBOX_API_KEY"] = saved


def structured(result):
    return result.get("structuredContent") or {}


# ---- Piston ----

def test_tenants_piston(bin_dir):
    if not npm_ready("piston"):
        return
    s, d = tenants_server(bin_dir, "piston")
    try:
        for key in (KEY_A, KEY_B):
            runtimes, hello = piston_client(s, key, [
                {"op": "runtimes"},
                {"op": "execute", "language": "python", "code": "print('hi', 6 * 7)"}])
            check(isinstance(runtimes, list) and runtimes[0].get("language") == "python",
                  f"piston-client with key {key[:5]}: runtimes()", runtimes)
            check(hello.get("run", {}).get("stdout") == "hi 42\n",
                  f"piston-client with key {key[:5]}: execute() runs", hello)
        before = s.runs()
        runtimes, = piston_client(s, None, [{"op": "runtimes"}])
        check(runtimes == {"message": NO_CREDENTIAL},
              "piston-client without a key: runtimes() reads the 401's message", runtimes)
        body = program("print(1)\n")
        for what, headers, message, challenge in (
                ("no key", {}, NO_CREDENTIAL, CHALLENGE),
                ("a wrong key", bearer("key-c-" + "9" * 32), UNKNOWN_KEY, CHALLENGE_TOKEN),
                ("Basic credentials", {"Authorization": "Basic YTpi"}, MALFORMED,
                 CHALLENGE_REQUEST),
                ("Bearer without a token", {"Authorization": "Bearer"}, MALFORMED,
                 CHALLENGE_REQUEST),
                ("a token over 512 bytes", bearer("k" * 513), MALFORMED, CHALLENGE_REQUEST),
                ("a token with a byte outside printable ASCII",
                 {"Authorization": b"Bearer key-\xe9"}, MALFORMED, CHALLENGE_REQUEST),
                ("a valid key, then a second token", {"Authorization": f"Bearer {KEY_A} x"},
                 MALFORMED, CHALLENGE_REQUEST)):
            for method, path, b in (("POST", "/api/v2/execute", body),
                                    ("GET", "/api/v2/runtimes", None)):
                st, h, raw = s.request(method, path, b, headers)
                refused_401(f"piston {method} {path}, {what}", st, h, raw,
                            {"message": message}, challenge)
        check(s.runs() == before, "nothing ran for a refused request", (before, s.runs()))
        # 512 bytes is the longest key: read, and refused as unknown.
        st, h, raw = s.request("POST", "/api/v2/execute", body, bearer("k" * 512))
        refused_401("piston, an unknown key of 512 bytes", st, h, raw, {"message": UNKNOWN_KEY},
                    CHALLENGE_TOKEN)
        st, h, raw = s.request("POST", "/api/v2/execute", body, {"Authorization": f"bEaReR {KEY_B}"})
        check(st == 200 and json.loads(raw)["run"]["stdout"] == "1\n",
              "the scheme is case-insensitive (RFC 9110)", (st, raw))
        log = s.log_text()
        check("event=auth_failed" in log and "reason=malformed_authorization" in log
              and "reason=unknown_key" in log and "reason=no_credential" in log,
              "refusals are logged as event=auth_failed with their reason", log[-3000:])
        check(KEY_A not in log and KEY_B not in log, "no key is logged")
    finally:
        check(s.stop() == 0, "sandboxd exits 0")
    # Without --tenants nothing changes: a header nobody checks is ignored.
    s = FrontServer(bin_dir, "piston")
    try:
        for headers in ({}, bearer("anything"), {"Authorization": "Basic YTpi"}):
            st, h, raw = s.request("POST", "/api/v2/execute", program("print(2)\n"), headers)
            check(st == 200 and json.loads(raw)["run"]["stdout"] == "2\n"
                  and "www-authenticate" not in h,
                  f"without --tenants, Authorization {headers} changes nothing", (st, raw))
    finally:
        check(s.stop() == 0, "sandboxd exits 0")
        shutil.rmtree(d, ignore_errors=True)


# ---- MCP ----

WRITE = "open('owner.txt', 'w').write('{}')\nprint(open('owner.txt').read())"


def test_tenants_mcp(bin_dir):
    if not npm_ready("mcp"):
        return
    s, d = tenants_server(bin_dir, "mcp")
    try:
        mcp_sessions(s)
        mcp_refusals(s)
        mcp_stdio(s)
    finally:
        check(s.stop() == 0, "sandboxd exits 0")
        shutil.rmtree(d, ignore_errors=True)


def mcp_sessions(s):
    """Each tenant's sessions through the SDK client: made ids, the same
    chosen id, files seen only by their owner."""
    sids = {}
    for name, key in (("a", KEY_A), ("b", KEY_B)):
        out = sdk_client(s, key, [
            {"name": "run_code", "arguments": {"code": WRITE.format(name), "session_mode": "files"}},
            {"name": "run_code", "arguments": {"code": WRITE.format(name), "session_id": "demo"}},
            {"name": "run_code", "arguments": {"code": "print(open('owner.txt').read())",
                                               "session_id": "demo"}},
        ])
        res = out.get("results", [])
        if not check(len(res) == 3, f"SDK client, tenant {name}: three calls", out):
            return
        made = structured(res[0])
        sids[name] = made.get("session_id", "")
        check(UUID4.match(sids[name]) and made.get("session_created") is True
              and made.get("stdout") == f"{name}\n",
              f"tenant {name}: session_mode without session_id starts a session with a made "
              "uuid4 id, returned", res[0])
        check(structured(res[1]).get("session_created") is True,
              f"tenant {name}: \"demo\" is a new session of its own", res[1])
        check(structured(res[2]).get("stdout") == f"{name}\n",
              f"tenant {name}: its \"demo\" holds its own file", res[2])
    check(sids.get("a") != sids.get("b"), "the made ids differ", sids)
    nobody = "00000000-0000-4000-8000-000000000000"
    for name, key, other in (("a", KEY_A, "b"), ("b", KEY_B, "a")):
        out = sdk_client(s, key, [
            {"name": "list_session_files", "arguments": {"session_id": sids[name]}},
            {"name": "preview_file", "arguments": {"session_id": "demo", "path": "owner.txt"}},
            {"name": "list_session_files", "arguments": {"session_id": sids[other]}},
            {"name": "list_session_files", "arguments": {"session_id": nobody}},
            {"name": "preview_file", "arguments": {"session_id": sids[other],
                                                   "path": "owner.txt"}},
            {"name": "preview_file", "arguments": {"session_id": nobody, "path": "owner.txt"}},
            {"name": "close_session", "arguments": {"session_id": sids[other]}},
            {"name": "close_session", "arguments": {"session_id": nobody}},
        ])
        res = out.get("results", [])
        if not check(len(res) == 8, f"SDK client, tenant {name}: eight calls", out):
            return
        own, demo, theirs, unknown, ptheirs, punknown, ctheirs, cunknown = res
        check(not own.get("isError") and '"owner.txt"' in texts(own),
              f"tenant {name} lists its own session's files", own)
        check(f"bytes 0 to 1 follow" in texts(demo) and texts(demo).endswith(name),
              f"tenant {name} reads its own \"demo\"", demo)
        for what, a, b in (("list_session_files", theirs, unknown),
                           ("preview_file", ptheirs, punknown),
                           ("close_session", ctheirs, cunknown)):
            check(a.get("isError") is True and "NOT_FOUND" in texts(a)
                  and texts(a).replace(sids[other], "ID") == texts(b).replace(nobody, "ID"),
                  f"tenant {name}: {what} of {other}'s session answers as an id nobody has",
                  (a, b))
    mcp_resources(s, sids, nobody)
    # The owner's session survived the other's close_session.
    out = sdk_client(s, KEY_A, [{"name": "run_code", "arguments": {
        "code": "print(open('owner.txt').read())", "session_id": sids["a"]}}])
    check(structured((out.get("results") or [{}])[0]).get("stdout") == "a\n",
          "a's session is still there after b's close_session of its id", out)
    s.sids = sids


def mcp_resources(s, sids, nobody):
    """resources/list and resources/read on the one /mcp server both tenants
    used: each lists its own sessions' files only, and another's file URI
    answers -32002 as one of a session nobody has."""
    def uri(sid):
        return f"sandbox://sessions/{sid}/owner.txt"
    for name, key, other in (("a", KEY_A, "b"), ("b", KEY_B, "a")):
        out = sdk_client(s, key, [{"list": True}, {"read": uri(sids[name])},
                                  {"read": uri(sids[other])}, {"read": uri(nobody)}])
        res = out.get("results", [])
        if not check(len(res) == 4, f"SDK client, tenant {name}: resources, four calls", out):
            return
        listed = [r.get("uri") for r in res[0].get("resources", [])]
        check(uri(sids[name]) in listed and uri("demo") in listed
              and not any(sids[other] in u for u in listed),
              f"tenant {name}: resources/list has its own sessions' files, none of {other}'s",
              listed)
        contents = res[1].get("contents") or [{}]
        check(contents[0].get("text") == name and contents[0].get("mimeType") == "text/plain",
              f"tenant {name}: resources/read of its own file", res[1])
        theirs, unknown = res[2].get("error") or {}, res[3].get("error") or {}
        check(theirs.get("code") == -32002 and (theirs.get("data") or {}).get("uri") == uri(
            sids[other]) and theirs.get("message") == unknown.get("message") and (
            theirs["data"].get("reason", "").replace(sids[other], "ID")
            == (unknown.get("data") or {}).get("reason", "").replace(nobody, "ID")),
              f"tenant {name}: resources/read of {other}'s file is -32002 like a session "
              "nobody has", (theirs, unknown))


def mcp_refusals(s):
    before = s.runs()
    for key, message, challenge in (("", NO_CREDENTIAL, CHALLENGE),
                                    ("key-c-" + "1" * 32, UNKNOWN_KEY, CHALLENGE_TOKEN)):
        out = sdk_client(s, key, [{"name": "run_code", "arguments": {"code": "print(1)"}}])
        check("results" not in out or not out["results"], "SDK client: connect fails", out)
        check(out.get("code") == 401 or "401" in out.get("error", ""),
              f"SDK client with key {key!r}: the transport's error is HTTP 401", out)
        for body in ({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                      "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                 "clientInfo": {"name": "raw", "version": "1"}}},
                     {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                     mcp_body("run_code", {"code": "print(1)"})):
            st, h, raw = s.request("POST", "/mcp", body,
                                   {**MCP_HEADERS, **(bearer(key) if key else {})})
            refused_401(f"/mcp {body['method']} with key {key!r}", st, h, raw,
                        jsonrpc_error(message), challenge)
    st, h, raw = s.request("POST", "/mcp", mcp_body("run_code", {"code": "print(1)"}),
                           {**MCP_HEADERS, "Authorization": "Token abc"})
    refused_401("/mcp with a malformed Authorization", st, h, raw, jsonrpc_error(MALFORMED),
                CHALLENGE_REQUEST)
    check(s.runs() == before, "nothing ran for a refused /mcp request", (before, s.runs()))


def mcp_stdio(s):
    """sandbox-mcp over stdio with SANDBOX_API_KEY: the same tenants, the same
    rules, on the nng RPC."""
    sids = getattr(s, "sids", None)
    if not check(sids, "the SDK part made sessions"):
        return
    a = stdio_client(s, KEY_A)
    b = stdio_client(s, KEY_B)
    none = stdio_client(s, None)
    try:
        r = a.tool("list_session_files", {"session_id": sids["a"]})
        check(not r.get("isError") and '"owner.txt"' in texts(r),
              "sandbox-mcp with a's SANDBOX_API_KEY lists a's session (made over HTTP)", r)
        r = a.tool("preview_file", {"session_id": "demo", "path": "owner.txt"})
        check(texts(r).endswith("a"), "sandbox-mcp as a reads a's \"demo\"", r)
        r = b.tool("list_session_files", {"session_id": sids["a"]})
        check(r.get("isError") is True and "NOT_FOUND" in texts(r),
              "sandbox-mcp as b: a's session is not found", r)
        r = b.tool("run_code", {"code": "print(1)", "session_mode": "interpreter"})
        sc = structured(r)
        check(UUID4.match(sc.get("session_id", "")) and sc.get("session_mode") == "interpreter",
              "sandbox-mcp: an interpreter session without an id gets a made one", r)
        r = none.tool("run_code", {"code": "print(1)"})
        check(r.get("isError") is True and f"UNAUTHENTICATED: {NO_CREDENTIAL}" in texts(r),
              "sandbox-mcp without a key: UNAUTHENTICATED, the server's message", r)
        p = subprocess.run([f"{s.bin_dir}/sandbox-mcp", "-e", s.tcp, "--api-key", "k\x01"],
                           capture_output=True, text=True, timeout=30, input="")
        check(p.returncode != 0 and "api-key" in p.stderr,
              "sandbox-mcp refuses a key with a control character", (p.returncode, p.stderr))
    finally:
        for c in (a, b, none):
            c.close()


# ---- https:// and client certificates ----

def make_certs(d):
    c = tls_certs.make_certs(d)
    client_ext = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth"
    tls_certs._leaf(d, "spiffe_a", "ca", "workload-a",
                    client_ext + f"\nsubjectAltName=URI:{SPIFFE_A}")
    tls_certs._leaf(d, "cn_b", "ca", "b", client_ext)
    for n in ("spiffe_a", "cn_b"):
        for ext in ("crt", "key"):
            os.chmod(os.path.join(d, f"{n}.{ext}"), 0o644)
            c[f"{n}_{ext}"] = os.path.join(d, f"{n}.{ext}")
    return c


def https(s, c, method, path, body, cert=None, key=None, headers=None):
    """(status, headers, raw) or (None, {}, error) when the connection or
    the handshake failed."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(c["ca_crt"])
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    conn = http.client.HTTPSConnection("127.0.0.1", s.http_port, context=ctx, timeout=120)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data,
                     headers={"Content-Type": "application/json", **MCP_HEADERS,
                              **(headers or {})})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    except (OSError, http.client.HTTPException, ssl.SSLError) as e:
        return None, {}, repr(e)
    finally:
        conn.close()


def test_tenants_https(bin_dir):
    d = tempfile.mkdtemp(prefix="sbx-tenants-certs-")
    c = make_certs(d)
    s = FrontServer(bin_dir, "piston,mcp", "--tenants", tenants_file(d), "--tls-cert",
                    c["server_crt"], "--tls-key", c["server_key"], "--tls-ca", c["ca_crt"],
                    "--tls-client-auth", "optional", scheme="https")
    try:
        a = (c["spiffe_a_crt"], c["spiffe_a_key"])
        b = (c["cn_b_crt"], c["cn_b_key"])
        made = {}
        for name, cert in (("a", a), ("b", b)):
            st, h, raw = https(s, c, "POST", "/mcp", mcp_body("run_code", {
                "code": WRITE.format(name), "session_mode": "files"}), *cert)
            sc = json.loads(raw).get("result", {}).get("structuredContent", {}) if st == 200 else {}
            made[name] = sc.get("session_id", "")
            check(st == 200 and sc.get("stdout") == f"{name}\n" and UUID4.match(made[name]),
                  f"https: the certificate of {name} ({'SAN URI' if name == 'a' else 'CN=b'}) "
                  "runs as tenant " + name, (st, raw))
            st, h, raw = https(s, c, "POST", "/api/v2/execute", program("print(3)\n"), *cert)
            check(st == 200 and json.loads(raw)["run"]["stdout"] == "3\n",
                  f"https: Piston with the certificate of {name}", (st, raw))
        for name, cert, other in (("a", a, "b"), ("b", b, "a")):
            st, h, raw = https(s, c, "POST", "/mcp", mcp_body(
                "list_session_files", {"session_id": made[name]}), *cert)
            r = json.loads(raw).get("result", {}) if st == 200 else {}
            check(not r.get("isError") and '"owner.txt"' in texts(r),
                  f"https: {name} sees its session's files", (st, raw))
            st, h, raw = https(s, c, "POST", "/mcp", mcp_body(
                "list_session_files", {"session_id": made[other]}), *cert)
            r = json.loads(raw).get("result", {}) if st == 200 else {}
            check(r.get("isError") is True and "NOT_FOUND" in texts(r),
                  f"https: {name} does not see {other}'s session", (st, raw))
        # A key decides alone: b's key with a's certificate is b.
        st, h, raw = https(s, c, "POST", "/mcp", mcp_body(
            "list_session_files", {"session_id": made["b"]}), *a, headers=bearer(KEY_B))
        r = json.loads(raw).get("result", {}) if st == 200 else {}
        check(not r.get("isError"), "https: a key wins over the certificate", (st, raw))
        before = s.runs()
        st, h, raw = https(s, c, "POST", "/mcp", mcp_body("run_code", {"code": "print(1)"}),
                           c["client_crt"], c["client_key"])
        refused_401("https: a certificate of the CA naming no tenant (CN=tenant-a)", st, h, raw,
                    jsonrpc_error(UNKNOWN_CERT), CHALLENGE_TOKEN)
        st, h, raw = https(s, c, "POST", "/api/v2/execute", program("print(1)\n"))
        refused_401("https: no certificate, no key", st, h, raw, {"message": NO_CREDENTIAL},
                    CHALLENGE)
        for what, cert in (("an expired certificate", "expired_client"),
                           ("another CA's certificate", "other_client")):
            for path, body in (("/mcp", mcp_body("run_code", {"code": "print(1)"})),
                               ("/api/v2/execute", program("print(1)\n"))):
                st, h, raw = https(s, c, "POST", path, body, c[f"{cert}_crt"], c[f"{cert}_key"],
                                   headers=bearer(KEY_A))
                check(st is None, f"https {path}: {what} fails the TLS handshake (even with a "
                      "good key): no request is read", (st, raw))
        check(s.runs() == before, "nothing ran for a refused connection", (before, s.runs()))
    finally:
        check(s.stop() == 0, "sandboxd exits 0")
        shutil.rmtree(d, ignore_errors=True)


# ---- nothing a client writes makes it someone else ----

FORWARDED = {
    "X-Forwarded-For": "127.0.0.1",
    "X-Real-IP": "127.0.0.1",
    "Forwarded": "for=127.0.0.1;proto=https",
    "X-Forwarded-Proto": "https",
    "X-Forwarded-Host": "localhost",
    "X-Forwarded-Client-Cert": f"By=spiffe://mesh.local/ns/x;URI={SPIFFE_A}",
    "X-Client-Cert": "CN=b",
    "X-SSL-Client-S-DN": "CN=b",
    "X-Sandbox-Tenant": "a",
    "X-Front-Caller": "loopback",
}


def non_loopback_address():
    """An address of this machine that is not loopback, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        try:
            u.connect(("192.0.2.1", 9))  # no packet is sent: picks the route's source
            addr = u.getsockname()[0]
        except OSError:
            return None
    return None if addr.startswith("127.") else addr


def test_tenants_forwarded(bin_dir):
    addr = non_loopback_address()
    if not check(addr is not None, "this machine has a non-loopback IPv4 address"):
        return
    d = tempfile.mkdtemp(prefix="sbx-tenants-file-")
    path = tenants_file(d)
    remote = FrontServer(bin_dir, "piston,mcp", "--tenants", path, "--anonymous-tenant", "a",
                         host=addr)
    try:
        before = remote.runs()
        st, h, raw = remote.request("POST", "/api/v2/execute", program("print(1)\n"), FORWARDED)
        refused_401(f"from {addr} with every forwarding header: Piston", st, h, raw,
                    {"message": NO_CREDENTIAL}, CHALLENGE)
        st, h, raw = remote.request("POST", "/mcp", mcp_body("run_code", {"code": "print(1)"}),
                                    {**MCP_HEADERS, **FORWARDED})
        refused_401(f"from {addr} with every forwarding header: MCP", st, h, raw,
                    jsonrpc_error(NO_CREDENTIAL), CHALLENGE)
        check(remote.runs() == before, "nothing ran", (before, remote.runs()))
        st, h, raw = remote.request("POST", "/api/v2/execute", program("print(5)\n"),
                                    {**FORWARDED, **bearer(KEY_B)})
        check(st == 200 and json.loads(raw)["run"]["stdout"] == "5\n",
              f"from {addr} a key is served", (st, raw))
    finally:
        check(remote.stop() == 0, "sandboxd exits 0")
    local = FrontServer(bin_dir, "piston", "--tenants", path, "--anonymous-tenant", "a")
    try:
        st, h, raw = local.request("POST", "/api/v2/execute", program("print(4)\n"))
        check(st == 200 and json.loads(raw)["run"]["stdout"] == "4\n",
              "from loopback without a key: the anonymous tenant", (st, raw))
    finally:
        check(local.stop() == 0, "sandboxd exits 0")
        shutil.rmtree(d, ignore_errors=True)
