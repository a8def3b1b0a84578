"""_core.py: the rules of a call, written once for both clients.

Each method is a generator that yields what it needs done (resolve host
names, wait for a connection, exchange bytes with one endpoint, sleep) and
receives the outcome; Client drives it with blocking calls, AsyncClient with
awaits. So the at-most-once rules below cannot drift between the two:

- resend is off (_nng.req_socket) and nothing is ever sent twice unless a
  server answered RESOURCE_EXHAUSTED or UNAVAILABLE, which prove nothing ran;
  those are retried with exponential backoff and jitter (50 ms doubling to
  2 s, as the C client), on another endpoint when there is one;
- a request that left and got no reply in time is DeadlineExceeded, one
  whose connection broke is Unknown: both may have run, neither is retried,
  here or on another server;
- a request that never left (no endpoint connected, an oversized request)
  fails with nothing_ran=True and is not retried either;
- before the first request over 4 KiB to an endpoint, that server's
  --max-message-bytes is asked once with GetInfo: nng would drop a larger
  message with its connection, and the caller would see only a timeout;
- streaming (docs/STREAMING.md): StartRun chooses its endpoint as every call
  does; WatchRun and CancelRun go to that same endpoint and nowhere else
  (the run table is per server), retried there only on RESOURCE_EXHAUSTED
  and UNAVAILABLE (a watch or a cancel runs nothing), and a watch waits for
  its reply wait_ms plus REPLY_MARGIN_MS.
"""
from __future__ import annotations

import contextlib
import random
import uuid
from dataclasses import dataclass
from typing import Dict, Generator, List, Optional, Sequence, Set, Tuple, Union

from . import _nng, _wire, errors
from ._credential import Credential, credential_from
from . import sandbox_pb2 as pb
from .errors import RETRIABLE_STATUSES, Code
from ._endpoint import Target
from ._exchange import TransportFailure
from ._fleet import Endpoint, Fleet
from .types import TLS, StartedRun

REPLY_MARGIN_MS = 5000
SMALLEST_SERVER_CAP = 4096
DEFAULT_MAX_REQUEST_BYTES = 8 << 20
# How long a call waits for a connected endpoint: the same default in every
# sandboxd client (docs/CLIENTS.md, "The connect timeout").
DEFAULT_CONNECT_TIMEOUT_S = 5.0
WATCH_WAIT_MS = 10_000  # a stream's long poll (the server takes up to 60000)
MAX_WATCH_WAIT_MS = 60_000


@dataclass
class Options:
    retries: int
    queue_wait_ms: int
    timeout_ms: Optional[int]
    connect_timeout_s: float
    max_request_bytes: int


# What a call asks its driver to do.
@dataclass
class Resolve:
    targets: List[Target]


@dataclass
class WaitLive:
    endpoint: Optional[Endpoint]  # None: any endpoint
    timeout_s: float
    pinned: bool = False  # a run lives there: wait for it even if it left the fleet


@dataclass
class Exchange:
    endpoint: Endpoint
    data: bytes
    timeout_ms: int


@dataclass
class Sleep:
    seconds: float


Steps = Generator[object, object, object]


def backoff_s(attempt: int) -> float:
    """50 ms, 100 ms, 200 ms, ... up to 2 s, plus up to 50% jitter."""
    ms = min(50 << min(attempt, 6), 2000)
    return (ms + random.uniform(0, ms / 2)) / 1000


