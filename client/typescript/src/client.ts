/* client.ts: the sandboxd client: envelopes, deadlines, retries, methods.
 *
 * The rules are the C client's (client/client.c; docs/CLIENTS.md,
 * "At-most-once (every client)"):
 * - each call's envelope carries deadline_unix_ms = now + queueWaitMs; the
 *   reply is awaited for queueWaitMs + the run's timeout (60 s when the
 *   request leaves it to the server) + replyMarginMs;
 * - only RESOURCE_EXHAUSTED and UNAVAILABLE answered by a server are retried
 *   (they prove nothing ran), with backoff, preferably on another endpoint;
 * - a connection broken after the request was sent is UNKNOWN, no reply in
 *   time is DEADLINE_EXCEEDED: never retried, never sent anywhere else;
 * - a request over 4 KiB is checked against the server's --max-message-bytes
 *   (asked once per endpoint with GetInfo) and this client's own cap: nng
 *   drops an oversized message with its connection, so it is refused here
 *   with INVALID_ARGUMENT and nothing is sent.
 * Streams (docs/STREAMING.md; stream.ts has the loop): StartRun chooses its
 * endpoint like any call; WatchRun and CancelRun go to that same endpoint
 * (the run table is per server) and never move. A WatchRun's reply is
 * awaited its wait_ms + replyMarginMs.
 * The public types are in types.ts, the message converters in convert.ts. */
import { create, type DescMessage, type MessageInitShape, type MessageShape, toBinary } from "@bufbuild/protobuf";

import { TransportError } from "./connection.js";
import { apiKeyFrom } from "./credential.js";
import {
  decode,
  fileContentOf,
  fileListOf,
  healthStatus,
  METHOD,
  outcomeOf,
  runCodeRequest,
  runStateName,
  runUpdateOf,
  serverInfoOf,
  toUint64,
} from "./convert.js";
import { Code, type ErrorDetails, errorFor, mayHaveRunAfterAll, SandboxError } from "./errors.js";
import { type Endpoint, type EndpointStatus, Fleet } from "./fleet.js";
import {
  CancelRunRequestSchema,
  CancelRunResponseSchema,
  CloseSessionRequestSchema,
  CloseSessionResponseSchema,
  GetInfoRequestSchema,
  GetInfoResponseSchema,
  HealthRequestSchema,
  HealthResponseSchema,
  ListFilesRequestSchema,
  ListFilesResponseSchema,
  ReadFileRequestSchema,
  ReadFileResponseSchema,
  ReplyEnvelopeSchema,
  RequestEnvelopeSchema,
  RunCodeRequestSchema,
  RunCodeResponseSchema,
  type RunState,
  StartRunResponseSchema,
  WatchRunRequestSchema,
  type WatchRunResponse,
  WatchRunResponseSchema,
} from "./gen/sandbox_pb.js";
import { RunResult } from "./result.js";
import { type RunCalls, RunStream } from "./stream.js";
import type {
  CallOptions,
  ClientOptions,
  FileContent,
  FileList,
  HealthStatus,
  RunCodeParams,
  RunHandle,
  RunStateName,
  RunUpdate,
  ServerInfo,
  StartedRun,
  StreamOptions,
  WatchFrom,
} from "./types.js";

/** The smallest --max-message-bytes a server accepts: requests up to this
 * size never need the server's own cap. */
const SMALLEST_SERVER_CAP = 4096;
/** When the request leaves timeout_ms to the server: assume the largest a
 * default server allows, so a slow but legal run is not cut off. */
const UNKNOWN_RUN_TIMEOUT_MS = 60000;
/** The SP request id REQ puts before the envelope: counted by the server's cap. */
const SP_REQUEST_ID_BYTES = 4;
/** A stream's WatchRun long poll (docs/STREAMING.md's loop), and the
 * largest wait_ms the contract allows. */
