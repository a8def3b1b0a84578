"""Shared fixtures of the Python client tests: real sandboxd servers.

Servers come from tests/lib/harness.py's Server (its
own port, ipc socket, state dir and uid range): servers.start(*flags) takes
its uids from the harness (s.uid_base). Files not yet moved to that still
pass a base of their own first, from UID_RANGES: 53000-53999
(test_interpreter.py: 53800-53849), 58500-58999 for test_tls.py and
41500-41999 for test_stream.py; each such file owns a block of them (see
the file). SANDBOXD_BIN_DIR (set by run_pytest.py)
names the build's bin directory.
"""
import os
import re
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "lib"))

from harness import Server  # noqa: E402

BIN_DIR = os.environ.get("SANDBOXD_BIN_DIR", os.path.join(REPO, "build", "bin"))
UID_RANGES = ((53000, 53999), (58500, 58999), (41500, 41999))


class Servers:
    """Starts servers for a test and stops every one of them afterwards."""

    def __init__(self):
        self.started = []

    def start(self, *flags, uid_base=None) -> Server:
        """A server with these flags; its uids from the harness (s.uid_base),
        or uid_base. A first int is a uid base of the files not yet moved
        off UID_RANGES."""
        if flags and isinstance(flags[0], int):
            uid_base, flags = flags[0], flags[1:]
            assert any(lo <= uid_base <= hi - 10 for lo, hi in UID_RANGES), uid_base
        s = Server(BIN_DIR, *flags, uid_base=uid_base)
        self.started.append(s)
        return s

    def stop_all(self):
        for s in self.started:
            s.stop()


@pytest.fixture
def servers():
    box = Servers()
    try:
        yield box
    finally:
        box.stop_all()


@pytest.fixture(scope="module")
def module_servers():
    box = Servers()
    try:
        yield box
    finally:
        box.stop_all()


def runs_of(server: Server, run_id: str) -> int:
    """How many times run_id ran on server, from its log (one event=run line
    per run)."""
    pattern = re.compile(rf"event=run run_id={re.escape(run_id)} ")
    return len(pattern.findall(server.log_text()))


def wait_for(predicate, timeout_s: float = 15.0, step_s: float = 0.02) -> bool:
    import time
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step_s)
    return bool(predicate())


def pytest_sessionfinish(session, exitstatus):
    """The servers' scratch directories go when every test passed."""
    import harness
    harness.clean_scratch(keep=exitstatus != 0)
