"""The C client's streaming and cancel (libsandbox-client's sbxc_start_run,
sbxc_watch_run, sbxc_follow_run, sbxc_cancel_run) through sandbox-run
--stream/--watch/--cancel and sandbox-bench --stream, against real servers:
output reaches sandbox-run's stdout while the program runs, a character
split between chunks is not replaced, Ctrl-C and SIGTERM cancel the run and
kill its whole tree (exit 130), a second Ctrl-C exits without waiting for
the cancel's answer, a run started elsewhere can be watched and cancelled by
its id, an unknown id is NOT_FOUND, and in a fleet every stream is watched
on the server that started it."""
import json
import signal
import subprocess
import time

import pytest

from conftest import BIN_DIR, bench_cmd, records, run_ids, wait_for
from lib.harness import Server, slot_processes

RUN = f"{BIN_DIR}/sandbox-run"

# Lines printed every 100 ms, each with the sandbox's CLOCK_MONOTONIC: the
# sandbox has no time namespace, so it is the test's time.monotonic().
TICKS = """
import time
for i in range(10):
    print(i, time.monotonic(), flush=True)
    time.sleep(0.1)
"""

# Children that never end, then "ready"; the parent sleeps forever.
FORKS = """
import os, time
for _ in range(3):
    if os.fork() == 0:
        while True:
            pass
print("ready", flush=True)
while True:
    time.sleep(1)
"""


@pytest.fixture
def make_server():
    made = []

    def make(*flags):
        s = Server(BIN_DIR, "--workers", "2", *flags)
        made.append(s)
        return s
    try:
        yield make
    finally:
        for s in made:
            if s.proc is not None and s.proc.poll() is None:
                s.proc.send_signal(signal.SIGCONT)  # a test may have stopped it
            s.stop()


def script(tmp_path, code):
    path = tmp_path / f"script-{time.monotonic_ns()}.py"
    path.write_text(code)
    return str(path)


