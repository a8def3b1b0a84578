"""Every status a user of the Python client can meet, against real servers,
with what it says about the code: nothing_ran only when a server said so or
nothing was sent; Unknown and a client-side DeadlineExceeded may have run
and are never retried."""
import signal
import threading
import time

import pytest

import sandboxd
from conftest import runs_of, wait_for

SLEEP = "import time\nopen('started', 'w').close()\ntime.sleep({s})\nprint('done')\n"


def in_thread(fn):
    """Runs fn in a thread; returns (thread, box) with box['result'] or box['error']."""
    box = {}

    def run():
        try:
            box["result"] = fn()
        except Exception as e:  # the test asserts on it
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def running(client, n=1):
    return wait_for(lambda: client.info().running >= n)


def test_invalid_argument_names_the_field(servers):
    s = servers.start("--max-message-bytes", "65536")
    with sandboxd.Client(s.tcp) as c:
        cases = [
            ("limits.timeout_ms", dict(limits={"timeout_ms": -1})),
            ("limits.memory_bytes", dict(limits=sandboxd.Limits(memory_bytes=1))),
            ("session_id", dict(session_id="../abc")),
            ("run_id", dict(run_id="../etc")),
            ("files[0].path", dict(files={"../x": b"x"})),
            ("files[0].url", dict(files={"x": sandboxd.FileURL("file:///etc/passwd")})),
            ("env", dict(env={"1BAD": "x"})),
            ("requirements", dict(requirements=["--index-url=http://x/"])),
        ]
        for field, kw in cases:
            with pytest.raises(sandboxd.InvalidArgument) as ei:
                c.run_code("print(1)", **kw)
            e = ei.value
            assert field in e.message, (field, e.message)
            assert e.from_server and e.nothing_ran and e.attempts == 1 and e.code == 3
        with pytest.raises(sandboxd.InvalidArgument, match="code"):
            c.run_code("")
        # Over the server's --max-message-bytes: refused by the client after
        # one GetInfo, at once, instead of a connection dropped by nng.
        t0 = time.monotonic()
        big = "x = '" + "a" * 70000 + "'\n"
        for _ in range(2):
            with pytest.raises(sandboxd.InvalidArgument,
                               match="more than the 65536 the server accepts") as ei:
                c.run_code(big)
            assert "nothing was sent" in ei.value.message and not ei.value.from_server
            assert ei.value.nothing_ran
        assert time.monotonic() - t0 < 10
        assert c.info().requests_total  # the server still serves
    with sandboxd.Client(s.tcp, max_request_bytes=16384) as c:
        with pytest.raises(sandboxd.InvalidArgument, match="client's cap of 16384"):
            c.run_code("x = '" + "a" * 20000 + "'\n")
        assert c.run_code("print('small')").stdout == b"small\n"
    assert s.log_text().count("event=run ") == 1, "only the last call ran"
    # One GetInfo for the two oversized requests of the first client.
    assert s.proc.poll() is None


def test_resource_exhausted_retried_only_while_nothing_ran(servers):
    # --queue 1, not 0: sandboxd refuses every RunCode with --queue 0, even
    # with its worker idle (server/queue.c; reported, not changed here).
    s = servers.start("--workers", "1", "--queue", "1")
    with sandboxd.Client(s.tcp, retries=0) as c, sandboxd.Client(s.tcp, retries=20) as patient:
        t, box = in_thread(lambda: c.run_code(SLEEP.format(s=2), run_id="re-long"))
        assert running(c)
        t2, box2 = in_thread(lambda: c.run_code("print('queued')", run_id="re-queued"))
        assert wait_for(lambda: c.info().queue_depth == 1)
        with pytest.raises(sandboxd.ResourceExhausted) as ei:
            c.run_code("print(1)", run_id="re-refused")
        e = ei.value
        assert e.from_server and e.nothing_ran and e.attempts == 1 and e.run_id == "re-refused"
        r = patient.run_code("print('retried')", run_id="re-retried")
        assert r.stdout == b"retried\n" and r.attempts > 1
        t.join(30)
        t2.join(30)
        assert box["result"].stdout == b"done\n" and box2["result"].stdout == b"queued\n"
    assert runs_of(s, "re-refused") == 0 and runs_of(s, "re-retried") == 1


def test_failed_precondition_for_a_busy_session_not_retried(servers):
    s = servers.start("--workers", "2")
    with sandboxd.Client(s.tcp) as c:
        t, box = in_thread(lambda: c.run_code(SLEEP.format(s=2), session_id="busy"))
        assert wait_for(lambda: _exists(c, "busy", "started"))
        with pytest.raises(sandboxd.FailedPrecondition, match="busy") as ei:
            c.run_code("print(2)", session_id="busy", run_id="fp-second")
        assert ei.value.attempts == 1 and ei.value.nothing_ran and ei.value.from_server
        with pytest.raises(sandboxd.FailedPrecondition):
            c.close_session("busy")
        t.join(30)
        assert box["result"].stdout == b"done\n"
        c.run_code("import os\nos.symlink('/etc/passwd', 'link')\n", session_id="busy")
        with pytest.raises(sandboxd.FailedPrecondition):
            c.read_file("busy", "link")
        with pytest.raises(sandboxd.InvalidArgument):
            c.read_file("busy", "../x")
    assert runs_of(s, "fp-second") == 0