const DEFAULT_WATCH_WAIT_MS = 10000;
const MAX_WATCH_WAIT_MS = 60000;
/** How long sandboxd holds a CancelRun for the run to end before it
 * answers with the state then (server/rpc/runs.h, RUNS_CANCEL_WAIT_MS). */
const SERVER_CANCEL_WAIT_MS = 10000;
/** How long a call waits for a reachable endpoint: the same default in every
 * sandboxd client (sandbox-run's --connect-timeout-ms, the C library's
 * SBXC_CONNECT_TIMEOUT_DEFAULT_MS, Python's connect_timeout_s). */
export const DEFAULT_CONNECT_TIMEOUT_MS = 5000;
/** The statuses a call is sent again after: a server answers them only
 * when nothing ran (all workers busy and the queue full, or draining). */
const RETRIABLE_CODES: ReadonlySet<number> = new Set([Code.RESOURCE_EXHAUSTED, Code.UNAVAILABLE]);

interface Settings {
  retries: number;
  queueWaitMs: number;
  replyMarginMs: number;
  connectTimeoutMs: number;
  maxRequestBytes: number;
  retryBaseMs: number;
  retryMaxMs: number;
}

interface CallSpec<I extends DescMessage, O extends DescMessage> {
  method: string;
  input: I;
  output: O;
  request: MessageShape<I>;
  runTimeoutMs: number;
  sessionId?: string | undefined;
  signal?: AbortSignal | undefined;
  /** The signal only stops the call before it is sent (StartRun). */
  keepWhenSent?: boolean | undefined;
  /** The reply is awaited this long instead of queue wait + run timeout +
   * margin (WatchRun: its wait_ms + margin). */
  replyTimeoutMs?: number | undefined;
  /** One try, on this endpoint only (the size check's GetInfo; WatchRun
   * and CancelRun, on the endpoint their StartRun went to). */
  endpoint?: Endpoint | undefined;
}

interface Answer<O extends DescMessage> {
  response: MessageShape<O>;
  endpoint: string;
  endpointRef: Endpoint;
  attempts: number;
}

/** A run as a stream sees it once StartRun has answered. */
interface Started {
  runId: string;
  endpoint: Endpoint;
  attempts: number;
  /** Watches refused in a row for --max-watchers (watchStarted's backoff). */
  refusals: number;
}

let requestCounter = 0;

export class Client {
  /** The API key (RequestEnvelope.credential), "" for none: a private
   * field, so that util.inspect, console.log and JSON.stringify of the
   * client never show it. One per client, for its life: the fleet's
   * session pins are its tenant's alone. */
  readonly #apiKey: string;
  private readonly fleet: Fleet;
  private readonly settings: Settings;
  private readonly capQueries = new WeakMap<Endpoint, Promise<number>>();

  constructor(endpoints: string | readonly string[], opts: ClientOptions = {}) {
    const urls = typeof endpoints === "string" ? [endpoints] : [...endpoints];
    this.#apiKey = apiKeyFrom(opts.apiKey); // before any connection: a bad key opens nothing
    const connectTimeoutMs = nonNegative(
      "connectTimeoutMs",
      opts.connectTimeoutMs ?? opts.waitForEndpointMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
    );
    this.settings = {
      retries: nonNegative("retries", opts.retries ?? 3),
      queueWaitMs: nonNegative("queueWaitMs", opts.queueWaitMs ?? 30000),
      replyMarginMs: nonNegative("replyMarginMs", opts.replyMarginMs ?? 5000),
      connectTimeoutMs,
      maxRequestBytes: nonNegative("maxRequestBytes", opts.maxRequestBytes ?? 8 << 20),
      retryBaseMs: nonNegative("retryBaseMs", opts.retryBaseMs ?? 50),
      retryMaxMs: nonNegative("retryMaxMs", opts.retryMaxMs ?? 2000),
    };
    this.fleet = new Fleet(urls, {
      connectTimeoutMs,
      maxReplyBytes: nonNegative("maxReplyBytes", opts.maxReplyBytes ?? 1 << 30),
      tls: opts.tls,
      resolveIntervalMs: nonNegative("resolveIntervalMs", opts.resolveIntervalMs ?? 30000),
      reconnectBaseMs: nonNegative("reconnectBaseMs", opts.reconnectBaseMs ?? 100),
      reconnectMaxMs: nonNegative("reconnectMaxMs", opts.reconnectMaxMs ?? 5000),
      resolver: opts.resolver,
    });
  }

