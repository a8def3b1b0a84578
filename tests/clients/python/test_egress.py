"""allow_net and the egress summary through the Python client (issue 27,
docs/EGRESS.md), against real sandboxd servers: a server without
--egress-allow refuses a run that asks for the network (INVALID_ARGUMENT
naming the entry, nothing ran), and the client refuses a bare str before
anything is sent."""
import re

import pytest

import sandboxd

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


def test_a_bare_str_is_refused_before_anything_is_sent(closed):
    with sandboxd.Client(closed.tcp) as c:
        before = calls_logged(closed)
        with pytest.raises(TypeError, match="allow_net: a list of str such as"):
            c.run_code("print(1)\n", allow_net="example.com")
        with pytest.raises(TypeError, match="allow_net: a list of str such as"):
            c.start_run("print(1)\n", allow_net="example.com")
        assert calls_logged(closed) == before
