"""The harness's own tests (ctest harness_selftest): the soft check as
tests/conftest.py wires it (a failed check lets the test go on and fails it
at its end, listing every failed check), and uids.allocate (ranges never
shared between processes, released when the holder exits, skipped while a
process runs as one of their uids). Uses a private uid window and lock
directory, so it runs beside the end-to-end tests without the shared lock.
"""
import os
import subprocess
import sys
import time

import pytest

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytest_plugins = ["pytester"]


@pytest.fixture
def inner(pytester, monkeypatch):
    """A pytester whose runs (in a process of their own: lib.harness's
    FAILURES is this process's too) use this suite's root conftest."""
    with open(os.path.join(TESTS, "conftest.py")) as f:
        pytester.makeconftest(f.read())
    monkeypatch.setenv("PYTHONPATH", TESTS)
    return pytester


def test_a_failed_check_goes_on_and_fails_the_test_at_its_end(inner):
    inner.makepyfile(test_inner='''
from lib.harness import check as helper_check

def test_group(check):
    check(True, "first")
    check(False, "second", {"detail": 2})
    helper_check(False, "third, from a helper", "why")
    print("went on after the failed checks")
    check(True, "last")

def test_next(check):
    check(True, "a later test starts with no failure")
''')
    r = inner.runpytest_subprocess("-p", "no:cacheprovider")
    r.assert_outcomes(passed=1, failed=1)
    out = r.stdout.str()
    assert "2 failed check(s):" in out
    assert "FAIL second {'detail': 2}" in out and "FAIL third, from a helper why" in out
    assert "went on after the failed checks" in out and "ok   last" in out


def test_an_exception_after_a_failed_check_lists_both(inner):
    inner.makepyfile(test_inner='''
def test_group(check):
    check(False, "before the crash")
    raise RuntimeError("the crash")
''')
    r = inner.runpytest_subprocess("-p", "no:cacheprovider")
    r.assert_outcomes(failed=1)
    out = r.stdout.str()
    assert "RuntimeError: the crash" in out and "FAIL before the crash" in out


def test_a_skip_fails_when_ci_is_true(inner, monkeypatch):
    inner.makepyfile(test_inner='''
import pytest

def test_group():
    pytest.skip("no such thing here")
''')
    monkeypatch.delenv("CI", raising=False)
    inner.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(skipped=1)
    monkeypatch.setenv("CI", "true")
    r = inner.runpytest_subprocess("-p", "no:cacheprovider")
    r.assert_outcomes(failed=1)
    assert "and CI=true forbids skipping" in r.stdout.str()


HOLD = '''
import sys, time
from lib import uids
print(uids.allocate(int(sys.argv[1])), flush=True)
time.sleep(float(sys.argv[2]))
'''


@pytest.fixture
def window(tmp_path, monkeypatch):
    """Four blocks of 32 uids (30000-30127) and a lock directory of their
    own, for this test and the processes it starts."""
    monkeypatch.setenv("PYTHONPATH", TESTS)
    monkeypatch.setenv("SBX_TEST_UIDS", "30000-30128")
    monkeypatch.setenv("SBX_TEST_UID_LOCKS", str(tmp_path / "locks"))
    return tmp_path


def hold(n, seconds):
    """A process that allocates n uids and holds them for seconds."""
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(n), str(seconds)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line.strip().isdigit():
        p.wait()
        raise AssertionError(p.stderr.read())
    return p, int(line)


def test_processes_get_disjoint_ranges_and_give_them_back_at_exit(window):
    a, base_a = hold(5, 30)
    b, base_b = hold(40, 30)  # two blocks
    c, base_c = hold(1, 0)
    try:
        assert (base_a, base_b, base_c) == (30000, 30032, 30096)
        c.wait(10)
        d, base_d = hold(1, 0)  # c's block is free again
        d.wait(10)
        assert base_d == 30096
        a.kill()
        a.wait()
        e, base_e = hold(8, 0)  # a's too, once a is gone
        e.wait(10)
        assert base_e == 30000
    finally:
        for p in (a, b):
            p.kill()
            p.wait()


def test_a_full_window_is_an_error(window):
    a, _ = hold(128, 30)
    try:
        p = subprocess.run([sys.executable, "-c", HOLD, "1", "0"], capture_output=True,
                           text=True, timeout=30)
        assert p.returncode != 0 and "no 1 free uids in 30000-30128" in p.stderr
    finally:
        a.kill()
        a.wait()


def test_a_block_with_a_live_process_of_its_uids_is_skipped(window):
    if os.geteuid() != 0:
        pytest.skip("needs root to run a process as another uid")
    r, w = os.pipe()
    squatter = os.fork()
    if squatter == 0:  # a process of uid 30040 (no exec: it may not reach any binary)
        try:
            os.setgroups([])
            os.setgid(30040)
            os.setuid(30040)
            os.write(w, b"x")
            time.sleep(30)
        finally:
            os._exit(0)
    os.close(w)
    try:
        assert os.read(r, 1) == b"x"
        a, base = hold(1, 0)
        a.wait(10)
        assert base == 30000
        b, base = hold(33, 0)  # two blocks, none of them 30032-30063
        b.wait(10)
        assert base == 30064, "30032-30063 has a process of uid 30040"
    finally:
        os.kill(squatter, 9)
        os.waitpid(squatter, 0)
        os.close(r)
