"""errors.py: one exception class per status code, all SandboxError.

The attribute that matters most is `nothing_ran`: True only when it is
certain the code did not run, because a server said so with a status the
protocol defines as "nothing ran", or because the request never left this
client. A broken connection after sending (Unknown) or no reply in time
(DeadlineExceeded from the client) may have run: `nothing_ran` is False and
the client never retries them, here or on another server.
"""
from __future__ import annotations

import enum
from typing import Dict, FrozenSet, Optional, Type

class Code(enum.IntEnum):
    """gRPC's codes, as in proto/sandbox.proto's enum Code."""
    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15  # not used by sandboxd; named so that 16 keeps gRPC's number
    UNAUTHENTICATED = 16


CODE_NAMES: Dict[int, str] = {c.value: c.name for c in Code}

# The statuses a call is sent again after (by _core, the one place that
# decides): a server answers them only when nothing ran, all workers busy
# and the queue full, or draining. Nothing else is ever retried
# (UNAUTHENTICATED included: the same key would be refused again).
RETRIABLE_STATUSES: FrozenSet[int] = frozenset({Code.RESOURCE_EXHAUSTED, Code.UNAVAILABLE})

# What a server's answer with this status means for the code (docs/CLIENTS.md,
# "The protocol (every client)"): each of these is documented as "nothing ran". And from
# docs/STREAMING.md: a server sends CANCELLED only for a run cancelled while
# queued (it never started), and ALREADY_EXISTS for a StartRun whose run_id
# is taken (the request was refused).
_SERVER_NOTHING_RAN: FrozenSet[int] = frozenset({
    Code.CANCELLED, Code.INVALID_ARGUMENT, Code.DEADLINE_EXCEEDED, Code.NOT_FOUND,
    Code.ALREADY_EXISTS, Code.RESOURCE_EXHAUSTED, Code.FAILED_PRECONDITION, Code.UNIMPLEMENTED,
    Code.INTERNAL, Code.UNAVAILABLE, Code.UNAUTHENTICATED})


def code_name(code: int) -> str:
    """The proto name of a status code; CODE_<n> for one this client does not know."""
    return CODE_NAMES.get(code, f"CODE_{code}")


class SandboxError(Exception):
    """A call that did not return a result.

    code: the status code (int, gRPC's numbering); code_name: its name;
    message: the server's message, or the client's own reason; from_server:
    whether a server sent this status; nothing_ran: certain that the code did
    not run; endpoint: the address the call went to ("" when none was
    chosen); attempts: calls made, retries included; run_id: the RunCode's
    run id, when there was one.
    """

    code = 2

    def __init__(self, message: str, *, code: Optional[int] = None, from_server: bool = False,
                 nothing_ran: bool = False, endpoint: str = "", attempts: int = 0,
                 run_id: str = ""):
        if code is not None:
            self.code = code
        self.message = message
        self.from_server = from_server
        self.nothing_ran = nothing_ran
        self.endpoint = endpoint
        self.attempts = attempts
        self.run_id = run_id
        super().__init__(message)

    @property
    def code_name(self) -> str:
        return code_name(self.code)

    def __str__(self) -> str:
        where = f" [{self.endpoint}]" if self.endpoint else ""
        return f"{self.code_name}: {self.message}{where}"


class Cancelled(SandboxError):
    """From a server: the run was cancelled while queued and never started
    (nothing ran). From this client: the call was abandoned (the client was
    closed while it waited)."""
    code = 1


class Unknown(SandboxError):
    """The connection broke after the request was sent: the code may or may not have run."""
    code = 2


class InvalidArgument(SandboxError):
    """The request was refused (the message names the field); nothing ran."""
    code = 3


class DeadlineExceeded(SandboxError):
    """From a server: still queued at its deadline, nothing ran. From this
    client (from_server False): no reply in time, the code may have run."""
    code = 4


class NotFound(SandboxError):
    """No such session or path; for WatchRun and CancelRun, no such run in
    the server's table (never started, its outcome already read, expired)."""
    code = 5


class AlreadyExists(SandboxError):
    """StartRun: a run with this run_id is in the server's table; nothing ran."""
    code = 6


class PermissionDenied(SandboxError):
    code = 7


class ResourceExhausted(SandboxError):
    """All workers busy and the queue full; nothing ran. Retried."""
    code = 8


class FailedPrecondition(SandboxError):
    """A download, an install, a busy session, a symlink met: nothing ran."""
    code = 9


class Aborted(SandboxError):
    code = 10


class OutOfRange(SandboxError):
    code = 11


class Unimplemented(SandboxError):
    code = 12


class Internal(SandboxError):
    """From a server: the sandbox could not be set up, the code did not run.
    From this client: a reply that does not decode (it may have run)."""
    code = 13


class Unavailable(SandboxError):
    """From a server: draining, nothing ran (retried, on another server when
    there is one). From this client: the request never left (no endpoint
    connected); nothing ran, not retried."""
    code = 14


class Unauthenticated(SandboxError):
    """The server has --tenants and the call's API key (api_key=,
    $SANDBOX_API_KEY) or client certificate is missing or belongs to no
    tenant: nothing ran. Never retried (docs/CLIENTS.md, "API keys")."""
    code = 16


_BY_CODE: Dict[int, Type[SandboxError]] = {
    cls.code: cls for cls in (Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound,
                              AlreadyExists, PermissionDenied, ResourceExhausted,
                              FailedPrecondition, Aborted, OutOfRange, Unimplemented, Internal,
                              Unavailable, Unauthenticated)
}


def error_class(code: int) -> Type[SandboxError]:
    """The exception class for a status; SandboxError itself for a code this
    client does not know (a newer server), never a crash."""
    return _BY_CODE.get(code, SandboxError)


def from_server(code: int, message: str, *, endpoint: str, attempts: int,
                run_id: str = "") -> SandboxError:
    """The exception for a status a server answered with."""
    return error_class(code)(message, code=code, from_server=True,
                             nothing_ran=code in _SERVER_NOTHING_RAN, endpoint=endpoint,
                             attempts=attempts, run_id=run_id)