class Core:
    """Shared state of a client: its fleet and options."""

    def __init__(self, endpoints, *, timeout_s, retries, tls, queue_wait_s, connect_timeout_s,
                 resolve_interval_s, max_request_bytes, credential: Credential):
        if retries < 0:
            raise ValueError("retries: 0 or more")
        # One per client, for its life: its session pins (the fleet's) are
        # its tenant's alone (docs/CLIENTS.md, "API keys").
        self.credential = credential
        self.opts = Options(retries=retries, queue_wait_ms=int(queue_wait_s * 1000),
                            timeout_ms=None if timeout_s is None else int(timeout_s * 1000),
                            connect_timeout_s=connect_timeout_s,
                            max_request_bytes=max_request_bytes)
        self.fleet = Fleet(endpoints, tls, resolve_interval_s)

    def _envelope(self, method: str, rid: str, queue_ms: int, payload: bytes) -> bytes:
        """Every request's envelope: the deadline, and the client's key."""
        return _wire.envelope(method, rid, _wire.now_unix_ms() + queue_ms, payload,
                              self.credential.key)

    # ---- one call, with retries ----

    def _choose(self, session_id: Optional[str], avoid: Set[str], attempts: int) -> Steps:
        """The endpoint for the next attempt: the session's home, or a live
        one round-robin; waits up to connect_timeout_s for a connection."""
        fleet = self.fleet
        due = fleet.due_targets()
        if due:
            for target, (addresses, error) in zip(due, (yield Resolve(due))):
                fleet.apply_resolution(target, addresses, error)
        for waited in (False, True):
            if fleet.closed:
                raise errors.Cancelled("the client is closed; nothing was sent",
                                       nothing_ran=True, attempts=attempts)
            if session_id:
                ep = fleet.session_home(session_id)
                if ep is not None and fleet.has_live(ep):
                    return ep
            else:
                ep = fleet.pick(avoid)
                if ep is not None:
                    return ep
            if not waited and (not session_id or ep is not None):
                yield WaitLive(ep if session_id else None, self.opts.connect_timeout_s)
        where = f"session {session_id!r} lives on {ep.address}, " if session_id and ep else ""
        raise errors.Unavailable(
            f"{where}no endpoint connected within {self.opts.connect_timeout_s:g} s: "
            f"{fleet.describe()}; nothing was sent", nothing_ran=True, attempts=attempts)

    def _budget(self, run_timeout_ms: int) -> Tuple[int, int]:
        """(how long the call may wait in a server's queue, how long to wait
        for the reply): the queue budget plus the run's own time plus a
        margin, as the C client, unless timeout_s bounds both."""
        o = self.opts
        if o.timeout_ms is not None:
            return min(o.queue_wait_ms, o.timeout_ms), o.timeout_ms
        return o.queue_wait_ms, o.queue_wait_ms + run_timeout_ms + REPLY_MARGIN_MS

    def _server_cap(self, ep: Endpoint) -> Steps:
        """The endpoint's --max-message-bytes, asked once (0 = unknown)."""
        if ep.max_message_bytes is None:
            queue_ms, reply_ms = self._budget(0)
            rid = _wire.new_request_id()
            data = self._envelope(_wire.GET_INFO, rid, queue_ms, b"")
            outcome = yield Exchange(ep, data, reply_ms)
            cap = 0
            if isinstance(outcome, bytes):
                try:
                    reply = _wire.decode_reply(outcome, rid, ep.address, 1)
                    if reply.status == 0:
                        info = _wire.parse_payload(pb.GetInfoResponse, reply, ep.address, 1)
                        if info.max_message_bytes >= SMALLEST_SERVER_CAP:
                            cap = info.max_message_bytes
                except errors.SandboxError:
                    pass  # an older or failing server: the request decides
            ep.max_message_bytes = cap
        return ep.max_message_bytes

    def _check_size(self, ep: Endpoint, method: str, size: int, attempts: int) -> Steps:
        if size > self.opts.max_request_bytes:
            raise errors.InvalidArgument(
                f"the request is {size} bytes, more than this client's cap of "
                f"{self.opts.max_request_bytes} (max_request_bytes; the server's default "
                "--max-message-bytes); nothing was sent", nothing_ran=True, attempts=attempts)
        if size > SMALLEST_SERVER_CAP and method != _wire.GET_INFO:
            cap = yield from self._server_cap(ep)
            if cap and size > cap:
                raise errors.InvalidArgument(
                    f"the request is {size} bytes, more than the {cap} the server accepts (its "
                    "--max-message-bytes, from GetInfo); nothing was sent", nothing_ran=True,
                    endpoint=ep.address, attempts=attempts)

    def call(self, method: str, payload: bytes, run_timeout_ms: int = 0, *,
             session_id: Optional[str] = None, run_id: str = "") -> Steps:
        """Calls method; returns (Reply, endpoint, attempts) for any status a
        server answered (retriable ones once retries are used up), or raises
        for an outcome no server answered."""
        avoid: Set[str] = set()
        for attempt in range(self.opts.retries + 1):
            ep = yield from self._choose(session_id, avoid, attempt)
            queue_ms, reply_ms = self._budget(run_timeout_ms)
            rid = _wire.new_request_id()
            data = self._envelope(method, rid, queue_ms, payload)
            yield from self._check_size(ep, method, len(data), attempt)
            outcome = yield Exchange(ep, data, reply_ms)
            if isinstance(outcome, TransportFailure):
                # Closing the client closes its connections first: a call
                # in flight then sees a reset, but the cause was the close.
                closed = self.fleet.closed
                raise transport_error(outcome, ep.address, attempt + 1, run_id, closed)
            reply = _wire.decode_reply(outcome, rid, ep.address, attempt + 1, run_id)
            if reply.status not in RETRIABLE_STATUSES or attempt == self.opts.retries:
                return reply, ep, attempt + 1
            avoid.add(ep.address)
            if reply.status == Code.UNAVAILABLE:
                self.fleet.penalize(ep)
            if session_id or not self.fleet.untried_live(avoid):
                yield Sleep(backoff_s(attempt))
        raise AssertionError("unreachable")

    def call_at(self, ep: Endpoint, method: str, payload: bytes, reply_ms: int, *,
                run_id: str, after: str) -> Steps:
        """Calls method on ep and nowhere else (WatchRun, CancelRun: the run
        lives there); returns (Reply, attempts). RESOURCE_EXHAUSTED and
        UNAVAILABLE are retried there, as neither call runs anything. after:
        what an exchange without a reply leaves the caller knowing."""
        for attempt in range(self.opts.retries + 1):
            if self.fleet.closed:
                raise errors.Cancelled("the client is closed; nothing was sent", nothing_ran=True,
                                       endpoint=ep.address, attempts=attempt, run_id=run_id)
            if not self.fleet.has_live(ep, pinned=True):
                yield WaitLive(ep, self.opts.connect_timeout_s, pinned=True)
                if not self.fleet.has_live(ep, pinned=True):
                    raise errors.Unavailable(
                        f"run {run_id} lives on {ep.address}, not connected within "
                        f"{self.opts.connect_timeout_s:g} s; nothing was sent", nothing_ran=True,
                        endpoint=ep.address, attempts=attempt, run_id=run_id)
            queue_ms, _ = self._budget(0)
            rid = _wire.new_request_id()
            data = self._envelope(method, rid, queue_ms, payload)
            outcome = yield Exchange(ep, data, reply_ms)
            if isinstance(outcome, TransportFailure):
                raise transport_error(outcome, ep.address, attempt + 1, run_id,
                                      self.fleet.closed, after=after)
            reply = _wire.decode_reply(outcome, rid, ep.address, attempt + 1, run_id)
            if reply.status not in RETRIABLE_STATUSES or attempt == self.opts.retries:
                return reply, attempt + 1
            yield Sleep(backoff_s(attempt))
        raise AssertionError("unreachable")

    def _ok_payload(self, message_type, method: str, payload: bytes, run_timeout_ms: int = 0, *,
                    session_id: Optional[str] = None, run_id: str = "") -> Steps:
        reply, ep, attempts = yield from self.call(method, payload, run_timeout_ms,
                                                   session_id=session_id, run_id=run_id)
        return _ok_message(message_type, reply, ep, attempts, run_id), ep, attempts

    # ---- the methods ----

    def run_code(self, code: str, **kw) -> Steps:
        req, limits = _wire.run_code_request(code, **kw)
        if not req.run_id:  # ours, so that an Unknown outcome can name it
            req.run_id = str(uuid.uuid4())
        session = req.session_id or None
        msg, ep, attempts = yield from self._ok_payload(
            pb.RunCodeResponse, _wire.RUN_CODE, req.SerializeToString(),
            _wire.run_timeout_ms(limits), session_id=session, run_id=req.run_id)
        if session:
            self.fleet.remember_session(session, ep)
        return _wire.run_result(msg, ep.address, attempts)

    @staticmethod
    def start_request(code: str, **kw) -> pb.RunCodeRequest:
        """StartRun's request, checked as run_code's. The run id is made
        here when the caller gives none (uuid4: 122 random bits from
        os.urandom, as unguessable as the server's), so that a StartRun
        whose reply was lost can still be named, watched and cancelled."""
        req, _ = _wire.run_code_request(code, **kw)
        if not req.run_id:
            req.run_id = str(uuid.uuid4())
        return req

    def start_run(self, req: pb.RunCodeRequest) -> Steps:
        """StartRun; returns (StartedRun, its Endpoint)."""
        session = req.session_id or None
        msg, ep, attempts = yield from self._ok_payload(
            pb.StartRunResponse, _wire.START_RUN, req.SerializeToString(), session_id=session,
            run_id=req.run_id)
        if session:
            self.fleet.remember_session(session, ep)
        return StartedRun(run_id=msg.run_id or req.run_id, endpoint=ep.address,
                          attempts=attempts), ep

    def run_endpoint(self, run, endpoint: Optional[str]) -> Tuple[str, Endpoint, int]:
        """(run id, the endpoint it lives on, StartRun's attempts) for a
        StartedRun, or a run id str with endpoint= (an address of this
        client's) or a client of one endpoint."""
        if isinstance(run, StartedRun):
            run_id, address, attempts = run.run_id, run.endpoint, run.attempts
            if endpoint is not None and endpoint != address:
                raise ValueError(f"run {run_id} lives on {address}, not {endpoint}")
        elif isinstance(run, str):
            run_id, address, attempts = run, endpoint, 1
        else:
            raise TypeError(f"run: a sandboxd.StartedRun or a run id str, "
                            f"not {type(run).__name__}")
        if address is None:
            ep = self.fleet.only_endpoint()
            if ep is None:
                raise ValueError(f"run {run_id}: this client has several endpoints; say which "
                                 "one the run lives on (endpoint=, the address StartRun went to)")
            return run_id, ep, attempts
        ep = self.fleet.find(address)
        if ep is None:
            raise errors.Unavailable(
                f"run {run_id} lives on {address}, which is not one of this client's endpoints "
                f"(now: {', '.join(self.fleet.endpoints()) or 'none'}); nothing was sent",
                endpoint=address, run_id=run_id)
        return run_id, ep, attempts

    def watch_run(self, ep: Endpoint, run_id: str, stdout_offset: int = 0,
                  stderr_offset: int = 0, wait_ms: int = WATCH_WAIT_MS,
                  start_attempts: int = 1) -> Steps:
        """One WatchRun on ep; returns a RunUpdate (a non-OK outcome in its
        error, not raised). Raises for a status the watch itself got."""
        if not isinstance(wait_ms, int) or not 0 <= wait_ms <= MAX_WATCH_WAIT_MS:
            raise ValueError(f"wait_ms: 0 to {MAX_WATCH_WAIT_MS}, not {wait_ms!r}")
        if stdout_offset < 0 or stderr_offset < 0:
            raise ValueError("stdout_offset and stderr_offset: 0 or more")
        req = pb.WatchRunRequest(run_id=run_id, stdout_offset=stdout_offset,
                                 stderr_offset=stderr_offset, wait_ms=wait_ms)
        with _about_the_call():
            reply, attempts = yield from self.call_at(
                ep, _wire.WATCH_RUN, req.SerializeToString(), wait_ms + REPLY_MARGIN_MS,
                run_id=run_id, after="a watch does not change the run")
            msg = _ok_message(pb.WatchRunResponse, reply, ep, attempts, run_id)
        return _wire.run_update(msg, ep.address, start_attempts, run_id)

    def cancel_run(self, ep: Endpoint, run_id: str) -> Steps:
        """CancelRun on ep; returns the run's state name ("done" once it
        has ended, which is when the server answers)."""
        req = pb.CancelRunRequest(run_id=run_id)
        # The reply comes once the run has ended: a kill is quick, but a run
        # still installing requirements stops at its next step.
        _, reply_ms = self._budget(_wire.run_timeout_ms(None))
        with _about_the_call():
            reply, attempts = yield from self.call_at(
                ep, _wire.CANCEL_RUN, req.SerializeToString(), reply_ms, run_id=run_id,
                after="the run may or may not have been cancelled")
            msg = _ok_message(pb.CancelRunResponse, reply, ep, attempts, run_id)
        return _wire.run_state_name(msg.state)

    def health(self) -> Steps:
        msg, ep, _ = yield from self._ok_payload(pb.HealthResponse, _wire.HEALTH, b"")
        return _wire.health(msg, ep.address)

    def info(self) -> Steps:
        msg, ep, _ = yield from self._ok_payload(pb.GetInfoResponse, _wire.GET_INFO, b"")
        return _wire.server_info(msg, ep.address)

    def close_session(self, session_id: str) -> Steps:
        _check_session_id(session_id)
        req = pb.CloseSessionRequest(session_id=session_id)
        try:
            yield from self._ok_payload(pb.CloseSessionResponse, _wire.CLOSE_SESSION,
                                        req.SerializeToString(), session_id=session_id)
        except errors.NotFound:
            self.fleet.forget_session(session_id)
            raise
        self.fleet.forget_session(session_id)
        return None

    def list_files(self, session_id: str, path: str = "") -> Steps:
        _check_session_id(session_id)
        req = pb.ListFilesRequest(session_id=session_id, path=path)
        msg, _, _ = yield from self._ok_payload(pb.ListFilesResponse, _wire.LIST_FILES,
                                                req.SerializeToString(), session_id=session_id)
        return _wire.file_list(msg)

    def read_file(self, session_id: str, path: str, offset: int = 0, length: int = 0) -> Steps:
        _check_session_id(session_id)
        if offset < 0 or length < 0:
            raise errors.InvalidArgument("offset and length: 0 or more; nothing was sent",
                                         nothing_ran=True)
        req = pb.ReadFileRequest(session_id=session_id, path=path, offset=offset, length=length)
        msg, _, _ = yield from self._ok_payload(pb.ReadFileResponse, _wire.READ_FILE,
                                                req.SerializeToString(), session_id=session_id)
        return _wire.file_content(msg)


