"""API keys in the Python client against real servers with --tenants
(docs/CLIENTS.md, "API keys"): a key works; no key and a wrong key are
Unauthenticated with the server's exact message, nothing ran, and are not
retried (the server logs event=auth_failed once per attempt); two clients
with different keys and the same session id each see their own files, on one
server and in a fleet (each client's session pins are its own);
$SANDBOX_API_KEY is picked up; a bad key is refused in this process and
never shown."""
import asyncio
import hashlib
import json
import os
import pickle

import pytest

import sandboxd
from sandboxd import _credential
from sandboxd._endpoint import session_score
from conftest import runs_of

KEY_A = "sbx-alpha-0123456789abcdef"
KEY_B = "sbx-beta-fedcba9876543210"
NO_KEY = ("this server needs an API key (RequestEnvelope.credential, Authorization: Bearer) "
          "or a client certificate of a tenant")
WRONG_KEY = "the API key belongs to no tenant of this server"
RAN = "; nothing ran"  # what the server adds to a refused RunCode's or StartRun's message
WRITE = "open('{name}', 'w').write('{text}')\nprint('wrote')\n"


def tenants_flags(tmp_path):
    path = tmp_path / "tenants.json"
    path.write_text(json.dumps({"tenants": [
        {"name": "alpha", "api_keys_sha256": [hashlib.sha256(KEY_A.encode()).hexdigest()]},
        {"name": "beta", "api_keys_sha256": [hashlib.sha256(KEY_B.encode()).hexdigest()]},
    ]}))
    return ("--tenants", str(path))


def auth_failures(server, reason):
    return server.log_text().count(f"event=auth_failed reason={reason} ")


@pytest.fixture(autouse=True)
def no_key_in_the_environment(monkeypatch):
    monkeypatch.delenv("SANDBOX_API_KEY", raising=False)


def test_a_key_works_and_no_key_or_a_wrong_key_is_unauthenticated(servers, tmp_path):
    s = servers.start("--workers", "1", *tenants_flags(tmp_path))
    with sandboxd.Client(s.tcp, api_key=KEY_A) as c:
        r = c.run_code("print('hello')", run_id="tenant-ok")
        assert r.stdout == b"hello\n" and r.attempts == 1
        assert c.info().workers == 1
    assert runs_of(s, "tenant-ok") == 1
    for key, message, reason in ((None, NO_KEY, "no_credential"),
                                 ("", NO_KEY, "no_credential"),
                                 ("sbx-not-a-tenant-key", WRONG_KEY, "unknown_key")):
        before = auth_failures(s, reason)
        # retries=3: UNAUTHENTICATED must not be retried even so.
        with sandboxd.Client(s.tcp, api_key=key, retries=3) as c:
            for call, suffix in (
                    (lambda: c.run_code("print(1)", run_id=f"tenant-refused-{reason}"), RAN),
                    (c.info, ""), (lambda: c.list_files("demo"), "")):
                with pytest.raises(sandboxd.Unauthenticated) as ei:
                    call()
                e = ei.value
                assert e.message == message + suffix, (key, e.message)
                assert e.code == 16 and e.code_name == "UNAUTHENTICATED"
                assert e.from_server and e.nothing_ran and e.attempts == 1
                assert isinstance(e, sandboxd.SandboxError) and e.endpoint == s.tcp
            assert c.health().status == "SERVING"  # Health needs no key
        assert auth_failures(s, reason) - before == 3, (key, s.log_text()[-2000:])
    assert runs_of(s, "tenant-refused-no_credential") == 0
    assert runs_of(s, "tenant-refused-unknown_key") == 0


def test_unauthenticated_is_not_retried_async(servers, tmp_path):
    s = servers.start("--workers", "1", *tenants_flags(tmp_path))

    async def main():
        async with sandboxd.AsyncClient(s.tcp, api_key="sbx-wrong", retries=5) as c:
            with pytest.raises(sandboxd.Unauthenticated) as ei:
                await c.run_code("print(1)")
            return ei.value

    e = asyncio.run(main())
    assert e.message == WRONG_KEY + RAN and e.attempts == 1 and e.nothing_ran
    assert auth_failures(s, "unknown_key") == 1
    assert s.log_text().count("event=run ") == 0


def test_two_tenants_with_one_session_id_see_their_own_files(servers, tmp_path):
    s = servers.start("--workers", "1", *tenants_flags(tmp_path))
    with sandboxd.Client(s.tcp, api_key=KEY_A) as a, sandboxd.Client(s.tcp, api_key=KEY_B) as b:
        ra = a.run_code(WRITE.format(name="a.txt", text="from alpha"), session_id="demo")
        rb = b.run_code(WRITE.format(name="b.txt", text="from beta"), session_id="demo")
        assert ra.session_created and rb.session_created, (ra, rb)
        names_a = {e.name for e in a.list_files("demo").entries}
        names_b = {e.name for e in b.list_files("demo").entries}
        assert "a.txt" in names_a and "b.txt" not in names_a, names_a
        assert "b.txt" in names_b and "a.txt" not in names_b, names_b
        assert a.read_file("demo", "a.txt").content == b"from alpha"
        assert b.read_file("demo", "b.txt").content == b"from beta"
        with pytest.raises(sandboxd.NotFound):
            a.read_file("demo", "b.txt")
        # Closing A's demo leaves B's; then A's is gone, B's is there.
        a.close_session("demo")
        with pytest.raises(sandboxd.NotFound):
            a.list_files("demo")
        assert b.read_file("demo", "b.txt").content == b"from beta"
        r = b.run_code("import os\nprint(sorted(os.listdir('.')))", session_id="demo")
        assert not r.session_created and "b.txt" in r.stdout_text
        assert "a.txt" not in r.stdout_text


