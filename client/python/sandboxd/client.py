"""client.py: the blocking client. Drives _core's call steps with blocking
waits; safe to share between threads (each call has its own nng context).
The rules every call follows are in _core.py."""
from __future__ import annotations

import time
from typing import Dict, Mapping, Optional, Sequence, Union

from . import _core
from ._transport import Fleet, TransportFailure, exchange_blocking
from .types import TLS, FileContent, FileList, Health, Limits, RunResult, ServerInfo


class Client:
    """A client of one sandboxd or a fleet of them.

    endpoints: one URL or a list (tcp://HOST:PORT, ipc:///path,
    tls+tcp://HOST:PORT with tls=). A host name counts as one endpoint per
    address it resolves to, looked up again every resolve_interval_s.
    timeout_s: how long to wait for each reply (default: queue_wait_s plus
    the run's timeout plus 5 s, as the C client). retries: how often a call
    answered RESOURCE_EXHAUSTED or UNAVAILABLE is sent again (nothing else
    ever is). queue_wait_s: how long a call may wait in a server's queue
    before it must start (the envelope's deadline). connect_timeout_s: how
    long a call waits for a connection when none is up. max_request_bytes:
    the largest request this client sends.
    """

    def __init__(self, endpoints: Union[str, Sequence[str]], *, timeout_s: Optional[float] = None,
                 retries: int = 3, tls: Optional[TLS] = None, queue_wait_s: float = 30.0,
                 connect_timeout_s: float = 5.0, resolve_interval_s: float = 30.0,
                 max_request_bytes: int = _core.DEFAULT_MAX_REQUEST_BYTES):
        self._core = _core.Core(endpoints, timeout_s=timeout_s, retries=retries, tls=tls,
                                queue_wait_s=queue_wait_s, connect_timeout_s=connect_timeout_s,
                                resolve_interval_s=resolve_interval_s,
                                max_request_bytes=max_request_bytes)

    # ---- the driver ----

    def _drive(self, steps):
        outcome = None
        try:
            while True:
                outcome = self._perform(steps.send(outcome))
        except StopIteration as stop:
            return stop.value

    def _perform(self, step):
        fleet: Fleet = self._core.fleet
        if isinstance(step, _core.Exchange):
            fleet.acquire(step.endpoint)
            try:
                return exchange_blocking(step.endpoint.sock, step.data, step.timeout_ms)
            except TransportFailure as f:
                return f
            finally:
                fleet.release(step.endpoint)
        if isinstance(step, _core.WaitLive):
            return fleet.wait_live(step.endpoint, step.timeout_s)
        if isinstance(step, _core.Sleep):
            time.sleep(step.seconds)
            return None
        if isinstance(step, _core.Resolve):
            return [Fleet.resolve_now(t) for t in step.targets]
        raise TypeError(f"unknown step {step!r}")

    # ---- the methods ----

    def run_code(self, code: str, *, requirements: Sequence[str] = (), files=None,
                 stdin: Union[bytes, str] = b"", args: Sequence[str] = (),
                 env: Optional[Mapping[str, str]] = None, session_id: Optional[str] = None,
                 run_id: Optional[str] = None,
                 limits: Union[Limits, Mapping[str, int], None] = None) -> RunResult:
        """Runs code (as /workspace/main.py). files: {path: bytes | str |
        FileURL}, written under /workspace/mounts/. Returns the RunResult of
        a run that happened; raises a SandboxError subclass otherwise."""
        return self._drive(self._core.run_code(
            code, requirements=requirements, files=files, stdin=stdin, args=args, env=env,
            session_id=session_id, run_id=run_id, limits=limits))

    def health(self) -> Health:
        return self._drive(self._core.health())

    def info(self) -> ServerInfo:
        return self._drive(self._core.info())

    def close_session(self, session_id: str) -> None:
        return self._drive(self._core.close_session(session_id))

    def list_files(self, session_id: str, path: str = "") -> FileList:
        return self._drive(self._core.list_files(session_id, path))

    def read_file(self, session_id: str, path: str, offset: int = 0,
                  length: int = 0) -> FileContent:
        return self._drive(self._core.read_file(session_id, path, offset, length))

    # ---- the fleet ----

    def endpoints(self) -> Dict[str, bool]:
        """Every current endpoint address, and whether it is connected now."""
        return self._core.fleet.endpoints()

    def wait_connected(self, count: int = 1, timeout_s: float = 10.0) -> bool:
        """Waits until at least count endpoints are connected."""
        deadline = time.monotonic() + timeout_s
        while sum(self.endpoints().values()) < count:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def close(self) -> None:
        """Closes every connection; calls in flight end with Cancelled."""
        self._core.fleet.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