  /** Runs code. Resolves with the run's result whatever the program did
   * (look at killedBy and exitCode); rejects with a SandboxError when the
   * call failed. */
  async runCode(params: RunCodeParams, opts: CallOptions = {}): Promise<RunResult> {
    const request = runCodeRequest(params);
    const timeout = Number(request.limits?.timeoutMs ?? 0n);
    const answer = await this.call({
      method: METHOD.runCode,
      input: RunCodeRequestSchema,
      output: RunCodeResponseSchema,
      request,
      runTimeoutMs: timeout > 0 ? timeout : UNKNOWN_RUN_TIMEOUT_MS,
      sessionId: params.sessionId,
      signal: opts.signal,
    });
    return new RunResult(answer.response, answer.endpoint, answer.attempts);
  }

  /**
   * Runs code and streams its output as it comes (docs/STREAMING.md): an
   * async iterable of chunks with `runId`, `cancel()` and `result` (see
   * RunStream). StartRun is sent at once and goes where runCode would;
   * WatchRun and CancelRun go to the same endpoint. Aborting
   * `opts.signal`, calling cancel(), or leaving a `for await` early cancels
   * the run on the server.
   */
  stream(params: RunCodeParams, opts: StreamOptions = {}): RunStream {
    const waitMs = opts.waitMs ?? DEFAULT_WATCH_WAIT_MS;
    let run: Started | undefined;
    const started = (): Started => {
      if (run === undefined) {
        throw new Error("RunStream: a call before StartRun answered"); // stream.ts never does
      }
      return run;
    };
    const calls: RunCalls = {
      start: async (signal) => {
        checkWaitMs(waitMs, 1);
        run = await this.start(params, signal);
        return run.runId;
      },
      watch: (out, err) => this.watchStarted(started(), out, err, waitMs),
      cancel: async () => {
        const s = started();
        await this.cancelOn(s.endpoint, s.runId).catch((e: unknown) => {
          throw e instanceof SandboxError ? mayHaveRunAfterAll(e) : e;
        });
      },
      outcome: (w) => {
        const s = started();
        return outcomeOf(w, s.endpoint.address.key, s.attempts);
      },
    };
    return new RunStream(calls, opts.signal);
  }

  /** StartRun: the run is validated and queued; its id and endpoint come
   * back at once. Refused as runCode would be (nothing ran). Follow it with
   * watchRun until `complete` (or use stream(), which does). */
  async startRun(params: RunCodeParams, opts: CallOptions = {}): Promise<StartedRun> {
    const s = await this.start(params, opts.signal);
    return { runId: s.runId, endpoint: s.endpoint.address.key, attempts: s.attempts };
  }

  /** One WatchRun, on the endpoint of `run` (a bare run id only when this
   * client has a single endpoint). A complete reply whose outcome is not OK
   * rejects with runCode's error for it; NotFound for a run the server does
   * not hold (never started, already read, expired). */
  async watchRun(run: string | RunHandle, from: WatchFrom = {}, opts: CallOptions = {}): Promise<RunUpdate> {
    const { runId, endpoint } = this.endpointOf(run);
    const waitMs = from.waitMs ?? 0;
    checkWaitMs(waitMs, 0);
    const stdoutOffset = toUint64("stdout_offset", from.stdoutOffset ?? 0);
    const stderrOffset = toUint64("stderr_offset", from.stderrOffset ?? 0);
    const w = await this.watchOn(endpoint, runId, stdoutOffset, stderrOffset, waitMs, opts.signal);
    return runUpdateOf(w, endpoint.address.key);
  }

