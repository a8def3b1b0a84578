"""client.py: the blocking client. Drives _core's call steps with blocking
waits; safe to share between threads (each call has its own nng context).
The rules every call follows are in _core.py."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Optional, Union

from . import _core
from ._exchange import TransportFailure, exchange_blocking
from ._fleet import Fleet
from .stream import RunStream
from .types import (FileContent, FileList, Health, RunArgs, RunResult, RunUpdate, ServerInfo,
                    StartedRun)

if TYPE_CHECKING:  # PEP 692: typing.Unpack from Python 3.11, typing_extensions before
    from typing_extensions import Unpack


class Client(_core.ClientBase):
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
    the largest request this client sends. api_key: the key every call
    carries for a server with --tenants (default: $SANDBOX_API_KEY, which
    ps does not show; "" sends none); at most 512 bytes of printable ASCII
    without spaces, else ValueError here. Neither repr() nor str() of the
    client shows it. A wrong or missing key is Unauthenticated (nothing
    ran, never retried).
    """

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
            return fleet.wait_live(step.endpoint, step.timeout_s, step.pinned)
        if isinstance(step, _core.Sleep):
            time.sleep(step.seconds)
            return None
        if isinstance(step, _core.Resolve):
            return [Fleet.resolve_now(t) for t in step.targets]
        raise TypeError(f"unknown step {step!r}")

    # ---- the methods ----

    def run_code(self, code: str, **kw: Unpack[RunArgs]) -> RunResult:
        """Runs code (as /workspace/main.py). files: {path: bytes | str |
        FileURL}, written under /workspace/mounts/. Returns the RunResult of
        a run that happened; raises a SandboxError subclass otherwise."""
        return self._drive(self._core.run_code(code, **kw))

    # ---- streaming and cancel (docs/STREAMING.md) ----

    def stream(self, code: str, **kw: Unpack[RunArgs]) -> RunStream:
        """Starts code as run_code would (StartRun: refused with the same
        exceptions) and returns a RunStream of its output as it arrives:

            with client.stream(code) as s:
                for chunk in s:
                    print(chunk.text, end="")
            print(s.result.exit_code)

        Leaving the with block before the end cancels the run."""
        req = self._core.start_request(code, **kw)
        started, ep = self._drive(self._core.start_run(req))
        return RunStream(self, started, ep)

    def start_run(self, code: str, **kw: Unpack[RunArgs]) -> StartedRun:
        """StartRun alone: returns StartedRun(run_id, endpoint) as soon as
        the server has queued the run. Watch and cancel it with watch_run
        and cancel_run (they go to that endpoint)."""
        req = self._core.start_request(code, **kw)
        return self._drive(self._core.start_run(req))[0]

    def watch_run(self, run: Union[StartedRun, str], stdout_offset: int = 0,
                  stderr_offset: int = 0, wait_ms: int = _core.WATCH_WAIT_MS, *,
                  endpoint: Optional[str] = None) -> RunUpdate:
        """One WatchRun: the output past the offsets, once there is some,
        the run has ended, or wait_ms (0 to 60000) passed. run: a
        StartedRun, or a run id with endpoint= the server address it lives
        on (not needed when the client has one endpoint). A complete
        update's outcome is in .result or .error (not raised)."""
        run_id, ep, attempts = self._core.run_endpoint(run, endpoint)
        return self._drive(self._core.watch_run(ep, run_id, stdout_offset, stderr_offset, wait_ms,
                                                attempts))

    def cancel_run(self, run: Union[StartedRun, str], *, endpoint: Optional[str] = None) -> str:
        """CancelRun: returns the run's state ("done") once it has ended. A
        run_code run can be cancelled too, by the run_id it was given."""
        run_id, ep, _ = self._core.run_endpoint(run, endpoint)
        return self._drive(self._core.cancel_run(ep, run_id))

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

    def wait_connected(self, count: int = 1, timeout_s: float = 10.0) -> bool:
        """Waits until at least count endpoints are connected."""
        deadline = time.monotonic() + timeout_s
        while sum(self.endpoints().values()) < count:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