def _exists(c, session, path):
    try:
        c.read_file(session, path)
        return True
    except sandboxd.NotFound:
        return False


def test_not_found(servers):
    s = servers.start()
    with sandboxd.Client(s.tcp) as c:
        for call in (lambda: c.close_session("nosuch"), lambda: c.list_files("nosuch"),
                     lambda: c.read_file("nosuch", "x")):
            with pytest.raises(sandboxd.NotFound) as ei:
                call()
            assert ei.value.from_server and ei.value.code_name == "NOT_FOUND"
        c.run_code("print(1)", session_id="exists")
        with pytest.raises(sandboxd.NotFound):
            c.read_file("exists", "missing.txt")


def test_unavailable_while_draining(servers):
    s = servers.start("--workers", "1")
    with sandboxd.Client(s.tcp) as c, sandboxd.Client(s.tcp, retries=0) as once, \
            sandboxd.Client(s.tcp, retries=2) as twice:
        t, box = in_thread(lambda: c.run_code(SLEEP.format(s=2.5), run_id="drain-long"))
        assert running(c)
        s.proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: "event=draining" in s.log_text())
        with pytest.raises(sandboxd.Unavailable) as ei:
            once.run_code("print(1)", run_id="drain-refused-1")
        assert ei.value.from_server and ei.value.nothing_ran and ei.value.attempts == 1
        with pytest.raises(sandboxd.Unavailable) as ei:
            twice.run_code("print(1)", run_id="drain-refused-2")
        assert ei.value.attempts == 3, "UNAVAILABLE is retried (one endpoint: the same)"
        t.join(30)
        assert box["result"].stdout == b"done\n", box
    assert s.proc.wait(30) == 0
    assert runs_of(s, "drain-refused-1") == 0 and runs_of(s, "drain-refused-2") == 0


def test_deadline_exceeded_from_the_client_may_have_run(servers):
    s = servers.start("--workers", "1")
    with sandboxd.Client(s.tcp, timeout_s=1.0) as c:
        t0 = time.monotonic()
        with pytest.raises(sandboxd.DeadlineExceeded) as ei:
            c.run_code(SLEEP.format(s=3), limits={"timeout_ms": 10000}, run_id="de-client")
        e = ei.value
        assert not e.from_server and not e.nothing_ran and e.attempts == 1
        assert "may or may not have run" in e.message and e.run_id == "de-client"
        assert time.monotonic() - t0 < 2.5, "no retry after a DeadlineExceeded"
    assert wait_for(lambda: runs_of(s, "de-client") == 1), "it did run: never say otherwise"


def test_deadline_exceeded_from_the_server_nothing_ran(servers):
    s = servers.start("--workers", "1")
    with sandboxd.Client(s.tcp) as c, sandboxd.Client(s.tcp, queue_wait_s=0.3) as hasty:
        t, box = in_thread(lambda: c.run_code(SLEEP.format(s=2), run_id="de-long"))
        assert running(c)
        with pytest.raises(sandboxd.DeadlineExceeded) as ei:
            hasty.run_code("print(1)", run_id="de-queued")
        assert ei.value.from_server and ei.value.nothing_ran
        t.join(30)
    assert runs_of(s, "de-queued") == 0


def test_unknown_when_the_server_dies_mid_call(servers):
    s = servers.start("--workers", "1")
    with sandboxd.Client(s.tcp, retries=5) as c:
        t, box = in_thread(lambda: c.run_code(SLEEP.format(s=5), run_id="unknown-1"))
        assert running(c)
        killed_at = time.monotonic()
        s.proc.kill()
        t.join(30)
        e = box.get("error")
        assert isinstance(e, sandboxd.Unknown), box
        assert not e.from_server and not e.nothing_ran and e.attempts == 1
        assert "may or may not have run" in e.message and e.run_id == "unknown-1"
        assert e.endpoint == s.tcp and time.monotonic() - killed_at < 3
        s.proc.wait()


def test_closing_the_client_cancels_a_call_in_flight(servers):
    s = servers.start("--workers", "1")
    c = sandboxd.Client(s.tcp)
    t, box = in_thread(lambda: c.run_code(SLEEP.format(s=2)))
    assert running(c)
    c.close()
    t.join(10)
    assert isinstance(box.get("error"), sandboxd.Cancelled) and not box["error"].nothing_ran