  /** CancelRun on the endpoint of `run`: resolves (with the run's state,
   * "done") once the run has ended and nothing of it is alive; a queued run
   * never starts. Cancelling an ended run changes nothing. */
  async cancelRun(run: string | RunHandle, opts: CallOptions = {}): Promise<RunStateName> {
    const { runId, endpoint } = this.endpointOf(run);
    return runStateName(await this.cancelOn(endpoint, runId, opts.signal));
  }

  async health(opts: CallOptions = {}): Promise<HealthStatus> {
    const a = await this.simple(METHOD.health, HealthRequestSchema, {}, HealthResponseSchema, opts);
    return healthStatus(a.response.status);
  }

  async info(opts: CallOptions = {}): Promise<ServerInfo> {
    const a = await this.simple(METHOD.getInfo, GetInfoRequestSchema, {}, GetInfoResponseSchema, opts);
    return serverInfoOf(a.response, a.endpoint);
  }

  async closeSession(sessionId: string, opts: CallOptions = {}): Promise<void> {
    await this.simple(METHOD.closeSession, CloseSessionRequestSchema, { sessionId }, CloseSessionResponseSchema, opts, sessionId);
    this.fleet.forgetSession(sessionId);
  }

  async listFiles(sessionId: string, path = "", opts: CallOptions = {}): Promise<FileList> {
    const a = await this.simple(METHOD.listFiles, ListFilesRequestSchema, { sessionId, path }, ListFilesResponseSchema, opts, sessionId);
    return fileListOf(a.response);
  }

  /** Reads up to `length` bytes at `offset` (0: the server's cap). */
  async readFile(
    sessionId: string,
    path: string,
    range: { offset?: number; length?: number } = {},
    opts: CallOptions = {},
  ): Promise<FileContent> {
    const req = {
      sessionId,
      path,
      offset: toUint64("offset", range.offset ?? 0),
      length: toUint64("length", range.length ?? 0),
    };
    const a = await this.simple(METHOD.readFile, ReadFileRequestSchema, req, ReadFileResponseSchema, opts, sessionId);
    return fileContentOf(a.response);
  }

  /** The endpoints as this client sees them now (addresses after DNS). */
  endpoints(): EndpointStatus[] {
    return this.fleet.endpoints().map((e) => e.status());
  }

  /** Closes every connection once its calls are done; no new calls. */
  close(): void {
    this.fleet.close();
  }

  private async start(params: RunCodeParams, signal: AbortSignal | undefined): Promise<Started> {
    const answer = await this.call({
      method: METHOD.startRun,
      input: RunCodeRequestSchema,
      output: StartRunResponseSchema,
      request: runCodeRequest(params),
      runTimeoutMs: 0,
      sessionId: params.sessionId,
      signal,
      keepWhenSent: true,
    });
    if (answer.response.runId === "") {
      throw errorFor(Code.INTERNAL, "StartRun answered OK without a run_id", {
        fromServer: false,
        mayHaveRun: true,
        endpoint: answer.endpoint,
        attempts: answer.attempts,
      });
    }
    return { runId: answer.response.runId, endpoint: answer.endpointRef, attempts: answer.attempts, refusals: 0 };
  }

  private async watchOn(
    endpoint: Endpoint,
    runId: string,
    stdoutOffset: bigint,
    stderrOffset: bigint,
    waitMs: number,
    signal?: AbortSignal,
  ): Promise<WatchRunResponse> {
    const answer = await this.call({
      method: METHOD.watchRun,
      input: WatchRunRequestSchema,
      output: WatchRunResponseSchema,
      request: create(WatchRunRequestSchema, { runId, stdoutOffset, stderrOffset, waitMs }),
      runTimeoutMs: 0,
      replyTimeoutMs: waitMs + this.settings.replyMarginMs,
      endpoint,
      signal,
    });
    return answer.response;
  }

