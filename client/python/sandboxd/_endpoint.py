"""_endpoint.py: the pure part of endpoints: a URL the caller gave parsed
into a Target, a host name resolved to its address URLs, and the rendezvous
score that places a session on one endpoint (the same in every client, as
the C client's endpoint.c).

Holds no socket and no lock; never calls into nng.
"""
from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field
from typing import Iterable, List, Optional
from urllib.parse import urlsplit

from .types import TLS


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
