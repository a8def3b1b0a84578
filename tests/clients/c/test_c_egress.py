"""allow_net and the egress summary through the C client (issue 27,
docs/EGRESS.md), as a user meets them: sandbox-run --allow-net ENTRY and
sandbox-mcp's run_code argument allow_net, against real sandboxd servers. A
server without --egress-allow refuses a run that asks for the network
(INVALID_ARGUMENT naming the entry, nothing ran); sandbox-mcp refuses an
allow_net that is not an array of strings before anything is sent; a server
whose --egress-allow holds loopback lets a run fetch from a web server of
this test through its proxy, and --json and the tool's result carry the
egress summary."""
import json
import re
import subprocess

import pytest

from conftest import BIN_DIR
from lib import origin
from lib.harness import Server

RUN = f"{BIN_DIR}/sandbox-run"
MCP = f"{BIN_DIR}/sandbox-mcp"
BODY = b"egress-ok-c41d"

# urllib honours HTTP_PROXY, which the server sets for a run with allow_net.
FETCH = """import urllib.request
print(urllib.request.urlopen("http://127.0.0.1:{port}/x", timeout=20).read().decode())
"""


@pytest.fixture(scope="module")
def closed():
    """A server without --egress-allow: runs get no network."""
    s = Server(BIN_DIR, "--workers", "1")
    try:
        yield s
    finally:
        s.stop()


def runs_that_ran(server):
    """Runs the server ran (a refused one is logged with its status)."""
    return len(re.findall(r"event=run .* status=OK ", server.log_text()))


def calls_logged(server):
    """Every call a server logged, run or refused, carries its request_id."""
    return server.log_text().count('request_id="')


def mcp_calls(url, *arguments):
    """sandbox-mcp on stdio: one tools/call of run_code per arguments
    object; the results in order."""
    lines = "".join(json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                                "params": {"name": "run_code", "arguments": a}}) + "\n"
                    for i, a in enumerate(arguments))
    p = subprocess.run([MCP, "--endpoint", url, "--concurrency", "1"], input=lines,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p
    answers = {m["id"]: m for m in map(json.loads, p.stdout.splitlines())}
    return [answers[i]["result"] for i in range(len(arguments))]


def test_help_says_one_entry_per_flag():
    out = subprocess.run([RUN, "--help"], capture_output=True, text=True).stdout
    assert "[--allow-net ENTRY]..." in out
    assert "One entry per flag" in out and "comma is not a separator" in out


def test_sandbox_run_allow_net_refused_without_egress_allow(closed, tmp_path):
    before = runs_that_ran(closed)
    script = tmp_path / "a.py"
    script.write_text("print(1)\n")
    p = subprocess.run([RUN, "-e", closed.tcp, "--json", "--allow-net", "example.com",
                        "--allow-net", "pypi.org", str(script)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 125, p
    out = json.loads(p.stdout)
    assert out["status"] == "INVALID_ARGUMENT", out
    assert 'allow_net[0] ("example.com")' in out["error"], out
    assert "egress" not in out
    # Plain mode: the status and the server's message on stderr.
    p = subprocess.run([RUN, "-e", closed.tcp, "--allow-net", "example.com", str(script)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 125 and p.stdout == "", p
    assert 'sandbox-run: INVALID_ARGUMENT: allow_net[0] ("example.com")' in p.stderr, p.stderr
    assert runs_that_ran(closed) == before
    # Without --allow-net: no network, no summary.
    p = subprocess.run([RUN, "-e", closed.tcp, "--json", str(script)], capture_output=True,
                       text=True, timeout=60)
    out = json.loads(p.stdout)
    assert p.returncode == 0 and out["stdout"] == "1\n" and "egress" not in out, out


def test_sandbox_mcp_allow_net_refused_without_egress_allow(closed):
    before = runs_that_ran(closed)
    (r,) = mcp_calls(closed.tcp, {"code": "print(1)", "allow_net": ["example.com"]})
    assert r["isError"] is True, r
    text = r["content"][0]["text"]
    assert text.startswith("run_code failed: INVALID_ARGUMENT: "), text
    assert 'allow_net[0] ("example.com")' in text, text
    assert runs_that_ran(closed) == before


def test_sandbox_mcp_refuses_allow_net_that_is_not_an_array_of_strings(closed):
    before = calls_logged(closed)
    bad, item = mcp_calls(closed.tcp, {"code": "print(1)", "allow_net": "example.com"},
                          {"code": "print(1)", "allow_net": ["example.com", 443]})
    assert bad["isError"] is True and bad["content"][0]["text"] == (
        "run_code was not called (nothing ran): arguments.allow_net: expected an array, "
        "got string"), bad
    assert item["isError"] is True and item["content"][0]["text"] == (
        "run_code was not called (nothing ran): arguments.allow_net[1]: expected a string, "
        "got integer"), item
    assert calls_logged(closed) == before


def test_sandbox_mcp_lists_allow_net():
    lines = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}) + "\n"
    p = subprocess.run([MCP, "--endpoint", "tcp://127.0.0.1:9"], input=lines,
                       capture_output=True, text=True, timeout=60)
    (tool,) = [t for t in json.loads(p.stdout)["result"]["tools"] if t["name"] == "run_code"]
    prop = tool["inputSchema"]["properties"]["allow_net"]
    assert prop["type"] == "array" and prop["items"] == {"type": "string"}, prop
    assert "pypi.org" in prop["description"], prop
    assert "egress" in tool["outputSchema"]["properties"]


@pytest.fixture
def web():
    with origin.serving(BODY) as port:
        yield port


@pytest.fixture
def open_server(web):
    # Private addresses are allowed only by CIDR entries; a ceiling entry
    # without a port allows 80 and 443 only.
    s = Server(BIN_DIR, "--workers", "1", "--egress-allow", f"127.0.0.0/8:{web}")
    try:
        yield s
    finally:
        s.stop()


def test_sandbox_run_reaches_its_allow_list_through_the_proxy(open_server, web, tmp_path):
    p = subprocess.run([RUN, "-e", open_server.tcp, "--info"], capture_output=True, text=True,
                       timeout=60)
    assert json.loads(p.stdout)["egress_allow"] == [f"127.0.0.0/8:{web}"], p.stdout
    script = tmp_path / "fetch.py"
    script.write_text(FETCH.format(port=web))
    p = subprocess.run([RUN, "-e", open_server.tcp, "--json", "--timeout-ms", "30000",
                        "--allow-net", f"127.0.0.1:{web}", str(script)], capture_output=True,
                       text=True, timeout=90)
    out = json.loads(p.stdout)
    assert p.returncode == 0 and out["stdout"] == BODY.decode() + "\n", out
    e = out["egress"]
    assert set(e) == {"connections", "refused", "bytes_up", "bytes_down"}, e
    assert e["connections"] >= 1 and e["refused"] == 0 and e["bytes_down"] >= len(BODY), e


def test_sandbox_mcp_reaches_its_allow_list_through_the_proxy(open_server, web):
    (r,) = mcp_calls(open_server.tcp, {"code": FETCH.format(port=web),
                                       "allow_net": [f"127.0.0.1:{web}"],
                                       "limits": {"timeout_ms": 30000}})
    assert r["isError"] is False, r
    sc = r["structuredContent"]
    assert sc["stdout"] == BODY.decode() + "\n", sc
    assert sc["egress"]["connections"] >= 1 and sc["egress"]["refused"] == 0, sc
    assert "network (allow_net): " in r["content"][0]["text"], r["content"][0]["text"]
