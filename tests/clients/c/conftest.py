"""Shared fixtures of the C client's fleet tests: real sandboxd servers on
127.0.0.2, 127.0.0.3 and 127.0.0.4, one port for all three (so that a host
name resolving to the three addresses names all of them), driven with
build/bin/sandbox-run and sandbox-bench.

Servers come from tests/lib/harness.py's Server (each also listens on its own
127.0.0.1 port and ipc socket, and runs as a uid range the harness
allocates). SANDBOXD_BIN_DIR (set by tests/clients/run_pytest.py) names the
build's bin directory; tests/conftest.py (the root one) removes the servers'
scratch directories at the session's end.
"""
import json
import os
import re
import socket
import subprocess
import time

import pytest

from lib.harness import Server

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
BIN_DIR = os.environ.get("SANDBOXD_BIN_DIR", os.path.join(REPO, "build", "bin"))
HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")


def shared_port():
    """A port free on all three addresses now."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind((HOSTS[0], 0))
            port = s.getsockname()[1]
        try:
            for h in HOSTS[1:]:
                with socket.socket() as s:
                    s.bind((h, port))
            return port
        except OSError:
            continue
    raise RuntimeError("no port free on 127.0.0.2-4")


class Fleet:
    """Three servers, one per address, on one port; key(i) is server i's
    endpoint key as every client spells it."""

    def __init__(self, *flags):
        self.servers = []
        for attempt in range(3):
            self.port = shared_port()
            try:
                for i, host in enumerate(HOSTS):
                    self.servers.append(Server(BIN_DIR, *flags, "--listen",
                                               f"tcp://{host}:{self.port}"))
                break
            except RuntimeError:  # the port was taken meanwhile: all again
                self.stop()
                if attempt == 2:
                    raise
        self.keys = [f"tcp://{h}:{self.port}" for h in HOSTS]

    def endpoint_flags(self, order=None):
        return [a for k in (order or self.keys) for a in ("-e", k)]

    def server_of(self, key):
        return self.servers[self.keys.index(key)]

    def stop(self):
        for s in self.servers:
            s.stop()
        self.servers = []


@pytest.fixture
def make_fleet():
    made = []

    def make(*flags):
        f = Fleet(*flags)
        made.append(f)
        return f
    try:
        yield make
    finally:
        for f in made:
            f.stop()


def run_ids(server, prefix=""):
    """The run ids in server's log (one event=run line per run)."""
    return re.findall(rf"event=run run_id=({re.escape(prefix)}\S*) ", server.log_text())


def sandbox_run(tmp_path, code, *flags, env=None, timeout=60):
    """sandbox-run --json on code: (exit status, parsed output)."""
    script = tmp_path / f"script-{time.monotonic_ns()}.py"
    script.write_text(code)
    p = subprocess.run([f"{BIN_DIR}/sandbox-run", "--json", *flags, str(script)],
                       capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, **(env or {})))
    try:
        return p.returncode, json.loads(p.stdout)
    except ValueError:
        raise AssertionError(f"sandbox-run printed no JSON: rc={p.returncode} "
                             f"{p.stdout[-1000:]} {p.stderr[-1000:]}") from None


def endpoints(*flags, timeout_ms=3000, env=None):
    """sandbox-run --endpoints: (exit status, {key: connected})."""
    p = subprocess.run([f"{BIN_DIR}/sandbox-run", *flags, "--endpoints", "--connect-timeout-ms",
                        str(timeout_ms)], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, **(env or {})))
    return p.returncode, json.loads(p.stdout)


def bench_cmd(tmp_path, code, *flags):
    """The sandbox-bench command for code, and its --record file."""
    script = tmp_path / f"bench-{time.monotonic_ns()}.py"
    script.write_text(code)
    record = tmp_path / f"record-{time.monotonic_ns()}.jsonl"
    return [f"{BIN_DIR}/sandbox-bench", "--json", "--record", str(record), *flags,
            str(script)], record


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def fnv1a32(data: bytes) -> int:
    """The session rule's hash, written here on its own (docs/CLIENTS.md)."""
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def session_home(session_id, keys):
    """The endpoint holding a session: the highest FNV-1a 32 of
    session_id NUL key, equal scores to the smallest key."""
    return min(keys, key=lambda k: (-fnv1a32(f"{session_id}\0{k}".encode()), k))


def wait_for(predicate, timeout_s=15.0, step_s=0.05):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step_s)
    return bool(predicate())
