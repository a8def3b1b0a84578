"""_fleet.py: the endpoints of one client, which are connected, and where
calls go.

One REQ socket per server address, so the client always knows where a call
went (at-most-once across a fleet: a call that may have run on one server is
never sent to another). Each socket has one dialer, which nng reconnects by
itself; pipe events tell which sockets are connected now, and calls go
round-robin over those. A tcp:// host name counts as one endpoint per
address it resolves to (a Kubernetes headless Service), resolved again every
resolve_interval_s; an address that disappears is retired, and its socket
closed once no call is in flight on it.

No thread of its own: nng's threads run the callbacks, and resolution
happens on the calling thread (the async client hands it to the loop's
executor). Never call into nng while holding Fleet._cond: nng_close waits for
pipe callbacks, which take it.
"""
from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections import OrderedDict
from ctypes import byref, c_uint32
from typing import Dict, List, Optional, Sequence, Set, Union

from . import _nng
from ._endpoint import Target, parse_target, resolve, session_score
from ._nng import lib
from ._tls import TLS_FAILURE_STATS, TLSConfig, TLSConfigs, endpoint_state
from .types import TLS

RECONNECT_MIN_MS = 100
RECONNECT_MAX_MS = 2000
MAX_REMEMBERED_SESSIONS = 4096
PENALTY_S = 1.0  # an endpoint that answered UNAVAILABLE (draining) is skipped this long


class Endpoint:
    """One server address: its own REQ socket and dialer."""

    def __init__(self, address: str, fleet: "Fleet", tls_config: Optional[TLSConfig] = None):
        self.address = address
        self.tls = tls_config is not None
        self.dialer = 0  # its statistics say why a tls+tcp one does not connect
        self.pipes: Set[int] = set()
        self.in_flight = 0
        self.retired = False
        self.penalty_until = 0.0
        # The server's --max-message-bytes from GetInfo: None not asked yet,
        # 0 unknown (GetInfo failed: the request decides).
        self.max_message_bytes: Optional[int] = None
        self._fleet = weakref.ref(fleet)
        self.sock = _nng.req_socket(self._on_pipe)
        try:
            self._dial(tls_config)
        except _nng.NngError:
            _nng.close_socket(self.sock)
            raise

    def _dial(self, tls_config: Optional[TLSConfig]) -> None:
        dialer = c_uint32()
        _nng.check(lib.nng_dialer_create(byref(dialer), self.sock, self.address.encode()),
                   f"dialer for {self.address}")
        self.dialer = dialer.value
        lib.nng_dialer_set_ms(dialer.value, _nng.OPT_RECONNMINT, RECONNECT_MIN_MS)
        lib.nng_dialer_set_ms(dialer.value, _nng.OPT_RECONNMAXT, RECONNECT_MAX_MS)
        if tls_config is not None:
            # The configuration carries the server name (TLSConfigs); the
            # dialer only holds it.
            _nng.check(lib.nng_dialer_set_ptr(dialer.value, _nng.OPT_TLS_CONFIG, tls_config.ptr),
                       f"tls config for {self.address}")
        # Non-blocking: a server that is down now is dialed again and again.
        _nng.check(lib.nng_dialer_start(dialer.value, _nng.FLAG_NONBLOCK),
                   f"dialing {self.address}")

    def _on_pipe(self, pipe: int, event: int) -> None:  # on an nng thread
        fleet = self._fleet()
        if fleet is not None:
            fleet.pipe_event(self, pipe, event)

    @property
    def live(self) -> bool:
        return bool(self.pipes)