  /** A stream's watch. RESOURCE_EXHAUSTED (--max-watchers calls wait
   * already) gets what the server suggests: after a backoff, a watch with
   * wait_ms 0, answered at once and never refused for the cap; the backoff
   * grows while the refusals go on, so a full server is polled at most
   * every retryMaxMs. Any other failure ends the stream, saying the code
   * may have run (it was started). */
  private async watchStarted(s: Started, out: number, err: number, waitMs: number): Promise<WatchRunResponse> {
    let wait = waitMs;
    for (;;) {
      try {
        const w = await this.watchOn(s.endpoint, s.runId, BigInt(out), BigInt(err), wait);
        if (wait > 0) {
          s.refusals = 0;
        }
        return w;
      } catch (e) {
        if (!(e instanceof SandboxError)) {
          throw e;
        }
        if (!(e.fromServer && e.code === Code.RESOURCE_EXHAUSTED && wait > 0)) {
          throw mayHaveRunAfterAll(e);
        }
        await this.backoff(s.refusals++, undefined);
        wait = 0;
      }
    }
  }

  private async cancelOn(endpoint: Endpoint, runId: string, signal?: AbortSignal): Promise<RunState> {
    const answer = await this.call({
      method: METHOD.cancelRun,
      input: CancelRunRequestSchema,
      output: CancelRunResponseSchema,
      request: create(CancelRunRequestSchema, { runId }),
      runTimeoutMs: 0,
      replyTimeoutMs: SERVER_CANCEL_WAIT_MS + this.settings.replyMarginMs,
      endpoint,
      signal,
    });
    return answer.response.state;
  }

  /** The endpoint a run lives on: the handle's, or with a bare run id this
   * client's only endpoint. Refused here (nothing sent) otherwise. */
  private endpointOf(run: string | RunHandle): { runId: string; endpoint: Endpoint } {
    const nothingSent = { fromServer: false, mayHaveRun: false };
    const all = this.fleet.endpoints().filter((e) => !e.removed);
    if (typeof run === "string") {
      if (all.length !== 1) {
        throw errorFor(
          Code.INVALID_ARGUMENT,
          `run ${run}: this client has ${all.length} endpoints, and a run lives on the server that started it: pass the {runId, endpoint} startRun returned; nothing was sent`,
          nothingSent,
        );
      }
      return { runId: run, endpoint: all[0]! };
    }
    const endpoint = all.find((e) => e.address.key === run.endpoint);
    if (endpoint === undefined) {
      throw errorFor(
        Code.UNAVAILABLE,
        `run ${run.runId}: ${run.endpoint} is not one of this client's endpoints (any more); nothing was sent`,
        { ...nothingSent, endpoint: run.endpoint },
      );
    }
    return { runId: run.runId, endpoint };
  }

  private simple<I extends DescMessage, O extends DescMessage>(
    method: string,
    input: I,
    init: MessageInitShape<I>,
    output: O,
    opts: CallOptions,
    sessionId?: string,
  ): Promise<Answer<O>> {
    return this.call({ method, input, output, request: create(input, init), runTimeoutMs: 0, sessionId, signal: opts.signal });
  }

  /** One call with the retries that are safe (see the file comment). */
  private async call<I extends DescMessage, O extends DescMessage>(spec: CallSpec<I, O>): Promise<Answer<O>> {
    const payload = toBinary(spec.input, spec.request);
    const avoid = new Set<string>();
    const retries = spec.endpoint !== undefined ? 0 : this.settings.retries;
    for (let attempt = 1; ; attempt++) {
      const outcome = await this.attempt(spec, payload, avoid, attempt);
      if (!("retriable" in outcome)) {
        return outcome;
      }
      if (attempt > retries) {
        throw outcome.error;
      }
      avoid.add(outcome.endpoint);
      await this.backoff(attempt - 1, spec.signal);
    }
  }

