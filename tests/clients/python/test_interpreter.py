"""Interpreter sessions and rich results through the Python client
(session_mode, RunResult.result, state_lost, interpreter_ended; the GetInfo
fields; docs/INTERPRETER.md), against a real sandboxd, blocking and async."""
import asyncio

import pytest

import sandboxd

IGNORE_INTERRUPT = ("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                    "time.sleep(30)\n")


@pytest.fixture(scope="module")
def srv(module_servers):
    return module_servers.start("--workers", "2", "--interpreter-grace-ms", "500")


@pytest.fixture(scope="module")
def client(srv):
    with sandboxd.Client(srv.tcp) as c:
        yield c


def test_state_lives_between_calls(client):
    r = client.run_code("x = 41\n", session_id="py-i1", session_mode="interpreter")
    assert r.ok and r.result == "" and r.session_created and r.session_mode == "interpreter"
    r = client.run_code("x + 1\n", session_id="py-i1")
    assert (r.result, r.result_truncated, r.state_lost, r.interpreter_ended) == ("42", False,
                                                                               False, False)
    assert r.session_mode == "interpreter"
    client.close_session("py-i1")


def test_every_run_has_a_result(client):
    r = client.run_code("2 + 3\n")
    assert r.ok and r.result == "5" and r.session_mode == ""
    r = client.run_code("print('hi')\n")
    assert r.result == "" and r.stdout_text == "hi\n"


def test_a_killed_interpreter_is_reported_then_its_loss(client):
    client.run_code("y = 1\n", session_id="py-i2", session_mode="interpreter")
    r = client.run_code(IGNORE_INTERRUPT, session_id="py-i2", limits={"timeout_ms": 1000})
    assert r.killed_by == "timeout" and r.interpreter_ended and not r.state_lost
    r = client.run_code("'y' in dir()\n", session_id="py-i2")
    assert r.state_lost and r.result == "False" and not r.interpreter_ended
    assert any("state was lost" in f for f in r.feedback)
    client.close_session("py-i2")


def test_the_other_mode_is_refused(client):
    client.run_code("z = 1\n", session_id="py-i3", session_mode="files")
    with pytest.raises(sandboxd.FailedPrecondition) as e:
        client.run_code("z\n", session_id="py-i3", session_mode="interpreter")
    assert "is a FILES session" in str(e.value)
    with pytest.raises(sandboxd.InvalidArgument) as e:
        client.run_code("1\n", session_mode="interpreter")
    assert "needs a session_id" in str(e.value)
    client.close_session("py-i3")


def test_a_bad_mode_is_refused_before_sending(srv, client):
    before = client.info().requests_total
    with pytest.raises(ValueError) as e:
        client.run_code("1\n", session_id="py-i4", session_mode="notebook")
    assert "session_mode: 'notebook' is not one of" in str(e.value)
    assert client.info().requests_total == before + 1  # the info call itself only


def test_info_reports_interpreters(client):
    i = client.info()
    assert i.max_interpreters == 4 and i.interpreter_idle_s == 600
    assert i.interpreter_max_lifetime_s == 3600 and i.interpreter_starts_total >= 2


def test_stream_and_async(srv):
    with sandboxd.Client(srv.tcp) as c:
        c.run_code("w = 20\n", session_id="py-i5", session_mode="interpreter")
        with c.stream("print('go')\nw + 1\n", session_id="py-i5") as s:
            text = "".join(ch.text for ch in s)
        assert text == "go\n" and s.result.result == "21"

    async def main():
        async with sandboxd.AsyncClient(srv.tcp) as a:
            r = await a.run_code("w * 2\n", session_id="py-i5")
            await a.close_session("py-i5")
            return r

    r = asyncio.run(main())
    assert r.result == "40" and r.session_mode == "interpreter"
