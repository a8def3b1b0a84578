/* index.ts: the public surface of @sandboxd/client. */
export { Client, DEFAULT_CONNECT_TIMEOUT_MS } from "./client.js";
export { API_KEY_ENV, API_KEY_MAX } from "./credential.js";
export {
  type CallOptions,
  type ClientOptions,
  type FileContent,
  type FileEntry,
  type FileInput,
  type FileList,
  type FileType,
  type HealthStatus,
  type LimitsInput,
  type RunCodeParams,
  type SessionModeName,
  type RunHandle,
  type RunStateName,
  type RunUpdate,
  type RuntimeInfo,
  type ServerInfo,
  type ServerLimits,
  type StartedRun,
  type StreamOptions,
  type WatchFrom,
  type ZygoteMemory,
} from "./types.js";
export {
  Aborted,
  AlreadyExists,
  Cancelled,
  Code,
  codeName,
  DeadlineExceeded,
  type ErrorDetails,
  FailedPrecondition,
  Internal,
  InvalidArgument,
  NotFound,
  OutOfRange,
  PermissionDenied,
  ResourceExhausted,
  SandboxError,
  Unauthenticated,
  Unavailable,
  Unimplemented,
  Unknown,
} from "./errors.js";
export { type EndpointState, type EndpointStatus, type Resolver } from "./fleet.js";
export { Artifact, type CompileResult, type Egress, type KilledBy, type KilledByName, RunResult, type SaveReport } from "./result.js";
export { type OutputChunk, type OutputStreamName, RunStream, type TextChunk } from "./stream.js";