  /** One try on one endpoint. Returns the answer, or a retriable refusal
   * (RESOURCE_EXHAUSTED/UNAVAILABLE from a server); throws anything else. */
  private async attempt<I extends DescMessage, O extends DescMessage>(
    spec: CallSpec<I, O>,
    payload: Uint8Array,
    avoid: Set<string>,
    attempt: number,
  ): Promise<Answer<O> | { retriable: true; error: SandboxError; endpoint: string }> {
    const lease = await this.lease(spec, avoid, attempt);
    const key = lease.endpoint.address.key;
    const details = (fromServer: boolean, mayHaveRun: boolean): ErrorDetails => ({ fromServer, mayHaveRun, endpoint: key, attempts: attempt });
    try {
      const requestId = `${Date.now().toString(16)}-${++requestCounter}`;
      const envelope = toBinary(
        RequestEnvelopeSchema,
        create(RequestEnvelopeSchema, {
          method: spec.method,
          requestId,
          deadlineUnixMs: BigInt(Date.now() + this.settings.queueWaitMs),
          payload,
          credential: this.#apiKey,
        }),
      );
      await this.checkSize(envelope.length, lease.endpoint, spec, details(false, false));
      const timeoutMs = spec.replyTimeoutMs ?? this.settings.queueWaitMs + spec.runTimeoutMs + this.settings.replyMarginMs;
      let replyBytes: Buffer;
      try {
        if (spec.keepWhenSent === true && spec.signal?.aborted === true) {
          throw new TransportError("aborted", false, "aborted before the request was sent");
        }
        replyBytes = await lease.conn.request(envelope, timeoutMs, spec.keepWhenSent === true ? undefined : spec.signal);
      } catch (err) {
        throw transportError(err, details);
      }
      const reply = decode(ReplyEnvelopeSchema, replyBytes, "sandbox.v1.ReplyEnvelope", details(false, true));
      if (reply.requestId !== "" && reply.requestId !== requestId) {
        throw errorFor(Code.INTERNAL, `the reply is for request ${reply.requestId}, not ${requestId}`, details(false, true));
      }
      if (reply.status !== Code.OK) {
        const error = errorFor(reply.status, reply.message, details(true, false));
        if (RETRIABLE_CODES.has(reply.status)) {
          return { retriable: true, error, endpoint: key };
        }
        throw error;
      }
      if (spec.sessionId !== undefined && spec.sessionId !== "") {
        this.fleet.pinSession(spec.sessionId, lease.endpoint);
      }
      const response = decode(spec.output, reply.payload, spec.output.typeName, details(false, true));
      return { response, endpoint: key, endpointRef: lease.endpoint, attempts: attempt };
    } finally {
      this.fleet.release(lease.endpoint);
    }
  }

  private async lease<I extends DescMessage, O extends DescMessage>(spec: CallSpec<I, O>, avoid: Set<string>, attempt: number) {
    if (spec.endpoint !== undefined) {
      spec.endpoint.assigned++;
      try {
        return { endpoint: spec.endpoint, conn: await spec.endpoint.connection() };
      } catch (err) {
        this.fleet.release(spec.endpoint);
        throw transportError(err, (f, m) => ({ fromServer: f, mayHaveRun: m, attempts: attempt }));
      }
    }
    try {
      return await this.fleet.acquire({
        avoid,
        sessionId: spec.sessionId,
        deadline: performance.now() + this.settings.connectTimeoutMs,
        timeoutMs: this.settings.connectTimeoutMs,
        signal: spec.signal,
      });
    } catch (err) {
      throw transportError(err, (f, m) => ({ fromServer: f, mayHaveRun: m, attempts: attempt }));
    }
  }

  /** Refuses a request that the server (or this client) would not take.
   * nng would drop it together with the connection, with no answer. */
  private async checkSize<I extends DescMessage, O extends DescMessage>(
    envelopeBytes: number,
    endpoint: Endpoint,
    spec: CallSpec<I, O>,
    details: ErrorDetails,
  ): Promise<void> {
    const wire = envelopeBytes + SP_REQUEST_ID_BYTES;
    if (wire > SMALLEST_SERVER_CAP && spec.method !== METHOD.getInfo) {
      const cap = await this.serverCap(endpoint);
      if (wire > cap) {
        throw errorFor(
          Code.INVALID_ARGUMENT,
          `the request is ${wire} bytes, more than the ${cap} the server accepts (its --max-message-bytes, from GetInfo); nothing was sent`,
          details,
        );
      }
    }
    if (wire > this.settings.maxRequestBytes) {
      throw errorFor(
        Code.INVALID_ARGUMENT,
        `the request is ${wire} bytes, more than this client's cap of ${this.settings.maxRequestBytes} (maxRequestBytes); nothing was sent`,
        details,
      );
    }
  }

