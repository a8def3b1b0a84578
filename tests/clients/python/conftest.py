"""Shared fixtures of the Python client tests: real sandboxd servers.

Servers come from tests/lib/harness.py's Server (its own port, ipc socket,
state dir and a uid range the harness allocates, so the suite can run beside
other tests and engineers' servers). SANDBOXD_BIN_DIR (set by run_pytest.py)
names the build's bin directory; tests/conftest.py (the root one) removes
the servers' scratch directories at the session's end.
"""
import os
import re

import pytest

from lib.harness import Server

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
BIN_DIR = os.environ.get("SANDBOXD_BIN_DIR", os.path.join(REPO, "build", "bin"))


class Servers:
    """Starts servers for a test and stops every one of them afterwards."""

    def __init__(self):
        self.started = []

    def start(self, *flags: str, uid_base=None) -> Server:
        """A server with these flags; its uids from the harness (s.uid_base),
        or uid_base (a restart on the same uids)."""
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
