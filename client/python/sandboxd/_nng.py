"""_nng.py: Debian's libnng (libnng1) through ctypes, and nothing else.

Only the calls the client needs: REQ sockets, dialers, contexts, aios,
messages, pipe events and TLS configurations. ctypes needs no compiler on
the user's machine and releases the GIL around every foreign call, so an nng
thread can always take the GIL to run a callback while a Python thread waits
inside nng.

nng's handle types (nng_socket, nng_ctx, nng_dialer, nng_pipe) are structs
holding one uint32_t. They are declared here as c_uint32: a one-integer
struct is passed and returned in an integer register on every ABI Debian
ships (x86-64 SysV, AArch64, ...), exactly like the integer, and ctypes'
struct-by-value support in callbacks is the less tested path.

Never call into nng while holding a Python lock that an nng callback may
need: nng_close waits for pipe callbacks, which would then wait for that
lock.
"""
from __future__ import annotations

import ctypes
import ctypes.util
from ctypes import (CFUNCTYPE, POINTER, byref, c_char_p, c_int, c_int32, c_size_t, c_uint32,
                    c_void_p)
from typing import Callable, Dict, Optional

# nng.h
DURATION_INFINITE = -1
FLAG_NONBLOCK = 2
PIPE_EV_ADD_POST = 1
PIPE_EV_REM_POST = 2
ETIMEDOUT = 5
ECONNREFUSED = 6
ECLOSED = 7
ENOTSUP = 9
ECONNRESET = 19
ECANCELED = 20
ECRYPTO = 26
EPEERAUTH = 27
ECONNSHUT = 31

OPT_REQ_RESENDTIME = b"req:resend-time"
OPT_RECVMAXSZ = b"recv-size-max"
OPT_RECONNMINT = b"reconnect-time-min"
OPT_RECONNMAXT = b"reconnect-time-max"
OPT_TLS_CONFIG = b"tls-config"

TLS_MODE_CLIENT = 0
TLS_AUTH_MODE_NONE = 0
TLS_AUTH_MODE_REQUIRED = 2

AIO_CALLBACK = CFUNCTYPE(None, c_void_p)
PIPE_CALLBACK = CFUNCTYPE(None, c_uint32, c_int, c_void_p)


class NngError(Exception):
    """An nng call failed; `errno` is nng's error number."""

    def __init__(self, what: str, errno: int):
        super().__init__(f"{what}: {strerror(errno)}")
        self.errno = errno


def _load() -> ctypes.CDLL:
    """libnng.so.1 from the system (Debian's libnng1): never a bundled copy."""
    names = ["libnng.so.1"]
    found = ctypes.util.find_library("nng")
    if found and found not in names:
        names.append(found)
    errors = []
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            errors.append(str(e))
    raise ImportError("sandboxd needs libnng (Debian: apt-get install libnng1): "
                      + "; ".join(errors))


lib = _load()


def _proto(name: str, restype, *argtypes) -> None:
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)


_proto("nng_strerror", c_char_p, c_int)
_proto("nng_req0_open", c_int, POINTER(c_uint32))
_proto("nng_close", c_int, c_uint32)
_proto("nng_socket_set_ms", c_int, c_uint32, c_char_p, c_int32)
_proto("nng_socket_set_size", c_int, c_uint32, c_char_p, c_size_t)
_proto("nng_pipe_notify", c_int, c_uint32, c_int, PIPE_CALLBACK, c_void_p)
_proto("nng_dialer_create", c_int, POINTER(c_uint32), c_uint32, c_char_p)
_proto("nng_dialer_set_ms", c_int, c_uint32, c_char_p, c_int32)
_proto("nng_dialer_set_ptr", c_int, c_uint32, c_char_p, c_void_p)
_proto("nng_dialer_set_string", c_int, c_uint32, c_char_p, c_char_p)
_proto("nng_dialer_start", c_int, c_uint32, c_int)
_proto("nng_ctx_open", c_int, POINTER(c_uint32), c_uint32)
_proto("nng_ctx_close", c_int, c_uint32)
_proto("nng_ctx_set_ms", c_int, c_uint32, c_char_p, c_int32)
_proto("nng_ctx_send", None, c_uint32, c_void_p)
_proto("nng_ctx_recv", None, c_uint32, c_void_p)
_proto("nng_aio_alloc", c_int, POINTER(c_void_p), AIO_CALLBACK, c_void_p)
_proto("nng_aio_free", None, c_void_p)
_proto("nng_aio_stop", None, c_void_p)
_proto("nng_aio_result", c_int, c_void_p)
_proto("nng_aio_set_timeout", None, c_void_p, c_int32)
_proto("nng_aio_set_msg", None, c_void_p, c_void_p)
_proto("nng_aio_get_msg", c_void_p, c_void_p)
_proto("nng_msg_alloc", c_int, POINTER(c_void_p), c_size_t)
_proto("nng_msg_free", None, c_void_p)
_proto("nng_msg_body", c_void_p, c_void_p)
_proto("nng_msg_len", c_size_t, c_void_p)
_proto("nng_tls_config_alloc", c_int, POINTER(c_void_p), c_int)
_proto("nng_tls_config_free", None, c_void_p)
_proto("nng_tls_config_ca_file", c_int, c_void_p, c_char_p)
_proto("nng_tls_config_cert_key_file", c_int, c_void_p, c_char_p, c_char_p)
_proto("nng_tls_config_auth_mode", c_int, c_void_p, c_int)
_proto("nng_tls_config_server_name", c_int, c_void_p, c_char_p)
_proto("nng_tls_config_own_cert", c_int, c_void_p, c_char_p, c_char_p, c_char_p)
_proto("nng_stats_get", c_int, POINTER(c_void_p))
_proto("nng_stats_free", None, c_void_p)
_proto("nng_stat_child", c_void_p, c_void_p)
_proto("nng_stat_next", c_void_p, c_void_p)
_proto("nng_stat_name", c_char_p, c_void_p)
_proto("nng_stat_type", c_int, c_void_p)
_proto("nng_stat_value", ctypes.c_uint64, c_void_p)