def _ok_message(message_type, reply: _wire.Reply, ep: Endpoint, attempts: int, run_id: str):
    """The reply's payload as message_type when its status is OK; else
    raises the status's SandboxError."""
    if reply.status != Code.OK:
        raise errors.from_server(reply.status, reply.message, endpoint=ep.address,
                                 attempts=attempts, run_id=run_id)
    return _wire.parse_payload(message_type, reply, ep.address, attempts, run_id)


class ClientBase:
    """What Client and AsyncClient share: the constructor (its arguments
    are documented on Client) and the fleet's state."""

    def __init__(self, endpoints: Union[str, Sequence[str]], *, timeout_s: Optional[float] = None,
                 retries: int = 3, tls: Optional[TLS] = None, queue_wait_s: float = 30.0,
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 resolve_interval_s: float = 30.0,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                 api_key: Optional[str] = None):
        credential = credential_from(api_key)  # before any socket: a bad key opens nothing
        self._core = Core(endpoints, timeout_s=timeout_s, retries=retries, tls=tls,
                          queue_wait_s=queue_wait_s, connect_timeout_s=connect_timeout_s,
                          resolve_interval_s=resolve_interval_s,
                          max_request_bytes=max_request_bytes, credential=credential)

    def __repr__(self) -> str:
        # The key's presence, never the key.
        core = self.__dict__.get("_core")
        if core is None:
            return f"<{type(self).__name__} (not opened)>"
        key = "set" if core.credential else "none"
        state = "closed" if core.fleet.closed else "open"
        return (f"<{type(self).__name__} {state} endpoints={list(core.fleet.endpoints())} "
                f"api_key={key}>")

    def endpoints(self) -> Dict[str, bool]:
        """Every current endpoint address, and whether it is connected now."""
        return self._core.fleet.endpoints()

    def close(self) -> None:
        """Closes every connection; calls in flight end with Cancelled."""
        self._core.fleet.close()


