/* types.ts: what the client takes and returns: the public option,
 * parameter and result types of @sandboxd/client (index.ts exports them).
 * Types only: nothing here runs, and nothing here names a generated
 * protobuf class; convert.ts maps between these and the sandbox.v1
 * messages. */
import type { ConnectionOptions as TlsOptions } from "node:tls";

import type { Resolver } from "./fleet.js";
import type { RunResult } from "./result.js";

export interface ClientOptions {
  /** Retries of RESOURCE_EXHAUSTED/UNAVAILABLE (default 3; 0 = never). */
  retries?: number;
  /** How long a call may wait in a server's queue (default 30000 ms). */
  queueWaitMs?: number;
  /** Beyond queue wait and run timeout: setup, teardown, transport (5000 ms). */
  replyMarginMs?: number;
  /** How long a call waits for a reachable endpoint (TCP/TLS connect plus
   * the SP handshake, and the waits between attempts) before it fails with
   * a client-side UNAVAILABLE, nothing sent (default 5000 ms, the connect
   * timeout of every sandboxd client: docs/CLIENTS.md). */
  connectTimeoutMs?: number;
  /** @deprecated The old name of connectTimeoutMs (which wins when both are
   * given); it was a second setting with a default of its own (30000 ms). */
  waitForEndpointMs?: number;
  /** Largest request sent (default 8 MiB, sandboxd's default cap). */
  maxRequestBytes?: number;
  /** Largest reply accepted; a larger one closes the connection (1 GiB). */
  maxReplyBytes?: number;
  /** Host names are resolved again this often (default 30000 ms). */
  resolveIntervalMs?: number;
  /** Reconnect backoff of a dead endpoint (default 100 ms doubling to 5 s). */
  reconnectBaseMs?: number;
  reconnectMaxMs?: number;
  /** Retry backoff (default 50 ms doubling to 2 s, jittered). */
  retryBaseMs?: number;
  retryMaxMs?: number;
  /** node:tls options for tls+tcp:// endpoints (ca, cert, key, ...). */
  tls?: TlsOptions;
  /** The API key every call carries for a server with --tenants (default:
   * $SANDBOX_API_KEY, which ps does not show; "" sends none): at most 512
   * bytes of printable ASCII without spaces, else the constructor throws
   * RangeError. A wrong or missing key is Unauthenticated (nothing ran,
   * never retried). docs/CLIENTS.md, "API keys". */
  apiKey?: string;
  /** Name resolution (default: dns.lookup, all addresses). */
  resolver?: Resolver;
}

export interface CallOptions {
  /** Stops waiting. Before the request left: Cancelled, nothing sent. After:
   * Cancelled with mayHaveRun = true. It does NOT cancel a run on the
   * server: the code may run to its end (stream() and cancelRun() do). For
   * startRun it only stops a request not yet sent (the run id it answers
   * may be the only handle on the run). */
  signal?: AbortSignal;
}

export interface StreamOptions {
  /** Aborting it cancels the run (CancelRun, once), like RunStream.cancel(). */
  signal?: AbortSignal;
  /** wait_ms of each WatchRun long poll: how long the server holds a watch
   * with no news (default 10000, 1..60000). Output is answered as soon as
   * it is there whatever this is; it only sets how often an idle run is
   * asked about again. */
  waitMs?: number;
}

/** Where a started run lives: watchRun and cancelRun need both (a run is in
 * the run table of the server that started it). */
export interface RunHandle {
  runId: string;
  /** The endpoint key StartRun went to ("tcp://10.0.0.7:7878"). */
  endpoint: string;
}

export interface StartedRun extends RunHandle {
  /** Calls StartRun took (RESOURCE_EXHAUSTED/UNAVAILABLE retries). */
  attempts: number;
}

export type RunStateName = "queued" | "running" | "done" | "unspecified";

export interface WatchFrom {
  /** Bytes of each stream the caller already has (default 0). */
  stdoutOffset?: number;
  stderrOffset?: number;
  /** How long the server may hold the call with no news (default 0: answer
   * at once; at most 60000). The reply is awaited this + replyMarginMs. */
  waitMs?: number;
}

/** One WatchRun reply. */
export interface RunUpdate {
  state: RunStateName;
  /** The output past the offsets asked for (at most 256 KiB of each). */
  stdout: Uint8Array;
  stderr: Uint8Array;
  /** Where stdout and stderr above start in their streams. */
  stdoutOffset: number;
  stderrOffset: number;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  /** The run has ended and this reply reaches the end of both streams. */
  complete: boolean;
  /** With complete: the outcome (an outcome other than OK rejects instead). */
  result: RunResult | undefined;
}

export interface LimitsInput {
  timeoutMs?: number | bigint;
  cpuTimeMs?: number | bigint;
  memoryBytes?: number | bigint;
  outputBytes?: number | bigint;
  maxProcesses?: number | bigint;
  diskBytes?: number | bigint;
  openFiles?: number | bigint;
}

export type FileInput =
  | { path: string; content: Uint8Array | string }
  | { path: string; url: string };