def _home(session_id, keys):
    return min(keys, key=lambda k: (-session_score(session_id, k), k))


def test_fleet_pins_are_each_clients_own(servers, tmp_path):
    """A sees two servers, B three. The session id is one whose home among
    A's two differs from its home among B's three: B must go to its own
    home, not follow A's pin (a pin cache shared by the clients of a
    process would send B's session where A's lives)."""
    flags = tenants_flags(tmp_path)
    fleet = [servers.start("--workers", "1", *flags) for _ in range(3)]
    urls = [s.tcp for s in fleet]
    session = next(f"nb-{i}" for i in range(10_000)
                   if _home(f"nb-{i}", urls[:2]) != _home(f"nb-{i}", urls))
    home_a, home_b = _home(session, urls[:2]), _home(session, urls)
    with sandboxd.Client(urls[:2], api_key=KEY_A) as a, \
            sandboxd.Client(urls, api_key=KEY_B) as b:
        assert a.wait_connected(2) and b.wait_connected(3)
        ra = a.run_code(WRITE.format(name="a.txt", text="alpha"), session_id=session)
        assert ra.endpoint == home_a and ra.session_created
        rb = b.run_code(WRITE.format(name="b.txt", text="beta"), session_id=session)
        assert rb.endpoint == home_b and rb.session_created, (rb.endpoint, home_a, home_b)
        for _ in range(3):  # every later call of each goes to its own home
            assert a.run_code("print(1)", session_id=session).endpoint == home_a
            assert b.run_code("print(1)", session_id=session).endpoint == home_b
        assert {e.name for e in a.list_files(session).entries} >= {"a.txt"}
        assert "a.txt" not in {e.name for e in b.list_files(session).entries}
        assert a._core.fleet._sessions is not b._core.fleet._sessions


def test_the_environment_variable_is_picked_up(servers, tmp_path, monkeypatch):
    s = servers.start("--workers", "1", *tenants_flags(tmp_path))
    monkeypatch.setenv("SANDBOX_API_KEY", KEY_B)
    with sandboxd.Client(s.tcp) as b:
        b.run_code(WRITE.format(name="b.txt", text="env"), session_id="env")
    with sandboxd.Client(s.tcp, api_key=KEY_B) as b:  # the same tenant
        assert b.read_file("env", "b.txt").content == b"env"
    with sandboxd.Client(s.tcp, api_key=KEY_A) as a:  # api_key= wins over the variable
        with pytest.raises(sandboxd.NotFound):
            a.read_file("env", "b.txt")
    with sandboxd.Client(s.tcp, api_key="") as c:  # "" sends none, whatever the variable says
        with pytest.raises(sandboxd.Unauthenticated, match="needs an API key"):
            c.info()
    monkeypatch.setenv("SANDBOX_API_KEY", "")
    with sandboxd.Client(s.tcp) as c:
        with pytest.raises(sandboxd.Unauthenticated, match="needs an API key"):
            c.info()


BAD_KEYS = [
    ("a" * 513, "this one has 513 characters"),
    ("has space", "character 4 of 9 is a space"),
    ("trailing-newline\n", "character 17 of 17 is a space"),
    ("tab\there", "character 4 of 8"),
    ("del\x7f", "character 4 of 4"),
    ("nul\x00", "character 4 of 4"),
    ("caf\u00e9", "character 4 of 4"),
]


@pytest.mark.parametrize("key,where", BAD_KEYS)
def test_a_bad_key_is_refused_here_and_never_shown(key, where, monkeypatch):
    rule = "at most 512 bytes of printable ASCII without spaces"
    for cls in (sandboxd.Client, sandboxd.AsyncClient):
        with pytest.raises(ValueError) as ei:
            cls("tcp://127.0.0.1:9", api_key=key)
        msg = str(ei.value)
        assert msg.startswith("api_key: ") and rule in msg and where in msg, msg
        assert key not in msg and key.strip() not in msg
    if "\x00" in key:
        return  # no environment variable holds a NUL
    monkeypatch.setenv("SANDBOX_API_KEY", key)
    with pytest.raises(ValueError) as ei:
        sandboxd.Client("tcp://127.0.0.1:9")
    assert str(ei.value).startswith("$SANDBOX_API_KEY: ") and key not in str(ei.value)


def test_the_largest_key_is_taken_and_no_repr_shows_a_key(monkeypatch):
    largest = "k" * 512
    with sandboxd.Client("tcp://127.0.0.1:9", api_key=largest, connect_timeout_s=0.1) as c:
        for text in (repr(c), str(c)):
            assert "api_key=set" in text and largest not in text and "kkkk" not in text
        assert largest not in repr(c._core.credential) and largest not in repr(vars(c))
        with pytest.raises(TypeError):
            pickle.dumps(c._core.credential)
        with pytest.raises(sandboxd.Unavailable) as ei:  # nothing listens on port 9
            c.info()
        assert largest not in str(ei.value) and largest not in repr(ei.value)
    with sandboxd.Client("tcp://127.0.0.1:9", api_key="") as c:
        assert "api_key=none" in repr(c)
    with pytest.raises(TypeError, match="api_key: a str or None, not bytes"):
        sandboxd.Client("tcp://127.0.0.1:9", api_key=b"key")
    tls = sandboxd.TLS(ca_file="/ca.pem", key_password="hunter2")
    assert "hunter2" not in repr(tls)
    assert _credential.API_KEY_MAX == 512
