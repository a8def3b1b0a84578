"""_transport.py: endpoints, fleets and one request/reply exchange over nng.

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
import ctypes
import ipaddress
import socket
import threading
import time
import weakref
from collections import OrderedDict
from ctypes import byref, c_uint32, c_void_p
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Set, Union
from urllib.parse import urlsplit

from . import _nng
from ._nng import lib
from .types import TLS

RECONNECT_MIN_MS = 100
RECONNECT_MAX_MS = 2000
MAX_REMEMBERED_SESSIONS = 4096
PENALTY_S = 1.0  # an endpoint that answered UNAVAILABLE (draining) is skipped this long


class TransportFailure(Exception):
    """An exchange that got no reply. sent: whether the request left this
    client (handed to a connection); errno: nng's error number."""

    def __init__(self, sent: bool, errno: int):
        super().__init__(_nng.strerror(errno))
        self.sent = sent
        self.errno = errno


# ---- one exchange ----

class Exchange:
    """One request and its reply on a fresh nng context of a socket. The
    caller starts each phase and waits for notify() (called on an nng
    thread) before looking at the result."""

    def __init__(self, sock: int, data: bytes, timeout_ms: int, notify: Callable[[], None]):
        self._timeout_ms = max(1, min(int(timeout_ms), 2**31 - 1))
        self._phase = "new"
        self._msg: Optional[int] = None
        ctx = c_uint32()
        rv = lib.nng_ctx_open(byref(ctx), sock)
        if rv != 0:
            raise TransportFailure(False, rv)
        self._ctx = ctx.value
        # Inherited from the socket already; set again so that no context
        # could ever resend (a resent request runs the code twice).
        lib.nng_ctx_set_ms(self._ctx, _nng.OPT_REQ_RESENDTIME, _nng.DURATION_INFINITE)
        try:
            self._aio, self._key = _nng.aio_alloc(notify)
        except _nng.NngError as e:
            lib.nng_ctx_close(self._ctx)
            raise TransportFailure(False, e.errno) from None
        msg = c_void_p()
        rv = lib.nng_msg_alloc(byref(msg), len(data))
        if rv != 0:
            self.close()
            raise TransportFailure(False, rv)
        self._msg = msg.value
        ctypes.memmove(lib.nng_msg_body(self._msg), data, len(data))

    def start_send(self) -> None:
        lib.nng_aio_set_timeout(self._aio, self._timeout_ms)
        lib.nng_aio_set_msg(self._aio, self._msg)
        self._phase = "send"
        lib.nng_ctx_send(self._ctx, self._aio)

    def send_result(self) -> int:
        """After the send completed: 0 when the request was handed to a
        connection (it left), else nng's error (it did not leave)."""
        rv = lib.nng_aio_result(self._aio)
        if rv == 0:
            self._msg = None  # nng owns it now
        return rv

    def start_recv(self) -> None:
        lib.nng_aio_set_timeout(self._aio, self._timeout_ms)
        self._phase = "recv"
        lib.nng_ctx_recv(self._ctx, self._aio)

    def recv_result(self) -> int:
        return lib.nng_aio_result(self._aio)

    def take_reply(self) -> bytes:
        msg = lib.nng_aio_get_msg(self._aio)
        try:
            return ctypes.string_at(lib.nng_msg_body(msg), lib.nng_msg_len(msg))
        finally:
            lib.nng_msg_free(msg)
            self._phase = "done"

    def close(self) -> None:
        """Frees everything, whatever phase the exchange is in (a caller
        that gave up waiting: cancelled, interrupted)."""
        lib.nng_aio_stop(self._aio)  # waits for a callback in progress
        rv = lib.nng_aio_result(self._aio)
        if self._phase == "recv" and rv == 0:
            lib.nng_msg_free(lib.nng_aio_get_msg(self._aio))
        _nng.aio_free(self._aio, self._key)
        if self._msg is not None:  # never handed to nng, or handed back on failure
            lib.nng_msg_free(self._msg)
            self._msg = None
        lib.nng_ctx_close(self._ctx)