@contextlib.contextmanager
def _about_the_call():
    """A WatchRun or CancelRun that failed says nothing of whether the run's
    code ran (NOT_FOUND may be a run that ended and expired): nothing_ran is
    False, whatever the status would mean for a RunCode."""
    try:
        yield
    except errors.SandboxError as e:
        e.nothing_ran = False
        raise


def _check_session_id(session_id) -> None:
    if not isinstance(session_id, str):
        raise TypeError(f"session_id: a str, not {type(session_id).__name__}")


def transport_error(f: TransportFailure, endpoint: str, attempts: int, run_id: str,
                    closed: bool = False,
                    after: str = "the code may or may not have run") -> errors.SandboxError:
    """What an exchange without a reply means for the code (after: what it
    means when the request left)."""
    reason = _nng.strerror(f.errno)
    kw = dict(endpoint=endpoint, attempts=attempts, run_id=run_id)
    if not f.sent:
        if f.errno == _nng.ECLOSED or closed:
            return errors.Cancelled("the client was closed; nothing was sent", nothing_ran=True,
                                    **kw)
        return errors.Unavailable(f"sending the request: {reason}; nothing was sent",
                                  nothing_ran=True, **kw)
    if f.errno == _nng.ETIMEDOUT:
        return errors.DeadlineExceeded(f"no reply in time: {reason}; {after}", **kw)
    if f.errno == _nng.ECLOSED or closed:
        return errors.Cancelled(f"the client was closed while waiting for the reply; {after}",
                                **kw)
    return errors.Unknown(f"no reply: {reason}; {after}", **kw)
