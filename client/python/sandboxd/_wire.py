"""_wire.py: the envelope and the messages, in and out.

Builds RequestEnvelope bytes from the caller's arguments and turns
ReplyEnvelope bytes into results or exceptions. Every byte of a reply came
from the network: anything that does not decode, or that contradicts the
request (another request_id), is an error, never a crash and never a
half-filled result. Nothing here does I/O.
"""
from __future__ import annotations

import itertools
import os
import secrets
import time
from typing import Iterable, Mapping, Optional, Sequence, Tuple, Union

from . import errors
from . import sandbox_pb2 as pb
from .types import (LIMIT_FIELDS, Artifact, CompileResult, Egress, FileContent, FileEntry, FileList, FileURL, FileValue,
                    Health, InputFiles, Isolation, Limits, RunResult, RunUpdate, RuntimeInfo,
                    ServerInfo,
                    ZygoteMemory, field_names)

SERVICE = "sandbox.v1.Sandbox"
RUN_CODE = f"/{SERVICE}/RunCode"
HEALTH = f"/{SERVICE}/Health"
GET_INFO = f"/{SERVICE}/GetInfo"
CLOSE_SESSION = f"/{SERVICE}/CloseSession"
LIST_FILES = f"/{SERVICE}/ListFiles"
READ_FILE = f"/{SERVICE}/ReadFile"
START_RUN = f"/{SERVICE}/StartRun"
WATCH_RUN = f"/{SERVICE}/WatchRun"
CANCEL_RUN = f"/{SERVICE}/CancelRun"

_KILLED_BY_SHORT = {0: "none", 1: "timeout", 2: "memory", 3: "output_limit", 4: "signal",
                    5: "cancelled"}
_RUN_STATES = {0: "unspecified", 1: "queued", 2: "running", 3: "done"}
_ENTRY_TYPES = {0: "other", 1: "file", 2: "directory", 3: "symlink"}

_request_prefix = f"{os.getpid():x}-{secrets.token_hex(3)}"
_request_counter = itertools.count(1)

def _refuse(message: str) -> errors.InvalidArgument:
    """A request this client will not send: nothing ran, nothing was sent."""
    return errors.InvalidArgument(message + "; nothing was sent", nothing_ran=True)


def new_request_id() -> str:
    return f"{_request_prefix}-{next(_request_counter)}"


def envelope(method: str, request_id: str, deadline_unix_ms: int, payload: bytes,
             credential: str = "") -> bytes:
    """credential: the client's API key (checked by _credential), "" for none."""
    env = pb.RequestEnvelope(method=method, request_id=request_id,
                             deadline_unix_ms=max(0, deadline_unix_ms), payload=payload,
                             credential=credential)
    return env.SerializeToString()


def now_unix_ms() -> int:
    return time.time_ns() // 1_000_000


# ---- requests ----

def _file_items(files: Optional[InputFiles]) -> Iterable[Tuple[str, FileValue]]:
    if files is None:
        return ()
    if isinstance(files, Mapping):
        return files.items()
    return files


def _add_file(req: pb.RunCodeRequest, index: int, path, value) -> None:
    if not isinstance(path, str):
        raise TypeError(f"files[{index}]: the path must be a str, not {type(path).__name__}")
    f = req.files.add(path=path)
    if isinstance(value, FileURL):
        f.url = value.url
    elif isinstance(value, str):
        f.content = value.encode()
    elif isinstance(value, (bytes, bytearray, memoryview)):
        f.content = bytes(value)
    else:
        raise TypeError(f"files[{path!r}]: bytes, str or sandboxd.FileURL, "
                        f"not {type(value).__name__}")


def _strings(name: str, values: Sequence[str]) -> Sequence[str]:
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name}: a sequence of str, not a single {type(values).__name__}")
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise TypeError(f"{name}[{i}]: a str, not {type(v).__name__}")
    return values


