"""allow_net and the egress summary through the Python client (issue 27,
docs/EGRESS.md), against real sandboxd servers: a server without
--egress-allow refuses a run that asks for the network (INVALID_ARGUMENT
naming the entry, nothing ran), the client refuses a bare str before
anything is sent, and a server whose --egress-allow holds loopback lets a
run fetch from a web server of this test through its proxy, with the
reply's egress summary counting the connection."""
import re

import pytest

import sandboxd
from lib import origin

BODY = b"egress-ok-7f3a"

# urllib honours HTTP_PROXY, which the server sets for a run with allow_net.
FETCH = """import urllib.request
print(urllib.request.urlopen("http://127.0.0.1:{port}/x", timeout=20).read().decode())
"""


@pytest.fixture(scope="module")
def closed(module_servers):
    """A server without --egress-allow: runs get no network."""
    return module_servers.start("--workers", "1")


def runs_that_ran(server):
    """Runs the server ran (a refused one is logged with its status)."""
    return len(re.findall(r"event=run .* status=OK ", server.log_text()))


def calls_logged(server):
    """Every call a server logged, run or refused, carries its request_id."""
    return server.log_text().count('request_id="')


def test_a_server_without_egress_allow_refuses_allow_net(closed):
    with sandboxd.Client(closed.tcp) as c:
        before = runs_that_ran(closed)
        with pytest.raises(sandboxd.InvalidArgument) as ei:
            c.run_code("print(1)\n", allow_net=["example.com"])
        assert 'allow_net[0] ("example.com")' in str(ei.value), ei.value
        assert ei.value.nothing_ran and ei.value.from_server
        # StartRun checks the request as RunCode does.
        with pytest.raises(sandboxd.InvalidArgument, match=re.escape('allow_net[0] ("example.com")')):
            c.start_run("print(1)\n", allow_net=["example.com"])
        assert runs_that_ran(closed) == before
        # Without allow_net the run has no network and no summary.
        r = c.run_code("print(1)\n")
        assert r.ok and r.egress is None
        assert c.info().egress_allow == ()


def test_a_bare_str_is_refused_before_anything_is_sent(closed):
    with sandboxd.Client(closed.tcp) as c:
        before = calls_logged(closed)
        with pytest.raises(TypeError, match="allow_net: a list of str such as"):
            c.run_code("print(1)\n", allow_net="example.com")
        with pytest.raises(TypeError, match="allow_net: a list of str such as"):
            c.start_run("print(1)\n", allow_net="example.com")
        assert calls_logged(closed) == before


@pytest.fixture
def web():
    with origin.serving(BODY) as port:
        yield port


def test_a_run_reaches_its_allow_list_through_the_proxy(module_servers, web):
    # Private addresses are allowed only by CIDR entries; a ceiling entry
    # without a port allows 80 and 443 only.
    s = module_servers.start("--workers", "1", "--egress-allow", f"127.0.0.0/8:{web}")
    with sandboxd.Client(s.tcp) as c:
        assert c.info().egress_allow == (f"127.0.0.0/8:{web}",)
        r = c.run_code(FETCH.format(port=web), allow_net=[f"127.0.0.1:{web}"],
                       limits={"timeout_ms": 30000})
        assert r.ok, (r.stdout_text, r.stderr_text, r.feedback)
        assert r.stdout_text.strip() == BODY.decode()
        assert r.egress is not None and r.egress.connections >= 1, r.egress
        assert r.egress.refused == 0 and r.egress.bytes_down >= len(BODY), r.egress
        # A port the list does not name: the proxy refuses, the summary counts it.
        r = c.run_code(FETCH.format(port=web + 1 if web < 65535 else web - 1),
                       allow_net=[f"127.0.0.1:{web}"], limits={"timeout_ms": 30000})
        assert not r.ok and r.egress is not None and r.egress.refused >= 1, (r.egress, r.feedback)
