/* convert.ts: the message converters: a caller's parameters into sandbox.v1
 * request messages, and reply messages into the public types (types.ts).
 * Pure: no I/O and no state. Every reply byte came from the network: a
 * value this client does not know maps to a fallback name, never a crash;
 * an argument that cannot be encoded is refused here with
 * INVALID_ARGUMENT, nothing sent. */
import { create, type DescMessage, fromBinary, type MessageShape } from "@bufbuild/protobuf";

import { Code, type ErrorDetails, errorFor } from "./errors.js";
import {
  FileEntry_Type,
  type GetInfoResponse,
  HealthResponse_ServingStatus,
  type Limits as LimitsMessage,
  LimitsSchema,
  type ListFilesResponse,
  type ReadFileResponse,
  RunCodeRequestSchema,
  RunState,
  Sandbox,
  type WatchRunResponse,
} from "./gen/sandbox_pb.js";
import { RunResult } from "./result.js";
import type {
  FileContent,
  FileInput,
  FileList,
  FileType,
  HealthStatus,
  LimitsInput,
  RunCodeParams,
  RunStateName,
  RunUpdate,
  ServerInfo,
  ServerLimits,
} from "./types.js";

/** The sandbox.v1 method names an envelope carries. */
export const METHOD = {
  runCode: methodName(Sandbox.method.runCode.name),
  health: methodName(Sandbox.method.health.name),
  getInfo: methodName(Sandbox.method.getInfo.name),
  closeSession: methodName(Sandbox.method.closeSession.name),
  listFiles: methodName(Sandbox.method.listFiles.name),
  readFile: methodName(Sandbox.method.readFile.name),
  startRun: methodName(Sandbox.method.startRun.name),
  watchRun: methodName(Sandbox.method.watchRun.name),
  cancelRun: methodName(Sandbox.method.cancelRun.name),
};

function methodName(name: string): string {
  return `/${Sandbox.typeName}/${name}`;
}

const SESSION_MODES: Readonly<Record<string, number>> = { files: 1, interpreter: 2 };

export function decode<O extends DescMessage>(schema: O, bytes: Uint8Array, what: string, details: ErrorDetails): MessageShape<O> {
  try {
    return fromBinary(schema, bytes);
  } catch {
    throw errorFor(Code.INTERNAL, `the reply is not a valid ${what}`, details);
  }
}

export function runCodeRequest(params: RunCodeParams) {
  const mode = params.sessionMode;
  // Own keys only: `in` also finds Object.prototype's ("toString",
  // "__proto__"), which would put a function or an object in the enum field.
  if (mode !== undefined && !Object.hasOwn(SESSION_MODES, mode)) {
    throw new RangeError(`sessionMode: ${JSON.stringify(mode)} is not "files" or "interpreter"`);
  }
  const allowNet = allowNetOf(params.allowNet);
  return create(RunCodeRequestSchema, {
    code: params.code,
    requirements: [...(params.requirements ?? [])],
    files: (params.files ?? []).map(fileMessage),
    runId: params.runId ?? "",
    sessionId: params.sessionId ?? "",
    stdin: bytesOf(params.stdin),
    args: [...(params.args ?? [])],
    env: { ...(params.env ?? {}) },
    limits: limitsMessage(params.limits ?? {}),
    runtime: params.runtime ?? "",
    language: params.language ?? "",
    version: params.version ?? "",
    compileLimits: params.compileLimits === undefined ? undefined : limitsMessage(params.compileLimits),
    sessionMode: mode === undefined ? 0 : SESSION_MODES[mode],
    allowNet,
  });
}

/** allowNet's entries, checked: a bare string would be spread into its
 * characters, one host each. */
function allowNetOf(v: unknown): string[] {
  if (v === undefined) {
    return [];
  }
  if (!Array.isArray(v)) {
    const what = typeof v === "string" ? `a single string (${JSON.stringify(v)})` : v === null ? "null" : typeof v;
    throw new TypeError(`allowNet: an array of strings such as ["pypi.org"], not ${what}`);
  }
  return v.map((e: unknown, i) => {
    if (typeof e !== "string") {
      throw new TypeError(`allowNet[${i}]: a string, not ${e === null ? "null" : typeof e}`);
    }
    return e;
  });
}

/** A complete WatchRun reply's outcome, as runCode would have answered:
 * the result with OK, else the same error (the server said so: nothing
 * ran, as for runCode). */