export interface RunCodeParams {
  code: string;
  requirements?: readonly string[];
  files?: readonly FileInput[];
  stdin?: Uint8Array | string;
  args?: readonly string[];
  env?: Readonly<Record<string, string>>;
  sessionId?: string;
  runId?: string;
  limits?: LimitsInput;
  /** The runtime by name: "python" (unset: the default), "python-zygote",
   * "bash", ... (ServerInfo.runtimeInfo lists them). */
  runtime?: string;
  /** Instead of runtime, Piston's way (docs/RUNTIMES.md): a language, name
   * or alias ("python", "py", "bash", "c++"), and a node-semver range
   * ("3.x", "^20"; unset: any). runtime with language, version without
   * language, an unknown language or a range nothing satisfies:
   * InvalidArgument from the server, naming the runtimes there are. */
  language?: string;
  version?: string;
  /** A compiled runtime's compile stage limits, as limits (unset: its
   * defaults); refused for a runtime without a compile stage. */
  compileLimits?: LimitsInput;
  /** What a new session keeps (docs/INTERPRETER.md): "files" (the default
   * for a new session) or "interpreter" (one Python lives between the
   * session's calls; each call is a notebook cell). Unset: the session's. */
  sessionMode?: SessionModeName;
  /** The hosts the run's code may reach through the server's egress proxy
   * (docs/EGRESS.md), one entry each: "host", "*.domain", "*" or a CIDR,
   * each with an optional ":port" (without: 80 and 443), e.g.
   * ["pypi.org", "*.example.com:443"]. Unset or empty: no network. An entry
   * outside the server's --egress-allow is InvalidArgument (nothing ran). */
  allowNet?: readonly string[];
}

export type SessionModeName = "files" | "interpreter";

export type HealthStatus = "SERVING" | "NOT_SERVING" | "UNKNOWN";

/** One ready zygote (GetInfo's zygoteMemory): the worker slot it serves,
 * the requirements environment it was started for ("" none), its resident
 * and proportional memory (/proc/PID/smaps_rollup), runs handed to it and
 * its age. */
export interface ZygoteMemory {
  slot: number;
  environment: string;
  rssBytes: number;
  pssBytes: number;
  forks: number;
  ageMs: number;
}

/** One runtime the server offers (docs/RUNTIMES.md): the name runtime
 * takes, the language (and aliases) language takes, its version
 * (MAJOR.MINOR.PATCH, asked of its binary at start), whether its self-test
 * passed at start (else runs naming it are FailedPrecondition with
 * unavailableReason), whether it has a compile stage, and its file name in
 * /workspace. */
export interface RuntimeInfo {
  name: string;
  language: string;
  version: string;
  aliases: string[];
  available: boolean;
  unavailableReason: string;
  compiled: boolean;
  file: string;
}

export interface ServerLimits {
  timeoutMs: number;
  cpuTimeMs: number;
  memoryBytes: number;
  outputBytes: number;
  maxProcesses: number;
  diskBytes: number;
  openFiles: number;
}

export interface ServerInfo {
  endpoint: string;
  version: string;
  runtimes: string[];
  isolation: {
    backend: string;
    cgroupPath: string;
    seccomp: boolean;
    namespaces: string;
    uidBase: number;
    slots: number;
    memoryPerProcess: boolean;
    cpuSharePerSlot: boolean;
  };
  defaultLimits: ServerLimits;
  maxLimits: ServerLimits;
  workers: number;
  queueCapacity: number;
  queueDepth: number;
  running: number;
  maxMessageBytes: number;
  requestsTotal: number;
  runsTotal: number;
  rejectedTotal: number;
  sessions: number;
  requirementsAvailable: boolean;
  environments: number;
  environmentBytes: number;
  environmentBuildsTotal: number;
  environmentBuildFailuresTotal: number;
  /** StartRun runs in the server's run table, and WatchRun/CancelRun calls
   * waiting there now (docs/STREAMING.md). */
  startedRuns: number;
  watchers: number;
  /** Zygote mode (runtime "python-zygote", docs/ZYGOTE.md): whether it is
   * on, the modules each zygote imports, when a zygote is replaced, zygotes
   * running and the memory their imports hold, and totals since the start. */
  zygoteEnabled: boolean;
  zygotePreload: string[];
  zygoteMaxForks: number;
  zygoteMaxAgeS: number;
  zygotes: number;
  zygoteMemoryBytes: number;
  zygoteStartsTotal: number;
  zygoteStartFailuresTotal: number;
  zygoteForksTotal: number;
  zygoteRecycledTotal: number;
  /** Each ready zygote, by slot (empty without --zygote). */
  zygoteMemory: ZygoteMemory[];
  /** Interpreter sessions (docs/INTERPRETER.md): at most maxInterpreters
   * living at once (0: the mode is off), living now, totals since the
   * start, and when an idle or old one ends. */
  maxInterpreters: number;
  interpreters: number;
  interpreterStartsTotal: number;
  interpreterEvictionsTotal: number;
  interpreterLostTotal: number;
  interpreterIdleS: number;
  interpreterMaxLifetimeS: number;
  /** What a run's allowNet may ask of this server (--egress-allow,
   * docs/EGRESS.md); empty: runs get no network. */
  egressAllow: string[];
  /** Every runtime, available or not (runtimes: the names of the available). */
  runtimeInfo: RuntimeInfo[];
}

export type FileType = "file" | "directory" | "symlink" | "other";

export interface FileEntry {
  name: string;
  relativePath: string;
  type: FileType;
  size: number;
}

export interface FileList {
  entries: FileEntry[];
  truncated: boolean;
}

export interface FileContent {
  content: Uint8Array;
  size: number;
  eof: boolean;
}