STAT_SCOPE = 0


def _stat_children(node: int):
    child = lib.nng_stat_child(node)
    while child:
        yield child
        child = lib.nng_stat_next(child)


def _dialer_scopes(node: int, out: Dict[int, int]) -> None:
    """Every "dialer" scope below node, by its "id" statistic. (nng 1.5.2's
    nng_stat_find_dialer matches the id only at the top of the tree and
    returns the first dialer of the snapshot.)"""
    if lib.nng_stat_type(node) == STAT_SCOPE and lib.nng_stat_name(node) == b"dialer":
        for child in _stat_children(node):
            if lib.nng_stat_name(child) == b"id":
                out[lib.nng_stat_value(child)] = node
    for child in _stat_children(node):
        _dialer_scopes(child, out)


def dialer_stats(dialers: Dict[str, int], names) -> Dict[str, Dict[str, int]]:
    """nng's statistics of some dialers: {key: {name: value}} for dialers
    {key: dialer id}; a dialer gone (or statistics off) is left out. nng
    reports a failed dial to no callback; these counters are how a client
    learns that its TLS handshakes fail."""
    snap = c_void_p()
    if lib.nng_stats_get(byref(snap)) != 0:
        return {}
    try:
        scopes: Dict[int, int] = {}
        _dialer_scopes(snap.value, scopes)
        out = {}
        for key, dialer in dialers.items():
            node = scopes.get(dialer)
            if node:
                values = {lib.nng_stat_name(c).decode(): lib.nng_stat_value(c)
                          for c in _stat_children(node)}
                out[key] = {n: values.get(n, 0) for n in names}
        return out
    finally:
        lib.nng_stats_free(snap)


def strerror(errno: int) -> str:
    return lib.nng_strerror(errno).decode(errors="replace")


def check(rv: int, what: str) -> None:
    if rv != 0:
        raise NngError(what, rv)


# ---- callbacks ----
#
# nng calls back on its own threads. One C callback of each kind exists for
# the life of the process (a ctypes callback object freed while nng still
# holds its address would crash); the void* argument is a key into a table
# of Python callables.

_aio_handlers: Dict[int, Callable[[], None]] = {}
_pipe_handlers: Dict[int, Callable[[int, int], None]] = {}
_next_key = iter(range(1, 1 << 62))


def _on_aio(arg: Optional[int]) -> None:
    handler = _aio_handlers.get(arg or 0)
    if handler is not None:
        try:
            handler()
        except Exception:  # never let an exception unwind into nng
            pass


def _on_pipe(pipe_id: int, event: int, arg: Optional[int]) -> None:
    handler = _pipe_handlers.get(arg or 0)
    if handler is not None:
        try:
            handler(pipe_id, event)
        except Exception:
            pass


_AIO_CB = AIO_CALLBACK(_on_aio)
_PIPE_CB = PIPE_CALLBACK(_on_pipe)


def aio_alloc(handler: Callable[[], None]) -> tuple:
    """An aio whose completions call handler() on an nng thread.
    Returns (aio pointer, key); release with aio_free(aio, key)."""
    key = next(_next_key)
    _aio_handlers[key] = handler
    aio = c_void_p()
    rv = lib.nng_aio_alloc(byref(aio), _AIO_CB, c_void_p(key))
    if rv != 0:
        del _aio_handlers[key]
        raise NngError("nng_aio_alloc", rv)
    return aio.value, key


def aio_free(aio: int, key: int) -> None:
    """Stops the aio (waiting for a callback in progress), then frees it."""
    lib.nng_aio_free(aio)
    _aio_handlers.pop(key, None)


def req_socket(on_pipe: Callable[[int, int], None]) -> int:
    """A REQ socket that never resends (a resent request would run the code
    twice), with pipe add/remove events reported to on_pipe(pipe, event)."""
    sock = c_uint32()
    check(lib.nng_req0_open(byref(sock)), "nng_req0_open")
    try:
        check(lib.nng_socket_set_ms(sock.value, OPT_REQ_RESENDTIME, DURATION_INFINITE),
              "setting req:resend-time")
        check(lib.nng_socket_set_size(sock.value, OPT_RECVMAXSZ, 1 << 30), "setting recv-size-max")
        _pipe_handlers[sock.value] = on_pipe
        for event in (PIPE_EV_ADD_POST, PIPE_EV_REM_POST):
            check(lib.nng_pipe_notify(sock.value, event, _PIPE_CB, c_void_p(sock.value)),
                  "nng_pipe_notify")
    except NngError:
        close_socket(sock.value)
        raise
    return sock.value


def close_socket(sock: int) -> None:
    """Closes sock: calls in flight on it end with NNG_ECLOSED."""
    lib.nng_close(sock)
    _pipe_handlers.pop(sock, None)
