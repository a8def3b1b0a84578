"""_tls.py: the client's nng TLS configurations (one per server name), the
checks of a sandboxd.TLS, and what a tls+tcp endpoint that does not connect
says about why (from its dialer's statistics).

Never turns verification off unless the caller said verify=False, and never
shares one configuration between two server names.
"""
from __future__ import annotations

from ctypes import byref, c_void_p
from typing import Dict, Optional

from . import _nng
from ._nng import lib
from .types import TLS


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


def endpoint_state(live: bool, stats: Optional[Dict[str, int]]) -> str:
    """connected, not connected, or for a tls+tcp endpoint why not."""
    if live:
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
