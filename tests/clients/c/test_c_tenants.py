"""The C client's API key through its tools (docs/CLIENTS.md, "API keys"),
against one real sandboxd with --tenants: sandbox-run and sandbox-bench take
--api-key or $SANDBOX_API_KEY; no key and a wrong key are UNAUTHENTICATED
with the server's exact message and are not retried (--retries 3: one
event=auth_failed per call); a bad key is refused before anything is sent
and never echoed; two tenants' sessions of one id are their own."""
import hashlib
import json
import os
import subprocess

import pytest

from conftest import BIN_DIR, bench_cmd, records, sandbox_run
from lib.harness import Server

KEY_A = "sbx-c-alpha-0123456789"
KEY_B = "sbx-c-beta-9876543210"
NO_KEY = ("this server needs an API key (RequestEnvelope.credential, Authorization: Bearer) "
          "or a client certificate of a tenant; nothing ran")
WRONG_KEY = "the API key belongs to no tenant of this server; nothing ran"
LOCAL = "--api-key/SANDBOX_API_KEY: at most 512 bytes of printable ASCII without spaces"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = tmp_path_factory.mktemp("tenants") / "tenants.json"
    path.write_text(json.dumps({"tenants": [
        {"name": "alpha", "api_keys_sha256": [hashlib.sha256(KEY_A.encode()).hexdigest()]},
        {"name": "beta", "api_keys_sha256": [hashlib.sha256(KEY_B.encode()).hexdigest()]},
    ]}))
    s = Server(BIN_DIR, "--workers", "1", "--tenants", str(path))
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(autouse=True)
def no_key_in_the_environment(monkeypatch):
    monkeypatch.delenv("SANDBOX_API_KEY", raising=False)


def auth_failures(server):
    return server.log_text().count("event=auth_failed ")


def test_sandbox_run_takes_a_key_from_the_flag_or_the_environment(server, tmp_path):
    rc, out = sandbox_run(tmp_path, "print('hi')\n", "-e", server.tcp, "--api-key", KEY_A)
    assert rc == 0 and out["status"] == "OK" and out["stdout"] == "hi\n", out
    rc, out = sandbox_run(tmp_path, "print('hi')\n", "-e", server.tcp,
                          env={"SANDBOX_API_KEY": KEY_A})
    assert rc == 0 and out["status"] == "OK", out
    for flags, env, message in (([], {}, NO_KEY), (["--api-key", "sbx-wrong"], {}, WRONG_KEY),
                                ([], {"SANDBOX_API_KEY": "sbx-wrong"}, WRONG_KEY),
                                (["--api-key", ""], {"SANDBOX_API_KEY": KEY_A}, NO_KEY)):
        before = auth_failures(server)
        rc, out = sandbox_run(tmp_path, "print('hi')\n", "-e", server.tcp, *flags, env=env)
        assert rc == 125 and out["status"] == "UNAUTHENTICATED", (flags, env, out)
        assert out["error"] == message and out["stdout"] == "", out
        assert auth_failures(server) - before == 1


def test_a_bad_key_is_refused_before_anything_is_sent(server, tmp_path):
    before = auth_failures(server)
    script = tmp_path / "a.py"
    script.write_text("print(1)\n")
    for key in ("has space", "x" * 513, "tab\there"):
        for tool, flags in (("sandbox-run", []), ("sandbox-bench", ["-n", "1"])):
            for args, env in ((["--api-key", key], {}), ([], {"SANDBOX_API_KEY": key})):
                p = subprocess.run([f"{BIN_DIR}/{tool}", "-e", server.tcp, *flags, *args,
                                    str(script)], capture_output=True, text=True, timeout=60,
                                   env=dict(os.environ, **env))
                assert p.returncode != 0 and LOCAL in p.stderr, (tool, p)
                assert key not in p.stderr and key not in p.stdout
    assert auth_failures(server) == before, "nothing reached the server"


def test_sandbox_bench_counts_unauthenticated_and_never_retries_it(server, tmp_path):
    cmd, rec = bench_cmd(tmp_path, "print('hi')\n", "-e", server.tcp, "--requests", "3",
                         "--api-key", KEY_A)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and json.loads(p.stdout)["status"] == {"OK": 3}, p
    before = auth_failures(server)
    cmd, rec = bench_cmd(tmp_path, "print('hi')\n", "-e", server.tcp, "--requests", "3",
                         "--retries", "3")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, SANDBOX_API_KEY="sbx-wrong"))
    assert p.returncode == 1 and json.loads(p.stdout)["status"] == {"UNAUTHENTICATED": 3}, p
    for r in records(rec):
        assert r["status"] == "UNAUTHENTICATED" and r["attempts"] == 1, r
        assert r["error"].endswith(WRONG_KEY), r
    assert auth_failures(server) - before == 3


def test_two_tenants_one_session_id(server, tmp_path):
    write = "open('{n}', 'w').write('x')\nimport os\nprint(sorted(os.listdir('.')))\n"
    rc, a = sandbox_run(tmp_path, write.format(n="a.txt"), "-e", server.tcp, "--api-key", KEY_A,
                        "--session", "demo")
    assert rc == 0 and a["session_created"] and "a.txt" in a["stdout"], a
    rc, b = sandbox_run(tmp_path, write.format(n="b.txt"), "-e", server.tcp, "--api-key", KEY_B,
                        "--session", "demo")
    assert rc == 0 and b["session_created"], b
    assert "b.txt" in b["stdout"] and "a.txt" not in b["stdout"], b