def _allow_net(values: Sequence[str]) -> Sequence[str]:
    """allow_net's entries (docs/EGRESS.md), one str each: a bare str would
    be taken as its characters, each a host."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"allow_net: a list of str such as [{values!r}], not a single "
                        f"{type(values).__name__} (it would be read as its characters)")
    return _strings("allow_net", values)


# session_mode (docs/INTERPRETER.md): None = the session's own (files for a
# new one); "interpreter" keeps a living Python between the session's calls.
SESSION_MODES = {None: 0, "files": 1, "interpreter": 2}
_SESSION_MODE_NAMES = {0: "", 1: "files", 2: "interpreter"}


def run_code_request(code: str, *, requirements: Sequence[str] = (),
                     files: Optional[InputFiles] = None,
                     stdin: Union[bytes, str] = b"", args: Sequence[str] = (),
                     env: Optional[Mapping[str, str]] = None, session_id: Optional[str] = None,
                     run_id: Optional[str] = None,
                     limits: Union[Limits, Mapping[str, int], None] = None,
                     runtime: Optional[str] = None,
                     language: Optional[str] = None,
                     version: Optional[str] = None,
                     compile_limits: Union[Limits, Mapping[str, int], None] = None,
                     session_mode: Optional[str] = None,
                     allow_net: Sequence[str] = ()
                     ) -> Tuple[pb.RunCodeRequest, Optional[Limits]]:
    """The RunCodeRequest for run_code's arguments (types checked here; values
    are the server's to judge, which names the field it refuses)."""
    if not isinstance(code, str):
        raise TypeError(f"code: a str, not {type(code).__name__}")
    try:
        lim = Limits.coerce(limits)
        compile_lim = Limits.coerce(compile_limits)
    except ValueError as e:
        raise _refuse(str(e)) from None
    for name, value in (("runtime", runtime), ("language", language), ("version", version)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name}: a str, not {type(value).__name__}")
    # Neither runtime nor language: "python". language picks one (with
    # version); runtime and language together are the server's to refuse.
    if runtime is None:
        runtime = "" if language else "python"
    if session_mode not in SESSION_MODES:
        raise ValueError(f"session_mode: {session_mode!r} is not one of "
                         f"{', '.join(repr(m) for m in SESSION_MODES)}")
    req = pb.RunCodeRequest(code=code, runtime=runtime, language=language or "",
                            version=version or "", session_mode=SESSION_MODES[session_mode],
                            requirements=_strings("requirements", requirements),
                            args=_strings("args", args), session_id=session_id or "",
                            run_id=run_id or "", allow_net=_allow_net(allow_net))
    req.stdin = stdin.encode() if isinstance(stdin, str) else bytes(stdin)
    for i, (path, value) in enumerate(_file_items(files)):
        _add_file(req, i, path, value)
    for key, value in (env or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"env: str keys and values, not {key!r}: {type(value).__name__}")
        req.env[key] = value
    if lim is not None:
        req.limits.CopyFrom(pb.Limits(**{k: getattr(lim, k) for k in LIMIT_FIELDS}))
    if compile_lim is not None:
        req.compile_limits.CopyFrom(pb.Limits(**{k: getattr(compile_lim, k) for k in LIMIT_FIELDS}))
    return req, lim


def run_timeout_ms(limits: Optional[Limits]) -> int:
    """How long the run itself may take, for the reply wait: its timeout, or
    the largest a default server allows when it leaves it to the server
    (as the C client: a slow but legal run is not cut off)."""
    if limits is not None and limits.timeout_ms > 0:
        return limits.timeout_ms
    return 60_000


# ---- replies ----

class Reply:
    """A decoded ReplyEnvelope: status, message, payload bytes."""
    __slots__ = ("status", "message", "payload")

    def __init__(self, status: int, message: str, payload: bytes):
        self.status = status
        self.message = message
        self.payload = payload


def bad_reply(what: str, endpoint: str, attempts: int, run_id: str = "") -> errors.Internal:
    """A reply that does not decode: the request was sent and answered by
    something, so the code may have run."""
    return errors.Internal(f"{what}; the code may or may not have run", nothing_ran=False,
                           endpoint=endpoint, attempts=attempts, run_id=run_id)


def decode_reply(data: bytes, request_id: str, endpoint: str, attempts: int,
                 run_id: str = "") -> Reply:
    env = pb.ReplyEnvelope()
    try:
        env.ParseFromString(data)
    except Exception:  # DecodeError, bad UTF-8 in a string: the bytes are not ours to trust
        raise bad_reply("the reply is not a valid sandbox.v1.ReplyEnvelope", endpoint, attempts,
                        run_id) from None
    if env.request_id != request_id:
        raise bad_reply(f"the reply answers request {env.request_id[:80]!r}, not {request_id!r}",
                        endpoint, attempts, run_id)
    return Reply(int(env.status), env.message, env.payload)


def parse_payload(message_type, reply: Reply, endpoint: str, attempts: int, run_id: str = ""):
    msg = message_type()
    try:
        msg.ParseFromString(reply.payload)
    except Exception:
        raise bad_reply(f"the reply is not a valid {message_type.DESCRIPTOR.full_name}", endpoint,
                        attempts, run_id) from None
    return msg


def killed_by_name(value: int) -> str:
    """"none", "timeout", ... for the values this client knows; the proto
    name of a newer one (KILLED_BY_<n> when even the schema does not know
    it), never an exception."""
    if value in _KILLED_BY_SHORT:
        return _KILLED_BY_SHORT[value]
    desc = pb.KilledBy.DESCRIPTOR.values_by_number.get(value)
    return desc.name if desc is not None else f"KILLED_BY_{value}"


def enum_name(enum_type, value: int, prefix: str) -> str:
    desc = enum_type.DESCRIPTOR.values_by_number.get(value)
    return desc.name if desc is not None else f"{prefix}{value}"