def start(*args):
    return subprocess.Popen([RUN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(p, timeout):
    """(exit status, stdout, stderr) of p within timeout s; killed past it."""
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError(f"sandbox-run still running after {timeout} s: "
                             f"{out[-500:]!r} {err[-1000:]!r}") from None
    return p.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def run_line(server, run_id):
    """The server log's event=run line of run_id, or None."""
    for line in server.log_text().splitlines():
        if f"event=run run_id={run_id} " in line:
            return line
    return None


def test_output_arrives_while_the_program_runs(make_server, tmp_path):
    s = make_server()
    p = start("-e", s.tcp, "--stream", script(tmp_path, TICKS))
    seen = []  # (arrival, line)
    try:
        for raw in iter(p.stdout.readline, b""):
            seen.append((time.monotonic(), raw.decode()))
    finally:
        rc, _, err = finish(p, 60)
    assert rc == 0, err
    assert [line.split()[0] for _, line in seen] == [str(i) for i in range(10)], seen
    printed = [float(line.split()[1]) for _, line in seen]
    arrived = [t for t, _ in seen]
    # The first line reaches sandbox-run's stdout within 300 ms of its print.
    assert arrived[0] - printed[0] < 0.3, (arrived[0] - printed[0], seen)
    # The lines come as they are printed (0.9 s apart first to last), not
    # all at the end.
    assert arrived[-1] - arrived[0] > 0.6, seen
    assert sum(1 for a, t in zip(arrived, printed) if a - t < 0.3) >= 8, seen


def test_a_character_split_between_chunks_is_decoded_whole(make_server, tmp_path):
    """--stream --json: one JSON line per chunk; "é" written in two halves
    0.3 s apart is held back, not replaced, then the result object."""
    s = make_server()
    code = ("import sys, time\nsys.stdout.buffer.write(b'caf\\xc3'); sys.stdout.flush()\n"
            "time.sleep(0.3)\nsys.stdout.buffer.write(b'\\xa9\\n'); sys.stdout.flush()\n")
    p = start("-e", s.tcp, "--stream", "--json", script(tmp_path, code))
    rc, out, err = finish(p, 60)
    assert rc == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[0]["started"]["endpoint"] == s.tcp, lines
    chunks = [line["stdout"] for line in lines if "stdout" in line and len(line) == 1]
    assert chunks == ["caf", "é\n"], lines
    result = lines[-1]
    assert result["status"] == "OK" and result["stdout"] == "café\n", result
    assert result["run_id"] == lines[0]["started"]["run_id"], lines


@pytest.mark.parametrize("sig,fleet", [(signal.SIGINT, False), (signal.SIGTERM, False),
                                       (signal.SIGINT, True)], ids=["SIGINT", "SIGTERM", "fleet"])
def test_a_signal_cancels_the_run_and_its_whole_tree(make_server, tmp_path, sig, fleet):
    """In a fleet the cancel goes to the run's server too: the fleet's own
    choice would be the other one, the one without a watch in flight."""
    servers = [make_server()] + ([make_server()] if fleet else [])
    run_id = f"cancel-{sig.name}"
    p = start(*[a for s in servers for a in ("-e", s.tcp)], "--stream", "--json", "--timeout-ms",
              "60000", "--run-id", run_id, script(tmp_path, FORKS))
    try:
        where = json.loads(p.stdout.readline())["started"]["endpoint"]
        s = next(s for s in servers if s.tcp == where)
        seen = ""
        while seen != "ready\n":  # print may write "ready" and "\n" apart
            line = json.loads(p.stdout.readline())
            assert list(line) == ["stdout"] and "ready\n".startswith(seen + line["stdout"]), line
            seen += line["stdout"]
        assert len(slot_processes(s.uid_base, 3)) >= 4, slot_processes(s.uid_base, 3)  # the parent, three children
        t0 = time.monotonic()
        p.send_signal(sig)
        rc, out, err = finish(p, 15)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert rc == 130, (rc, err)
    assert took < 3, took
    assert f"{sig.name}: cancelling run {run_id}" in err, err
    result = json.loads(out.splitlines()[-1])
    assert result["killed_by"] == "cancelled" and result["stdout"] == "ready\n", result
    # The cancel's answer came once every process was gone: nothing left.
    assert slot_processes(s.uid_base, 3) == {}, slot_processes(s.uid_base, 3)
    assert wait_for(lambda: run_line(s, run_id) is not None, 10), s.log_text()[-2000:]
    assert "killed_by=cancelled" in run_line(s, run_id), run_line(s, run_id)


def test_a_second_ctrl_c_exits_without_waiting(make_server, tmp_path):
    """The server is stopped (SIGSTOP) so the cancel cannot be answered: the
    first Ctrl-C leaves sandbox-run waiting for the answer, the second ends
    it at once. Once the server goes on, it cancels the run all the same."""
    s = make_server()
    run_id = "twice"
    p = start("-e", s.tcp, "--stream", "--timeout-ms", "60000", "--run-id", run_id,
              script(tmp_path, FORKS))
    try:
        assert p.stdout.readline() == b"ready\n"
        s.proc.send_signal(signal.SIGSTOP)
        p.send_signal(signal.SIGINT)
        time.sleep(1)
        assert p.poll() is None, "sandbox-run did not wait for the cancel's answer"
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        rc, _, err = finish(p, 10)
        took = time.monotonic() - t0
    finally:
        s.proc.send_signal(signal.SIGCONT)
        if p.poll() is None:
            p.kill()
            p.wait()
    assert rc == 130 and took < 1, (rc, took, err)
    assert "cancelling run twice" in err and "interrupted again" in err, err
    assert wait_for(lambda: run_line(s, run_id) is not None, 15), s.log_text()[-2000:]
    assert "killed_by=cancelled" in run_line(s, run_id)
    assert wait_for(lambda: slot_processes(s.uid_base, 3) == {}, 10), slot_processes(s.uid_base, 3)


def test_watch_and_cancel_a_run_by_its_id(make_server, tmp_path):
    """A RunCode run with a run id (plain sandbox-run) is followed from
    another process with --watch and cancelled from a third with --cancel;
    the caller and the watcher both end with the cancelled result."""
    s = make_server()
    code = "import time\nwhile True:\n    print('tick', flush=True)\n    time.sleep(0.1)\n"
    caller = start("-e", s.tcp, "--json", "--timeout-ms", "60000", "--run-id", "by-id",
                   script(tmp_path, code))
    watcher = None
    try:
        assert wait_for(lambda: _started(s), 30)
        watcher = start("-e", s.tcp, "--watch", "by-id")
        assert watcher.stdout.readline() == b"tick\n"
        p = subprocess.run([RUN, "-e", s.tcp, "--json", "--cancel", "by-id"], capture_output=True,
                           text=True, timeout=30)
        assert p.returncode == 0, p
        assert json.loads(p.stdout) == {"status": "OK", "state": "done"}
        assert slot_processes(s.uid_base, 3) == {}  # answered once the run had ended
        rc, out, err = finish(caller, 30)
        assert rc == 130, (rc, out, err)
        result = json.loads(out)
        assert result["status"] == "OK" and result["killed_by"] == "cancelled", result
        rc, out, err = finish(watcher, 30)
        assert rc == 130 and "killed (cancelled)" in err, (rc, err)
    finally:
        for q in (caller, watcher):
            if q is not None and q.poll() is None:
                q.kill()
                q.wait()


def _started(server):
    p = subprocess.run([RUN, "-e", server.tcp, "--info"], capture_output=True, text=True,
                       timeout=30)
    return p.returncode == 0 and json.loads(p.stdout)["running"] == 1


def test_an_unknown_run_id_is_not_found(make_server):
    s = make_server()
    for flag in ("--watch", "--cancel"):
        p = subprocess.run([RUN, "-e", s.tcp, flag, "no-such-run"], capture_output=True,
                           text=True, timeout=30)
        assert p.returncode == 125 and "NOT_FOUND" in p.stderr, (flag, p)
        p = subprocess.run([RUN, "-e", s.tcp, "--json", flag, "no-such-run"],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 125 and json.loads(p.stdout)["status"] == "NOT_FOUND", (flag, p)
    # A run lives on one server: with two endpoints, which one is not guessed.
    p = subprocess.run([RUN, "-e", s.tcp, "-e", s.ipc, "--watch", "x"], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 2 and "name the one the run lives on" in p.stderr, p


def test_streams_in_a_fleet_are_watched_where_they_started(make_server, tmp_path):
    """sandbox-bench --stream over two servers: StartRun spreads the runs
    over both, and every run's watches go to the server that started it
    (elsewhere they would be NOT_FOUND): each stream completes, in chunks,
    and ran once, on the endpoint it reports. One call at a time first: the
    fleet's own choice would then alternate, so a watch not pinned to its
    run's endpoint would go to the other server; then four at once."""
    servers = [make_server(), make_server()]
    keys = [s.tcp for s in servers]
    code = "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.1)\n"
    for concurrency, n in ((1, 6), (4, 12)):
        prefix = f"fs{concurrency}"
        cmd, rec = bench_cmd(tmp_path, code, "-e", keys[0], "-e", keys[1], "--stream",
                             "--concurrency", str(concurrency), "--requests", str(n),
                             "--run-id-prefix", prefix)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        calls = records(rec)
        assert len(calls) == n, (p.stdout, p.stderr)
        assert [c for c in calls if c["status"] != "OK"] == [], calls
        assert p.returncode == 0, p.stdout + p.stderr
        assert {c["endpoint"] for c in calls} == set(keys), calls
        assert all(c["chunks"] >= 2 for c in calls), calls  # streamed, not all at the end
        for c in calls:
            where = [k for k, s in zip(keys, servers) if c["run_id"] in run_ids(s, f"{prefix}-")]
            assert where == [c["endpoint"]], (c, where)
