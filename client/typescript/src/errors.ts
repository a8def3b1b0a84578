/* errors.ts: every failed call is a SandboxError subclass carrying gRPC's
 * status code (as on the wire, proto/sandbox.proto's Code) and the server's
 * message, or the client's own reason for the client-side statuses.
 *
 * The one fact a caller must be able to rely on: `mayHaveRun` is false only
 * when the server said nothing ran (it answered with a status) or when the
 * request never left this process. UNKNOWN and a client-side
 * DEADLINE_EXCEEDED are never "nothing ran". */

export const Code = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  ALREADY_EXISTS: 6,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  OUT_OF_RANGE: 11,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  /** Not used by sandboxd; named so that 16 keeps gRPC's number. */
  DATA_LOSS: 15,
  /** The server has --tenants and the call's API key or certificate is
   * missing or belongs to no tenant: nothing ran; never retried. */
  UNAUTHENTICATED: 16,
} as const;

const CODE_NAMES: readonly string[] = Object.keys(Code);

export function codeName(code: number): string {
  return CODE_NAMES[code] ?? `CODE_${code}`;
}

export interface ErrorDetails {
  /** The server answered with this status (false: decided by the client). */
  fromServer: boolean;
  /** The code may have run (UNKNOWN, client-side DEADLINE_EXCEEDED, an
   * abandoned call that had been sent). */
  mayHaveRun: boolean;
  /** The endpoint that answered or was called, when one was. */
  endpoint?: string | undefined;
  /** Calls made, retries included. */
  attempts?: number | undefined;
}

export class SandboxError extends Error {
  override name = "SandboxError";
  readonly fromServer: boolean;
  readonly mayHaveRun: boolean;
  readonly endpoint: string | undefined;
  readonly attempts: number;

  constructor(
    readonly code: number,
    message: string,
    details: ErrorDetails,
  ) {
    super(`${codeName(code)}: ${message}`);
    this.fromServer = details.fromServer;
    this.mayHaveRun = details.mayHaveRun;
    this.endpoint = details.endpoint;
    this.attempts = details.attempts ?? 0;
  }

  get codeName(): string {
    return codeName(this.code);
  }
}

export class Cancelled extends SandboxError {
  override name = "Cancelled";
}
export class Unknown extends SandboxError {
  override name = "Unknown";
}
export class InvalidArgument extends SandboxError {
  override name = "InvalidArgument";
}
export class DeadlineExceeded extends SandboxError {
  override name = "DeadlineExceeded";
}
export class NotFound extends SandboxError {
  override name = "NotFound";
}
export class AlreadyExists extends SandboxError {
  override name = "AlreadyExists";
}
export class PermissionDenied extends SandboxError {
  override name = "PermissionDenied";
}
export class ResourceExhausted extends SandboxError {
  override name = "ResourceExhausted";
}
export class FailedPrecondition extends SandboxError {
  override name = "FailedPrecondition";
}
export class Aborted extends SandboxError {
  override name = "Aborted";
}
export class OutOfRange extends SandboxError {
  override name = "OutOfRange";
}
export class Unimplemented extends SandboxError {
  override name = "Unimplemented";
}
export class Internal extends SandboxError {
  override name = "Internal";
}
export class Unavailable extends SandboxError {
  override name = "Unavailable";
}

/** The server has --tenants and the call carried no API key, or one (or a
 * client certificate) no tenant holds: nothing ran. Never retried. */
export class Unauthenticated extends SandboxError {
  override name = "Unauthenticated";
}

type ErrorClass = new (code: number, message: string, details: ErrorDetails) => SandboxError;

const BY_CODE: ReadonlyMap<number, ErrorClass> = new Map<number, ErrorClass>([
  [Code.CANCELLED, Cancelled],
  [Code.UNKNOWN, Unknown],
  [Code.INVALID_ARGUMENT, InvalidArgument],
  [Code.DEADLINE_EXCEEDED, DeadlineExceeded],
  [Code.NOT_FOUND, NotFound],
  [Code.ALREADY_EXISTS, AlreadyExists],
  [Code.PERMISSION_DENIED, PermissionDenied],
  [Code.RESOURCE_EXHAUSTED, ResourceExhausted],
  [Code.FAILED_PRECONDITION, FailedPrecondition],
  [Code.ABORTED, Aborted],
  [Code.OUT_OF_RANGE, OutOfRange],
  [Code.UNIMPLEMENTED, Unimplemented],
  [Code.INTERNAL, Internal],
  [Code.UNAVAILABLE, Unavailable],
  [Code.UNAUTHENTICATED, Unauthenticated],
]);

/** The subclass for a status code; a code this client does not know (a
 * newer server) becomes a plain SandboxError with that code. */
export function errorFor(code: number, message: string, details: ErrorDetails): SandboxError {
  const Cls = BY_CODE.get(code) ?? SandboxError;
  return new Cls(code, message, details);
}

/** The same error, saying the code may have run. A call made after a run
 * was started (WatchRun, CancelRun) that fails proves nothing about the
 * run: a NOT_FOUND or a refused connection then does not mean "nothing
 * ran". */
export function mayHaveRunAfterAll(e: SandboxError): SandboxError {
  if (e.mayHaveRun) {
    return e;
  }
  const prefix = `${codeName(e.code)}: `;
  const message = e.message.startsWith(prefix) ? e.message.slice(prefix.length) : e.message;
  return errorFor(e.code, message, { fromServer: e.fromServer, mayHaveRun: true, endpoint: e.endpoint, attempts: e.attempts });
}