def run_result(msg: pb.RunCodeResponse, endpoint: str, attempts: int) -> RunResult:
    arts = tuple(Artifact(name=a.name, relative_path=a.relative_path, size=a.size, mime=a.mime,
                          content=a.content, content_omitted=a.content_omitted)
                 for a in msg.artifacts)
    return RunResult(
        run_id=msg.run_id, session_id=msg.session_id, session_created=msg.session_created,
        stdout=msg.stdout, stderr=msg.stderr, stdout_truncated=msg.stdout_truncated,
        stderr_truncated=msg.stderr_truncated, killed_by=killed_by_name(msg.killed_by),
        exit_code=msg.exit_code, signal=msg.signal, wall_time_ms=msg.wall_time_ms,
        cpu_time_ms=msg.cpu_time_ms, peak_memory_bytes=msg.peak_memory_bytes, artifacts=arts,
        feedback=tuple(msg.feedback), endpoint=endpoint, attempts=attempts,
        result=msg.result, result_truncated=msg.result_truncated, state_lost=msg.state_lost,
        interpreter_ended=msg.interpreter_ended,
        session_mode=_SESSION_MODE_NAMES.get(msg.session_mode, f"SESSION_MODE_{msg.session_mode}"),
        egress=_egress(msg), compile=_compile(msg))


def _compile(msg: pb.RunCodeResponse) -> Optional[CompileResult]:
    """The reply's CompileResult, None for a runtime without a compile stage."""
    if not msg.HasField("compile"):
        return None
    k = msg.compile
    return CompileResult(stdout=k.stdout, stderr=k.stderr, stdout_truncated=k.stdout_truncated,
                         stderr_truncated=k.stderr_truncated,
                         killed_by=killed_by_name(k.killed_by), exit_code=k.exit_code,
                         signal=k.signal, wall_time_ms=k.wall_time_ms, cpu_time_ms=k.cpu_time_ms,
                         peak_memory_bytes=k.peak_memory_bytes, failed=k.failed)


def _egress(msg: pb.RunCodeResponse) -> Optional[Egress]:
    """The reply's EgressSummary, None when it has none (a message field:
    presence is on the wire)."""
    if not msg.HasField("egress"):
        return None
    e = msg.egress
    return Egress(connections=e.connections, refused=e.refused, bytes_up=e.bytes_up,
                  bytes_down=e.bytes_down)


def run_state_name(value: int) -> str:
    """"queued", "running", "done"; the proto name of a newer value."""
    if value in _RUN_STATES:
        return _RUN_STATES[value]
    return enum_name(pb.RunState, value, "RUN_STATE_")


def run_update(msg: pb.WatchRunResponse, endpoint: str, attempts: int, run_id: str) -> RunUpdate:
    """One WatchRun reply. With complete, the outcome as RunCode would have
    answered it: a RunResult for OK, else the exception run_code raises
    (not raised here: the reply's last bytes come first)."""
    result = error = None
    if msg.complete:
        if msg.status == 0:
            result = run_result(msg.result, endpoint, attempts)
        else:
            error = errors.from_server(msg.status, msg.message, endpoint=endpoint,
                                       attempts=attempts, run_id=run_id)
    return RunUpdate(state=run_state_name(msg.state), stdout=msg.stdout, stderr=msg.stderr,
                     stdout_offset=msg.stdout_offset, stderr_offset=msg.stderr_offset,
                     stdout_truncated=msg.stdout_truncated,
                     stderr_truncated=msg.stderr_truncated, complete=msg.complete,
                     result=result, error=error)


def file_list(msg: pb.ListFilesResponse) -> FileList:
    return FileList(entries=tuple(
        FileEntry(name=e.name, relative_path=e.relative_path,
                  type=_ENTRY_TYPES.get(e.type, "other"), size=e.size) for e in msg.entries),
        truncated=msg.truncated)


def file_content(msg: pb.ReadFileResponse) -> FileContent:
    return FileContent(content=msg.content, size=msg.size, eof=msg.eof)


def health(msg: pb.HealthResponse, endpoint: str) -> Health:
    return Health(status=enum_name(pb.HealthResponse.ServingStatus, msg.status, "STATUS_"),
                  endpoint=endpoint)


def _limits(msg: pb.Limits) -> Limits:
    return Limits(**{k: getattr(msg, k) for k in LIMIT_FIELDS})


def server_info(msg: pb.GetInfoResponse, endpoint: str) -> ServerInfo:
    iso = Isolation(**{k: getattr(msg.isolation, k) for k in field_names(Isolation)})
    plain = {k: getattr(msg, k) for k in field_names(ServerInfo)
             if k not in ("runtimes", "isolation", "default_limits", "max_limits", "endpoint",
                          "zygote_preload", "egress_allow", "zygote_memory", "runtime_info")}
    return ServerInfo(runtimes=tuple(msg.runtimes), isolation=iso,
                      zygote_preload=tuple(msg.zygote_preload),
                      zygote_memory=tuple(
                          ZygoteMemory(**{k: getattr(z, k) for k in field_names(ZygoteMemory)})
                          for z in msg.zygote_memory),
                      egress_allow=tuple(msg.egress_allow),
                      runtime_info=tuple(
                          RuntimeInfo(name=r.name, language=r.language, version=r.version,
                                      aliases=tuple(r.aliases), available=r.available,
                                      unavailable_reason=r.unavailable_reason,
                                      compiled=r.compiled, file=r.file)
                          for r in msg.runtime_info),
                      default_limits=_limits(msg.default_limits),
                      max_limits=_limits(msg.max_limits), endpoint=endpoint, **plain)