export function outcomeOf(w: WatchRunResponse, endpoint: string, attempts: number): RunResult {
  if (w.status !== Code.OK) {
    throw errorFor(w.status, w.message, { fromServer: true, mayHaveRun: false, endpoint, attempts });
  }
  if (w.result === undefined) {
    throw errorFor(Code.INTERNAL, "a complete WatchRun reply with status OK carries no result", {
      fromServer: false,
      mayHaveRun: true,
      endpoint,
      attempts,
    });
  }
  return new RunResult(w.result, endpoint, attempts);
}

const RUN_STATE_NAMES: ReadonlyMap<RunState, RunStateName> = new Map([
  [RunState.QUEUED, "queued"],
  [RunState.RUNNING, "running"],
  [RunState.DONE, "done"],
]);

export function runStateName(s: RunState): RunStateName {
  return RUN_STATE_NAMES.get(s) ?? "unspecified";
}

function bytesOf(v: Uint8Array | string | undefined): Uint8Array {
  if (v === undefined) {
    return new Uint8Array(0);
  }
  return typeof v === "string" ? new TextEncoder().encode(v) : v;
}

function fileMessage(f: FileInput) {
  if ("url" in f) {
    return { path: f.path, source: { case: "url" as const, value: f.url } };
  }
  return { path: f.path, source: { case: "content" as const, value: bytesOf(f.content) } };
}

const LIMIT_FIELDS: ReadonlyArray<[keyof LimitsInput, keyof Omit<LimitsMessage, "$typeName" | "$unknown">, string]> = [
  ["timeoutMs", "timeoutMs", "timeout_ms"],
  ["cpuTimeMs", "cpuTimeMs", "cpu_time_ms"],
  ["memoryBytes", "memoryBytes", "memory_bytes"],
  ["outputBytes", "outputBytes", "output_bytes"],
  ["maxProcesses", "maxProcesses", "max_processes"],
  ["diskBytes", "diskBytes", "disk_bytes"],
  ["openFiles", "openFiles", "open_files"],
];

/** Limits as int64; negative values go through (the server names them),
 * values that are not integers are refused here: nothing is sent. */
function limitsMessage(l: LimitsInput): LimitsMessage {
  const m = create(LimitsSchema);
  for (const [from, to, wire] of LIMIT_FIELDS) {
    const v = l[from];
    if (v === undefined) {
      continue;
    }
    const big = typeof v === "bigint" ? v : Number.isSafeInteger(v) ? BigInt(v) : null;
    if (big === null || big < -(2n ** 63n) || big >= 2n ** 63n) {
      throw errorFor(Code.INVALID_ARGUMENT, `limits.${wire}: ${String(v)} is not a 64-bit integer; nothing was sent`, {
        fromServer: false,
        mayHaveRun: false,
      });
    }
    m[to] = big;
  }
  return m;
}

function limitsOut(l: LimitsMessage | undefined): ServerLimits {
  return {
    timeoutMs: Number(l?.timeoutMs ?? 0n),
    cpuTimeMs: Number(l?.cpuTimeMs ?? 0n),
    memoryBytes: Number(l?.memoryBytes ?? 0n),
    outputBytes: Number(l?.outputBytes ?? 0n),
    maxProcesses: Number(l?.maxProcesses ?? 0n),
    diskBytes: Number(l?.diskBytes ?? 0n),
    openFiles: Number(l?.openFiles ?? 0n),
  };
}

const FILE_TYPES: ReadonlyMap<FileEntry_Type, FileType> = new Map([
  [FileEntry_Type.FILE, "file"],
  [FileEntry_Type.DIRECTORY, "directory"],
  [FileEntry_Type.SYMLINK, "symlink"],
]);

function fileType(t: FileEntry_Type): FileType {
  return FILE_TYPES.get(t) ?? "other";
}

export function toUint64(field: string, v: number): bigint {
  if (!Number.isSafeInteger(v) || v < 0) {
    throw errorFor(Code.INVALID_ARGUMENT, `${field}: ${v} is not a non-negative integer; nothing was sent`, {
      fromServer: false,
      mayHaveRun: false,
    });
  }
  return BigInt(v);
}

const HEALTH_STATUSES: ReadonlyMap<HealthResponse_ServingStatus, HealthStatus> = new Map([
  [HealthResponse_ServingStatus.SERVING, "SERVING"],
  [HealthResponse_ServingStatus.NOT_SERVING, "NOT_SERVING"],
]);

export function healthStatus(s: HealthResponse_ServingStatus): HealthStatus {
  return HEALTH_STATUSES.get(s) ?? "UNKNOWN";
}

