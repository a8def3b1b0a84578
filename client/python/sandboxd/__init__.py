"""sandboxd: the Python client of sandboxd (sandbox.v1 over nng REQ/REP).

    import sandboxd
    with sandboxd.Client("tcp://127.0.0.1:7878") as c:
        r = c.run_code('print("hello")')
        print(r.stdout_text, r.killed_by, r.exit_code)

        with c.stream("for i in range(3): print(i)") as s:
            for chunk in s:                     # output as it arrives
                print(chunk.stream, chunk.data, chunk.text)
        print(s.result.exit_code)

At-most-once: nothing is sent twice unless a server answered
RESOURCE_EXHAUSTED or UNAVAILABLE (which prove nothing ran); a call that may
have run raises Unknown or DeadlineExceeded and is never retried. docs/CLIENTS.md.
"""
from .aio import AsyncClient
from .client import Client
from .errors import (Aborted, AlreadyExists, Cancelled, DeadlineExceeded, FailedPrecondition,
                     Internal, InvalidArgument, NotFound, OutOfRange, PermissionDenied,
                     ResourceExhausted, SandboxError, Unauthenticated, Unavailable, Unimplemented,
                     Unknown)
from .stream import AsyncRunStream, RunStream
from .types import (TLS, Artifact, Chunk, CompileResult, Egress, FileContent, FileEntry, FileList, FileURL, Health,
                    Isolation, Limits, RunResult, RunUpdate, RuntimeInfo, ServerInfo, StartedRun,
                    UnsafePath, ZygoteMemory)

from ._version import __version__ as __version__  # generated: generate_proto.py

__all__ = [
    "Client", "AsyncClient", "Limits", "FileURL", "TLS", "RunResult", "Egress", "CompileResult", "Artifact", "FileEntry",
    "RunStream", "AsyncRunStream", "Chunk", "StartedRun", "RunUpdate",
    "FileList", "FileContent", "Health", "Isolation", "ServerInfo", "RuntimeInfo", "ZygoteMemory", "UnsafePath",
    "SandboxError", "Cancelled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
    "AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted",
    "OutOfRange", "Unimplemented", "Internal", "Unavailable", "Unauthenticated", "__version__",
]
