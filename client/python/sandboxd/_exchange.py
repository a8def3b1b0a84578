"""_exchange.py: one request and its reply over a fresh nng context.

Exchange owns the context, the aio and the message for one call;
exchange_blocking and exchange_async drive the same phases (_phases): send,
then receive, waiting between them on a threading.Event or on an asyncio
future woken from nng's callback. A request is sent once: resend is off on
every context, so a request that may have run is never sent again here.

Never look at an aio's result before notify() was called for that phase, and
never free a message nng owns (after a send that succeeded).
"""
from __future__ import annotations

import asyncio
import ctypes
import threading
from ctypes import byref, c_uint32, c_void_p
from typing import Callable, Generator, List, Optional

from . import _nng
from ._nng import lib


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


def _phases(ex: Exchange) -> Generator[None, None, bytes]:
    """The phases of one exchange: yields after starting each (the driver
    waits for notify() before resuming); returns the reply's bytes, raises
    TransportFailure (sent: whether the request left)."""
    ex.start_send()
    yield
    rv = ex.send_result()
    if rv != 0:
        raise TransportFailure(False, rv)
    ex.start_recv()
    yield
    rv = ex.recv_result()
    if rv != 0:
        raise TransportFailure(True, rv)
    return ex.take_reply()


def exchange_blocking(sock: int, data: bytes, timeout_ms: int) -> bytes:
    """Sends data and returns the reply's bytes; raises TransportFailure.
    Waits on an Event, not in nng, so Ctrl-C interrupts it."""
    done = threading.Event()
    ex = Exchange(sock, data, timeout_ms, done.set)
    try:
        phases = _phases(ex)
        while True:
            try:
                next(phases)
            except StopIteration as stop:
                return stop.value
            done.wait()
            done.clear()
    finally:
        ex.close()


async def exchange_async(sock: int, data: bytes, timeout_ms: int) -> bytes:
    """exchange_blocking for asyncio: nng's completion callback wakes the
    loop with call_soon_threadsafe; no thread per call."""
    loop = asyncio.get_running_loop()
    waiter: List[Optional[asyncio.Future]] = [None]

    def wake() -> None:  # on the loop
        fut = waiter[0]
        if fut is not None and not fut.done():
            fut.set_result(None)

    ex = Exchange(sock, data, timeout_ms, lambda: loop.call_soon_threadsafe(wake))
    try:
        phases = _phases(ex)
        while True:
            waiter[0] = loop.create_future()  # before the phase starts: wake() needs it
            try:
                next(phases)
            except StopIteration as stop:
                return stop.value
            await waiter[0]
    finally:
        ex.close()
