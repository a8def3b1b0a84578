"""types.py: what the client takes and returns, as plain dataclasses.

Results are built only from decoded, checked replies (_wire.py); they never
hold protobuf objects, so a caller's code does not depend on the generated
classes. Output and artifact contents are bytes (the schema's type); the
*_text helpers decode them for display, replacing invalid UTF-8.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Iterable, Iterator, Mapping, Optional, Sequence, Tuple, TypedDict, Union

from ._safe_save import UnsafePath, save_below

LIMIT_FIELDS = ("timeout_ms", "cpu_time_ms", "memory_bytes", "output_bytes", "max_processes",
                "disk_bytes", "open_files")


@dataclass(frozen=True)
class Limits:
    """A run's limits; 0 = the server's default. Signed like the schema: the
    server names a bad value (INVALID_ARGUMENT) instead of it wrapping."""
    timeout_ms: int = 0
    cpu_time_ms: int = 0
    memory_bytes: int = 0
    output_bytes: int = 0
    max_processes: int = 0
    disk_bytes: int = 0
    open_files: int = 0

    @classmethod
    def coerce(cls, value: Union["Limits", Mapping[str, int], None]) -> Optional["Limits"]:
        """Limits from a Limits, a dict with the same keys, or None. An
        unknown key or a value that is not an int is refused here: it would
        otherwise be dropped silently."""
        if value is None or isinstance(value, Limits):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(f"limits: a sandboxd.Limits or a dict, not {type(value).__name__}")
        unknown = sorted(set(value) - set(LIMIT_FIELDS))
        if unknown:
            raise ValueError(f"limits: unknown field(s) {', '.join(map(str, unknown))}; "
                             f"known: {', '.join(LIMIT_FIELDS)}")
        for key, v in value.items():
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"limits.{key}: an int, not {type(v).__name__}")
        return cls(**value)


@dataclass(frozen=True)
class FileURL:
    """An input file the server downloads (http:// or https://)."""
    url: str


# One input file's content: bytes (or a str, written as UTF-8) or a URL the
# server downloads.
FileValue = Union[bytes, bytearray, memoryview, str, FileURL]

# run_code's files=: {path: content}, or (path, content) pairs; each path is
# below /workspace/mounts/.
InputFiles = Union[Mapping[str, FileValue], Iterable[Tuple[str, FileValue]]]


class RunArgs(TypedDict, total=False):
    """The keyword arguments of run_code, stream and start_run (both
    clients), written once: each method takes code and then **RunArgs.
    files: InputFiles; limits: a Limits or a dict of its fields; runtime:
    a runtime's name, "python" (the default), "python-zygote", "bash", ...
    (ServerInfo.runtime_info lists them); or, instead, language (a language,
    name or alias: "python", "py", "bash", "c++") and version (a node-semver
    range: "3.x", "^20"; default any), as Piston takes them (docs/RUNTIMES.md):
    runtime is then sent as "" (both, or version alone: InvalidArgument);
    compile_limits: a compiled runtime's compile stage limits, as limits;
    session_mode: None, "files" or
    "interpreter" (docs/CLIENTS.md); allow_net: the hosts the run's code
    may reach, a list of entries such as ["pypi.org", "*.example.com:443"]
    (docs/EGRESS.md; empty: no network)."""
    requirements: Sequence[str]
    files: Optional[InputFiles]
    stdin: Union[bytes, str]
    args: Sequence[str]
    env: Optional[Mapping[str, str]]
    session_id: Optional[str]
    run_id: Optional[str]
    limits: Union[Limits, Mapping[str, int], None]
    runtime: Optional[str]
    language: Optional[str]
    version: Optional[str]
    compile_limits: Union[Limits, Mapping[str, int], None]
    session_mode: Optional[str]
    allow_net: Sequence[str]


@dataclass(frozen=True)
class TLS:
    """tls+tcp:// settings, handed to nng (Debian's libnng1 is built with
    mbedTLS; TLS 1.2). ca_file: PEM CA chain to verify the server with.
    This client's certificate, for servers that ask for one
    (--tls-client-auth): cert_file and key_file, two PEM files as sandboxd
    and the C client take them, or cert_key_file, one PEM file holding both;
    key_password if the key is encrypted. server_name: the name the
    server's certificate must carry, by default each URL's host as written
    (mbedTLS 2.28 matches it against the certificate's DNS names only, not
    its IP addresses). verify=False turns verification of the server off
    (testing only)."""
    ca_file: Optional[str] = None
    cert_key_file: Optional[str] = None
    key_password: Optional[str] = field(default=None, repr=False)  # a secret: not in repr
    server_name: Optional[str] = None
    verify: bool = True
    cert_file: Optional[str] = None
    key_file: Optional[str] = None


@dataclass(frozen=True)
class Artifact:
    """A regular file the run left in output/."""
    name: str
    relative_path: str
    size: int
    mime: str
    content: bytes = field(repr=False)
    content_omitted: bool

    def save(self, directory: Union[str, os.PathLike]) -> str:
        """Writes the content to directory/relative_path and returns that
        path; never writes outside directory (see _safe_save.py). Raises
        UnsafePath for a hostile path or a symlink/FIFO/hard link met below
        directory, ValueError when the server left the content out."""
        if self.content_omitted:
            raise ValueError(f"artifact {self.relative_path!r} ({self.size} bytes): the server "
                             "left its content out (over --artifact-bytes or the reply's cap)")
        return save_below(directory, self.relative_path, self.content)


@dataclass(frozen=True)
class Egress:
    """What a run with allow_net did on the network, as the server's egress
    proxy saw it (docs/EGRESS.md): connections (requests and tunnels) the
    program opened, how many of them were refused (by the allow list or a
    cap), bytes relayed from it (up) and to it (down)."""
    connections: int
    refused: int
    bytes_up: int
    bytes_down: int


@dataclass(frozen=True)
class CompileResult:
    """A compiled runtime's compile stage (c, cpp: docs/RUNTIMES.md), its own
    run in the same sandbox. failed: it was killed or exited non-zero; then
    the program never ran, the RunResult's killed_by, exit_code and signal
    are the compiler's, its stdout and stderr are empty, and the compiler's
    output is here."""
    stdout: bytes = field(repr=False)
    stderr: bytes = field(repr=False)
    stdout_truncated: bool
    stderr_truncated: bool
    killed_by: str
    exit_code: int
    signal: int
    wall_time_ms: int
    cpu_time_ms: int
    peak_memory_bytes: int
    failed: bool

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")


@dataclass(frozen=True)
class RunResult:
    """A run that happened: the code ran, whatever it did. killed_by is
    "none", "timeout", "memory", "output_limit", "signal", "cancelled", or the proto name
    of a value this client does not know. endpoint is the server address the
    call went to; attempts counts calls made, retries included. "cancelled":
    CancelRun (or a stream's cancel) killed the run's whole tree."""
    run_id: str
    session_id: str
    session_created: bool
    stdout: bytes = field(repr=False)
    stderr: bytes = field(repr=False)
    stdout_truncated: bool
    stderr_truncated: bool
    killed_by: str
    exit_code: int
    signal: int
    wall_time_ms: int
    cpu_time_ms: int
    peak_memory_bytes: int
    artifacts: Tuple[Artifact, ...]
    feedback: Tuple[str, ...]
    endpoint: str
    attempts: int
    # Rich results (docs/INTERPRETER.md): the last expression's value as
    # text/plain ("" when none; at most 64 KiB, result_truncated), and in an
    # interpreter session whether this call ran in a fresh interpreter (the
    # earlier state is gone: feedback says why) or ended the interpreter.
    # session_mode: "files", "interpreter", or "" without a session.
    result: str = ""
    result_truncated: bool = False
    state_lost: bool = False
    interpreter_ended: bool = False
    session_mode: str = ""
    # A run with allow_net: what it did on the network; None when the reply
    # has no summary (a run without network, or an older server).
    egress: Optional[Egress] = None
    # A compiled runtime's compile stage; None for the others.
    compile: Optional[CompileResult] = None

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")

    @property
    def ok(self) -> bool:
        """The program ran to its end and exited 0."""
        return self.killed_by == "none" and self.exit_code == 0 and self.signal == 0

    def save_artifacts(self, directory: Union[str, os.PathLike]) -> Tuple[str, ...]:
        """Saves every artifact whose content came back; returns the paths.
        Stops at the first unsafe path (UnsafePath) rather than skipping it."""
        return tuple(a.save(directory) for a in self.artifacts if not a.content_omitted)


@dataclass(frozen=True)
class StartedRun:
    """What StartRun answered: the run's id and the server address it lives
    on (WatchRun and CancelRun must go there); attempts counts StartRun
    calls made, retries included."""
    run_id: str
    endpoint: str
    attempts: int = 1


@dataclass(frozen=True)
class Chunk:
    """Output of a streamed run as it arrived: stream is "stdout" or
    "stderr"; data the raw bytes (they may end inside a UTF-8 sequence);
    offset where data starts in its stream; text the bytes decoded
    incrementally per stream (a sequence split between chunks comes whole in
    the later chunk's text, invalid UTF-8 becomes U+FFFD)."""
    stream: str
    data: bytes
    text: str
    offset: int


@dataclass(frozen=True)
class RunUpdate:
    """One WatchRun reply. state: "queued", "running", "done" (or the proto
    name of a newer value). stdout/stderr: the bytes past the offsets asked,
    starting at stdout_offset/stderr_offset. complete: the run is done and
    this reply reached the end of both streams; then exactly one of result
    (status OK) and error (the SandboxError run_code would raise, not
    raised) is set, and outcome() returns or raises it."""
    state: str
    stdout: bytes = field(repr=False)
    stderr: bytes = field(repr=False)
    stdout_offset: int
    stderr_offset: int
    stdout_truncated: bool
    stderr_truncated: bool
    complete: bool
    result: Optional[RunResult] = field(repr=False)
    error: Optional[Exception]

    def outcome(self) -> RunResult:
        if not self.complete:
            raise ValueError(f"the run is {self.state}, not complete: no outcome yet")
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


@dataclass(frozen=True)
class FileEntry:
    """One entry of ListFiles. type: "file", "directory", "symlink", "other"."""
    name: str
    relative_path: str
    type: str
    size: int


@dataclass(frozen=True)
class FileList:
    entries: Tuple[FileEntry, ...]
    truncated: bool

    def __iter__(self) -> Iterator[FileEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


@dataclass(frozen=True)
class FileContent:
    """ReadFile: content from the offset asked, the file's whole size, and
    whether content reaches its end."""
    content: bytes
    size: int
    eof: bool


@dataclass(frozen=True)
class Health:
    status: str  # "SERVING", "NOT_SERVING", "UNKNOWN", or the proto name of a newer value
    endpoint: str

    @property
    def serving(self) -> bool:
        return self.status == "SERVING"


@dataclass(frozen=True)
class Isolation:
    backend: str
    cgroup_path: str
    seccomp: bool
    namespaces: str
    uid_base: int
    slots: int
    memory_per_process: bool
    cpu_share_per_slot: bool


@dataclass(frozen=True)
class ZygoteMemory:
    """One ready zygote (GetInfoResponse.zygote_memory): the worker slot it
    serves, the requirements environment it was started for ("" none), its
    resident and proportional memory (/proc/PID/smaps_rollup), runs handed
    to it and its age."""
    slot: int
    environment: str
    rss_bytes: int
    pss_bytes: int
    forks: int
    age_ms: int


@dataclass(frozen=True)
class RuntimeInfo:
    """One runtime the server offers (docs/RUNTIMES.md): the name run_code's
    runtime= takes, the language (and aliases) language= takes, its version
    (MAJOR.MINOR.PATCH, asked of its binary at start), whether its self-test
    passed at start (else runs naming it raise FailedPrecondition with
    unavailable_reason), whether it has a compile stage, and its file name
    in /workspace."""
    name: str
    language: str
    version: str
    aliases: Tuple[str, ...]
    available: bool
    unavailable_reason: str
    compiled: bool
    file: str


@dataclass(frozen=True)
class ServerInfo:
    version: str
    runtimes: Tuple[str, ...]
    isolation: Isolation
    default_limits: Limits
    max_limits: Limits
    workers: int
    queue_capacity: int
    queue_depth: int
    running: int
    max_message_bytes: int
    requests_total: int
    runs_total: int
    rejected_total: int
    sessions: int
    requirements_available: bool
    environments: int
    environment_bytes: int
    environment_builds_total: int
    environment_build_failures_total: int
    endpoint: str
    started_runs: int = 0  # StartRun runs in the server's run table now
    watchers: int = 0      # WatchRun and CancelRun calls waiting now
    # Zygote mode (runtime "python-zygote", docs/ZYGOTE.md): whether it is on,
    # the modules each zygote imports, when a zygote is replaced, zygotes
    # running and the memory their imports hold, and totals since the start.
    zygote_enabled: bool = False
    zygote_preload: Tuple[str, ...] = ()
    zygote_max_forks: int = 0
    zygote_max_age_s: int = 0
    zygotes: int = 0
    zygote_memory_bytes: int = 0
    zygote_starts_total: int = 0
    zygote_start_failures_total: int = 0
    zygote_forks_total: int = 0
    zygote_recycled_total: int = 0
    zygote_memory: Tuple[ZygoteMemory, ...] = ()  # each ready zygote, by slot
    # Interpreter sessions (docs/INTERPRETER.md): at most max_interpreters
    # living at once (0: the mode is off), living now, totals since the
    # start, and when an idle or old one ends.
    max_interpreters: int = 0
    interpreters: int = 0
    interpreter_starts_total: int = 0
    interpreter_evictions_total: int = 0
    interpreter_lost_total: int = 0
    interpreter_idle_s: int = 0
    interpreter_max_lifetime_s: int = 0
    # What a run's allow_net may ask of this server (--egress-allow,
    # docs/EGRESS.md); empty: runs get no network.
    egress_allow: Tuple[str, ...] = ()
    # Every runtime, available or not (runtimes: the names of the available).
    runtime_info: Tuple[RuntimeInfo, ...] = ()


def field_names(cls) -> Tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


__all__ = ["Limits", "FileURL", "FileValue", "InputFiles", "RunArgs", "TLS", "Artifact", "Egress", "CompileResult", "RunResult", "StartedRun", "Chunk",
           "RunUpdate", "FileEntry", "FileList", "FileContent", "Health", "Isolation",
           "ServerInfo", "RuntimeInfo", "ZygoteMemory", "UnsafePath"]