/** One WatchRun reply as watchRun answers it; a complete one whose outcome
 * is not OK throws (outcomeOf). */
export function runUpdateOf(w: WatchRunResponse, endpoint: string): RunUpdate {
  return {
    state: runStateName(w.state),
    stdout: w.stdout,
    stderr: w.stderr,
    stdoutOffset: Number(w.stdoutOffset),
    stderrOffset: Number(w.stderrOffset),
    stdoutTruncated: w.stdoutTruncated,
    stderrTruncated: w.stderrTruncated,
    complete: w.complete,
    result: w.complete ? outcomeOf(w, endpoint, 1) : undefined,
  };
}

export function fileListOf(r: ListFilesResponse): FileList {
  return {
    entries: r.entries.map((e) => ({
      name: e.name,
      relativePath: e.relativePath,
      type: fileType(e.type),
      size: Number(e.size),
    })),
    truncated: r.truncated,
  };
}

export function fileContentOf(r: ReadFileResponse): FileContent {
  return { content: r.content, size: Number(r.size), eof: r.eof };
}

export function serverInfoOf(r: GetInfoResponse, endpoint: string): ServerInfo {
  const iso = r.isolation;
  return {
    endpoint,
    version: r.version,
    runtimes: [...r.runtimes],
    isolation: {
      backend: iso?.backend ?? "",
      cgroupPath: iso?.cgroupPath ?? "",
      seccomp: iso?.seccomp ?? false,
      namespaces: iso?.namespaces ?? "",
      uidBase: iso?.uidBase ?? 0,
      slots: iso?.slots ?? 0,
      memoryPerProcess: iso?.memoryPerProcess ?? false,
      cpuSharePerSlot: iso?.cpuSharePerSlot ?? false,
    },
    defaultLimits: limitsOut(r.defaultLimits),
    maxLimits: limitsOut(r.maxLimits),
    workers: r.workers,
    queueCapacity: r.queueCapacity,
    queueDepth: r.queueDepth,
    running: r.running,
    maxMessageBytes: Number(r.maxMessageBytes),
    requestsTotal: Number(r.requestsTotal),
    runsTotal: Number(r.runsTotal),
    rejectedTotal: Number(r.rejectedTotal),
    sessions: r.sessions,
    requirementsAvailable: r.requirementsAvailable,
    environments: r.environments,
    environmentBytes: Number(r.environmentBytes),
    environmentBuildsTotal: Number(r.environmentBuildsTotal),
    environmentBuildFailuresTotal: Number(r.environmentBuildFailuresTotal),
    startedRuns: r.startedRuns,
    watchers: r.watchers,
    zygoteEnabled: r.zygoteEnabled,
    zygotePreload: [...r.zygotePreload],
    zygoteMaxForks: Number(r.zygoteMaxForks),
    zygoteMaxAgeS: Number(r.zygoteMaxAgeS),
    zygotes: r.zygotes,
    zygoteMemoryBytes: Number(r.zygoteMemoryBytes),
    zygoteStartsTotal: Number(r.zygoteStartsTotal),
    zygoteStartFailuresTotal: Number(r.zygoteStartFailuresTotal),
    zygoteForksTotal: Number(r.zygoteForksTotal),
    zygoteRecycledTotal: Number(r.zygoteRecycledTotal),
    zygoteMemory: r.zygoteMemory.map((z) => ({
      slot: z.slot,
      environment: z.environment,
      rssBytes: Number(z.rssBytes),
      pssBytes: Number(z.pssBytes),
      forks: Number(z.forks),
      ageMs: Number(z.ageMs),
    })),
    maxInterpreters: r.maxInterpreters,
    interpreters: r.interpreters,
    interpreterStartsTotal: Number(r.interpreterStartsTotal),
    interpreterEvictionsTotal: Number(r.interpreterEvictionsTotal),
    interpreterLostTotal: Number(r.interpreterLostTotal),
    interpreterIdleS: Number(r.interpreterIdleS),
    interpreterMaxLifetimeS: Number(r.interpreterMaxLifetimeS),
    egressAllow: [...r.egressAllow],
    runtimeInfo: r.runtimeInfo.map((x) => ({
      name: x.name,
      language: x.language,
      version: x.version,
      aliases: [...x.aliases],
      available: x.available,
      unavailableReason: x.unavailableReason,
      compiled: x.compiled,
      file: x.file,
    })),
  };
}