def exchange_blocking(sock: int, data: bytes, timeout_ms: int) -> bytes:
    """Sends data and returns the reply's bytes; raises TransportFailure.
    Waits on an Event, not in nng, so Ctrl-C interrupts it."""
    done = threading.Event()
    ex = Exchange(sock, data, timeout_ms, done.set)
    try:
        ex.start_send()
        done.wait()
        rv = ex.send_result()
        if rv != 0:
            raise TransportFailure(False, rv)
        done.clear()
        ex.start_recv()
        done.wait()
        rv = ex.recv_result()
        if rv != 0:
            raise TransportFailure(True, rv)
        return ex.take_reply()
    finally:
        ex.close()


async def exchange_async(sock: int, data: bytes, timeout_ms: int) -> bytes:
    """exchange_blocking for asyncio: nng's completion callback wakes the
    loop with call_soon_threadsafe; no thread per call."""
    import asyncio
    loop = asyncio.get_running_loop()
    waiter: List[Optional[asyncio.Future]] = [None]

    def wake() -> None:  # on the loop
        fut = waiter[0]
        if fut is not None and not fut.done():
            fut.set_result(None)

    ex = Exchange(sock, data, timeout_ms, lambda: loop.call_soon_threadsafe(wake))
    try:
        waiter[0] = loop.create_future()
        ex.start_send()
        await waiter[0]
        rv = ex.send_result()
        if rv != 0:
            raise TransportFailure(False, rv)
        waiter[0] = loop.create_future()
        ex.start_recv()
        await waiter[0]
        rv = ex.recv_result()
        if rv != 0:
            raise TransportFailure(True, rv)
        return ex.take_reply()
    finally:
        ex.close()


# ---- endpoints ----

@dataclass
class Target:
    """One URL the caller gave. kind "fixed": an ipc path or an IP literal,
    one address; "name": a host name, resolved to its addresses."""
    url: str
    scheme: str
    host: str
    port: int
    kind: str
    addresses: List[str] = field(default_factory=list)
    resolve_error: str = ""
    next_resolve: float = 0.0


def parse_target(url: str, tls: Optional[TLS]) -> Target:
    if not isinstance(url, str):
        raise TypeError(f"endpoint: a URL str, not {type(url).__name__}")
    if url.startswith("ipc://"):
        if tls is not None:
            raise ValueError(f"endpoint {url}: tls= applies to tls+tcp:// endpoints only")
        return Target(url, "ipc", "", 0, "fixed", addresses=[url])
    parts = urlsplit(url)
    if parts.scheme not in ("tcp", "tls+tcp"):
        raise ValueError(f"endpoint {url!r}: tcp://, tls+tcp:// or ipc:// only")
    if (parts.scheme == "tls+tcp") != (tls is not None):
        raise ValueError(f"endpoint {url}: tls+tcp:// endpoints need tls=sandboxd.TLS(...), and "
                         "tls= needs tls+tcp:// endpoints")
    if parts.path not in ("", "/") or parts.query or not parts.hostname:
        raise ValueError(f"endpoint {url!r}: expected {parts.scheme}://HOST:PORT")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not port:
        raise ValueError(f"endpoint {url!r}: no port")
    host = parts.hostname
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return Target(url, parts.scheme, host, port, "name")
    return Target(url, parts.scheme, host, port, "fixed",
                  addresses=[address_url(parts.scheme, str(ip), port)])


def address_url(scheme: str, ip: str, port: int) -> str:
    return f"{scheme}://[{ip}]:{port}" if ":" in ip else f"{scheme}://{ip}:{port}"


def resolve(target: Target) -> List[str]:
    """The target's addresses now, in the resolver's order, without duplicates."""
    infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    return addresses_from(target, infos)


def addresses_from(target: Target, infos: Iterable) -> List[str]:
    out: List[str] = []
    for family, _, _, _, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        url = address_url(target.scheme, sockaddr[0], target.port)
        if url not in out:
            out.append(url)
    return out