_open_fleets: "weakref.WeakSet[Fleet]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """Closes every socket before the interpreter goes away, so that no nng
    thread calls back into a finalizing interpreter."""
    for fleet in list(_open_fleets):
        fleet.close()


class Fleet:
    """The endpoints of one client, which are live, and where calls go."""

    def __init__(self, urls: Union[str, Sequence[str]], tls: Optional[TLS],
                 resolve_interval_s: float):
        if isinstance(urls, str):
            urls = [urls]
        urls = list(urls)
        if not urls:
            raise ValueError("endpoints: at least one URL")
        self._cond = threading.Condition()
        self._targets = [parse_target(u, tls) for u in urls]
        self._interval = resolve_interval_s
        self._active: Dict[str, Endpoint] = {}
        self._retired: List[Endpoint] = []  # gone from DNS, calls still in flight
        self._rr = 0
        self._sessions: "OrderedDict[str, str]" = OrderedDict()
        self._closed = False
        self.tls_configs = TLSConfigs(tls) if tls is not None else None
        self._tls: Dict[str, TLSConfig] = {}  # a tls+tcp target's URL -> its configuration
        if self.tls_configs is not None:
            try:  # every configuration before any dialer: a bad file fails here
                self._tls = {t.url: self.tls_configs.for_host(t.host) for t in self._targets}
            except Exception:
                self.tls_configs.free()
                raise
        _open_fleets.add(self)
        for t in self._targets:
            if t.kind == "name":
                self.apply_resolution(t, *self.resolve_now(t))
            else:
                self._set_addresses(t, t.addresses)

    # -- resolution --

    @staticmethod
    def resolve_now(target: Target):
        try:
            return resolve(target), ""
        except OSError as e:
            return None, str(e)

    def due_targets(self) -> List[Target]:
        """Host names whose addresses are due for another look; each is
        handed to one caller only."""
        now = time.monotonic()
        with self._cond:
            due = [t for t in self._targets if t.kind == "name" and t.next_resolve <= now]
            for t in due:
                t.next_resolve = now + self._interval
        return due

    def apply_resolution(self, target: Target, addresses: Optional[List[str]],
                         error: str = "") -> None:
        """New addresses for a host name. A failed lookup keeps the old ones
        (a resolver hiccup must not empty the fleet)."""
        with self._cond:
            target.next_resolve = time.monotonic() + self._interval
            target.resolve_error = error
        if addresses is not None:
            self._set_addresses(target, addresses)

    def _set_addresses(self, target: Target, addresses: List[str]) -> None:
        with self._cond:
            target.addresses = list(addresses)
            wanted = {a: t for t in self._targets for a in t.addresses}
            added = [a for a in wanted if a not in self._active]
            removed = [ep for a, ep in self._active.items() if a not in wanted]
        created = []
        for address in added:
            try:
                created.append(Endpoint(address, self, self._tls.get(wanted[address].url)))
            except _nng.NngError as e:
                if target.kind == "fixed":
                    raise ValueError(f"endpoint {target.url}: {e}") from None
                with self._cond:  # an address nng will not dial: reported, not fatal
                    target.resolve_error = f"{address}: {e}"
        to_close = []
        with self._cond:
            for ep in created:
                if self._closed or ep.address in self._active:
                    to_close.append(ep)
                else:
                    self._active[ep.address] = ep
            for ep in removed:
                if self._active.get(ep.address) is ep:
                    del self._active[ep.address]
                    ep.retired = True
                    if ep.in_flight == 0:
                        to_close.append(ep)
                    else:
                        self._retired.append(ep)
            self._cond.notify_all()
        for ep in to_close:
            _nng.close_socket(ep.sock)

    # -- liveness (pipe events arrive on nng threads) --

    def pipe_event(self, ep: Endpoint, pipe: int, event: int) -> None:
        with self._cond:
            if event == _nng.PIPE_EV_ADD_POST:
                ep.pipes.add(pipe)
            elif event == _nng.PIPE_EV_REM_POST:
                ep.pipes.discard(pipe)
            self._cond.notify_all()

    def has_live(self, ep: Optional[Endpoint] = None, pinned: bool = False) -> bool:
        with self._cond:
            return self._closed or self._live_locked(ep, pinned)

    def _live_locked(self, ep: Optional[Endpoint], pinned: bool = False) -> bool:
        # pinned: a run lives on ep (WatchRun, CancelRun), so it is the one
        # endpoint to use even when it has left the fleet (retired).
        if ep is not None:
            return ep.live and (pinned or not ep.retired)
        return any(e.live for e in self._active.values())

    def wait_live(self, ep: Optional[Endpoint], timeout_s: float, pinned: bool = False) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._closed or self._live_locked(ep, pinned),
                                       timeout_s)

    def find(self, address: str) -> Optional[Endpoint]:
        """The endpoint of a server address, retired ones whose socket is
        still open included; None when the client has none."""
        with self._cond:
            ep = self._active.get(address)
            if ep is None:
                ep = next((e for e in self._retired if e.address == address), None)
            return ep

    def only_endpoint(self) -> Optional[Endpoint]:
        with self._cond:
            eps = list(self._active.values())
            return eps[0] if len(eps) == 1 else None

    # -- choosing --

    def pick(self, avoid: Set[str]) -> Optional[Endpoint]:
        """Round-robin over connected endpoints, preferring those not yet
        tried by this call and not draining."""
        now = time.monotonic()
        with self._cond:
            live = [ep for ep in self._active.values() if ep.live]
            for pool in ([e for e in live if e.address not in avoid and e.penalty_until <= now],
                         [e for e in live if e.address not in avoid],
                         [e for e in live if e.penalty_until <= now], live):
                if pool:
                    self._rr += 1
                    return pool[self._rr % len(pool)]
        return None

    def untried_live(self, avoid: Set[str]) -> bool:
        with self._cond:
            return any(e.live and e.address not in avoid for e in self._active.values())

    def session_home(self, session_id: str) -> Optional[Endpoint]:
        """The endpoint holding a session: where this client last ran it, or
        else rendezvous hashing over the fleet's endpoints (connected or
        not), the same in every process that sees the same fleet."""
        with self._cond:
            address = self._sessions.get(session_id)
            if address in self._active:
                self._sessions.move_to_end(session_id)
                return self._active[address]
            if not self._active:
                return None
            return min(self._active.values(),
                       key=lambda e: (-session_score(session_id, e.address), e.address))

    def remember_session(self, session_id: str, ep: Endpoint) -> None:
        with self._cond:
            self._sessions[session_id] = ep.address
            self._sessions.move_to_end(session_id)
            while len(self._sessions) > MAX_REMEMBERED_SESSIONS:
                self._sessions.popitem(last=False)

    def forget_session(self, session_id: str) -> None:
        with self._cond:
            self._sessions.pop(session_id, None)

    def penalize(self, ep: Endpoint) -> None:
        with self._cond:
            ep.penalty_until = time.monotonic() + PENALTY_S

    # -- calls in flight (a retired endpoint closes after its last call; a
    # stream holds one for its whole life, so its endpoint's socket stays
    # open for its watches and cancel) --

    def acquire(self, ep: Endpoint) -> None:
        with self._cond:
            ep.in_flight += 1

    def release(self, ep: Endpoint) -> None:
        with self._cond:
            ep.in_flight -= 1
            close = ep.retired and ep.in_flight == 0 and ep in self._retired
            if close:
                self._retired.remove(ep)
        if close:
            _nng.close_socket(ep.sock)

    # -- reporting --

    def describe(self) -> str:
        """What the fleet looks like, for an error saying no endpoint is
        connected; for a tls+tcp one that is not, why (nng's statistics,
        read without the lock)."""
        with self._cond:
            dialers = {a: ep.dialer for a, ep in self._active.items() if ep.tls and not ep.live}
        stats = (_nng.dialer_stats(dialers, TLS_FAILURE_STATS + ("refused", "connect"))
                 if dialers else {})
        with self._cond:
            parts = []
            for t in self._targets:
                if t.kind == "name" and not t.addresses:
                    parts.append(f"{t.url} (no address: {t.resolve_error or 'not resolved'})")
            parts += [f"{ep.address} ({endpoint_state(ep.live, stats.get(ep.address))})"
                      for ep in self._active.values()]
        return ", ".join(parts) or "no endpoint"

    def endpoints(self) -> Dict[str, bool]:
        with self._cond:
            return {a: ep.live for a, ep in self._active.items()}

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            eps = list(self._active.values()) + self._retired
            self._retired = []
            self._cond.notify_all()
        for ep in eps:
            _nng.close_socket(ep.sock)
        if self.tls_configs is not None:
            self.tls_configs.free()  # each dialer held its own reference
        _open_fleets.discard(self)