  /** The endpoint's --max-message-bytes, asked once with GetInfo; Infinity
   * when the server would not say (an older or failing server). */
  private serverCap(endpoint: Endpoint): Promise<number> {
    if (endpoint.serverMaxBytes !== undefined) {
      return Promise.resolve(endpoint.serverMaxBytes);
    }
    let q = this.capQueries.get(endpoint);
    if (q === undefined) {
      q = this.call({
        method: METHOD.getInfo,
        input: GetInfoRequestSchema,
        output: GetInfoResponseSchema,
        request: create(GetInfoRequestSchema, {}),
        runTimeoutMs: 0,
        endpoint,
      }).then(
        (a) => {
          const cap = Number(a.response.maxMessageBytes);
          return cap >= SMALLEST_SERVER_CAP ? cap : Infinity;
        },
        () => Infinity,
      );
      q.then((cap) => {
        endpoint.serverMaxBytes = cap;
        this.capQueries.delete(endpoint);
      });
      this.capQueries.set(endpoint, q);
    }
    return q;
  }

  /** 50 ms, 100 ms, ... up to 2 s, plus up to 50% jitter. */
  private backoff(attempt: number, signal: AbortSignal | undefined): Promise<void> {
    const base = Math.min(this.settings.retryMaxMs, this.settings.retryBaseMs * 2 ** Math.min(attempt, 16));
    const ms = base + Math.random() * base * 0.5;
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(t);
        signal?.removeEventListener("abort", done);
        resolve();
      };
      const t = setTimeout(done, ms);
      signal?.addEventListener("abort", done, { once: true });
    });
  }
}

/** Maps a transport failure to the status the caller sees. */
function transportError(err: unknown, details: (fromServer: boolean, mayHaveRun: boolean) => ErrorDetails): SandboxError {
  if (err instanceof SandboxError) {
    return err;
  }
  if (!(err instanceof TransportError)) {
    return errorFor(Code.INTERNAL, String(err), details(false, true));
  }
  switch (err.kind) {
    case "aborted":
      return errorFor(
        Code.CANCELLED,
        err.sent
          ? `${err.message}: the call was abandoned here, not cancelled on the server; the code may still run`
          : `${err.message}; nothing was sent`,
        details(false, err.sent),
      );
    case "timeout":
      return errorFor(Code.DEADLINE_EXCEEDED, `${err.message}; the code may or may not have run`, details(false, true));
    case "closed":
      return errorFor(Code.UNKNOWN, `${err.message}; the code may or may not have run`, details(false, true));
    case "connect":
      return errorFor(Code.UNAVAILABLE, err.message, details(false, false));
  }
}

/** wait_ms: an integer from `min` (1 for a stream: 0 would poll without
 * pause) to 60000, the contract's cap; refused here, nothing sent. */
function checkWaitMs(v: number, min: number): void {
  if (!Number.isSafeInteger(v) || v < min || v > MAX_WATCH_WAIT_MS) {
    throw errorFor(Code.INVALID_ARGUMENT, `wait_ms: ${v} is not an integer from ${min} to ${MAX_WATCH_WAIT_MS}; nothing was sent`, {
      fromServer: false,
      mayHaveRun: false,
    });
  }
}

function nonNegative(name: string, v: number): number {
  if (!Number.isFinite(v) || v < 0) {
    throw new TypeError(`ClientOptions.${name}: ${v} is not a non-negative number`);
  }
  return v;
}