def fnv1a32(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def session_score(session_id: str, key: str) -> int:
    """The rendezvous score of an endpoint for a session, the same in every
    client (C, Python, TypeScript; docs/CLIENTS.md): FNV-1a 32 over
    session_id, a NUL byte and the endpoint's key. The highest score holds
    the session; ties go to the smallest key."""
    return fnv1a32(f"{session_id}\0{key}".encode())


def _read_pem(what: str, path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(4 << 20)
    except OSError as e:
        raise ValueError(f"tls: {what} {path}: {e.strerror}") from None


class TLSConfig:
    """One nng TLS client configuration: the CA, this client's certificate
    and the server name to check. One per server name, not one per client:
    in nng 1.5.2 the name lives in the configuration, and the dialer option
    tls-server-name writes into the configuration the dialer holds, so
    dialers sharing one would overwrite each other's name (and race a
    handshake reading it)."""

    def __init__(self, tls: TLS, server_name: str):
        cfg = c_void_p()
        rv = lib.nng_tls_config_alloc(byref(cfg), _nng.TLS_MODE_CLIENT)
        if rv == _nng.ENOTSUP:
            raise RuntimeError("tls: this libnng was built without TLS support "
                               "(nng_tls_config_alloc: Not supported); Debian's libnng1 has it")
        _nng.check(rv, "tls: nng_tls_config_alloc")
        self.ptr = cfg.value
        try:
            self._load(tls)
            _nng.check(lib.nng_tls_config_server_name(self.ptr, server_name.encode()),
                       f"tls: server name {server_name}")
        except Exception:
            self.free()
            raise
        self.server_name = server_name

    def _load(self, tls: TLS) -> None:
        if tls.ca_file:
            _nng.check(lib.nng_tls_config_ca_file(self.ptr, tls.ca_file.encode()),
                       f"tls: ca_file {tls.ca_file}")
        password = tls.key_password.encode() if tls.key_password else None
        if tls.cert_key_file:
            _nng.check(lib.nng_tls_config_cert_key_file(self.ptr, tls.cert_key_file.encode(),
                                                        password),
                       f"tls: cert_key_file {tls.cert_key_file}")
        if tls.cert_file:
            cert = _read_pem("cert_file", tls.cert_file)
            key = _read_pem("key_file", tls.key_file)
            _nng.check(lib.nng_tls_config_own_cert(self.ptr, cert, key, password),
                       f"tls: cert_file {tls.cert_file}, key_file {tls.key_file}")
        mode = _nng.TLS_AUTH_MODE_REQUIRED if tls.verify else _nng.TLS_AUTH_MODE_NONE
        _nng.check(lib.nng_tls_config_auth_mode(self.ptr, mode), "tls: auth mode")

    def free(self) -> None:
        if self.ptr:
            lib.nng_tls_config_free(self.ptr)
            self.ptr = None


def check_tls(tls: TLS) -> None:
    if tls.verify and not tls.ca_file:
        raise ValueError("tls: verify=True needs ca_file (nng reads no system CA store)")
    if tls.cert_key_file and (tls.cert_file or tls.key_file):
        raise ValueError("tls: give cert_key_file (one file) or cert_file and key_file, not both")
    if bool(tls.cert_file) != bool(tls.key_file):
        raise ValueError("tls: cert_file and key_file go together")


class TLSConfigs:
    """The client's TLS configurations by server name: tls.server_name's
    for every endpoint when set, else each URL's host's. Made when the
    client opens, before any dialer starts, and never changed."""

    def __init__(self, tls: TLS):
        check_tls(tls)
        self.tls = tls
        self.by_name: Dict[str, TLSConfig] = {}

    def for_host(self, host: str) -> TLSConfig:
        name = self.tls.server_name or host
        if name not in self.by_name:
            self.by_name[name] = TLSConfig(self.tls, name)
        return self.by_name[name]

    def free(self) -> None:
        for cfg in self.by_name.values():
            cfg.free()
        self.by_name = {}


# nng's dialer error counters: "auth" (the handshake failed here, or the
# server refused ours with an alert), "other", "disconnect", "proto" (the
# server closed the connection during it). They also count the end of a
# connection that had been made, so "connect" is taken off.
TLS_FAILURE_STATS = ("auth", "other", "disconnect", "proto")


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


def _state(ep: Endpoint, stats: Optional[Dict[str, int]]) -> str:
    """connected, not connected, or for a tls+tcp endpoint why not."""
    if ep.live:
        return "connected"
    failed = max(0, sum(stats.get(n, 0) for n in TLS_FAILURE_STATS)
                 - stats.get("connect", 0)) if stats else 0
    if failed:
        return (f"not connected: {failed} TLS handshakes failed: the server's certificate does "
                "not verify against ca_file or does not carry the server name (server_name, "
                "else the URL's host), or the server refused this client's certificate (none, "
                "another CA, expired)")
    if stats and stats.get("refused"):
        return "not connected: connection refused"
    return "not connected"


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
            parts += [f"{ep.address} ({_state(ep, stats.get(ep.address))})"
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
