/* stream.ts: a run watched while it runs (docs/STREAMING.md). StartRun,
 * then WatchRun long polls from the offsets already seen until the reply
 * that is complete; CancelRun on cancel(), on the caller's AbortSignal, or
 * when the consumer stops iterating early (the iterator's return()).
 *
 * What it must never do: repeat or reorder output (the server's offsets
 * decide, an overlap is cut off), leave a run running because its consumer
 * went away, send CancelRun twice, or abandon a StartRun that was sent (its
 * run id, which may be the only handle on the run, would be lost). The
 * calls themselves, and which endpoint they go to, are the client's
 * (client.ts, RunCalls). */
import type { SandboxError } from "./errors.js";
import type { WatchRunResponse } from "./gen/sandbox_pb.js";
import type { RunResult } from "./result.js";

export type OutputStreamName = "stdout" | "stderr";

/** Bytes of output as they arrived: they may end inside a UTF-8 sequence. */
export interface OutputChunk {
  stream: OutputStreamName;
  data: Uint8Array;
}

/** Output decoded as UTF-8 across chunk boundaries (RunStream.text()). */
export interface TextChunk {
  stream: OutputStreamName;
  text: string;
}

/** The calls a stream makes, bound by the client to one run: watch and
 * cancel go to the endpoint the start went to. */
export interface RunCalls {
  /** StartRun; `signal` stops it only before it is sent. The run id. */
  start(signal: AbortSignal): Promise<string>;
  /** One WatchRun from these offsets; its errors say the run may have run. */
  watch(stdoutOffset: number, stderrOffset: number): Promise<WatchRunResponse>;
  /** CancelRun: resolves once the server says the run has ended. */
  cancel(): Promise<void>;
  /** A complete reply's outcome: the result, or throws its error. */
  outcome(reply: WatchRunResponse): RunResult;
}

const DONE: IteratorReturnResult<undefined> = { done: true, value: undefined };

/**
 * One run, streamed. It starts at once (client.stream()) and keeps watching
 * whether or not anyone iterates: `result` alone is enough. Chunks wait
 * until they are read, bounded by the run's output limit (each stream is
 * capped at limits.output_bytes on the server).
 *
 * - Iterate it (once) for OutputChunks, or text() for TextChunks. The
 *   iteration ends when the run has ended and all of its output was
 *   yielded; a failed call or an outcome other than OK throws the error
 *   `result` rejects with.
 * - Leaving a `for await` early (break, return, an exception in its body)
 *   cancels the run: return() sends CancelRun and resolves when the server
 *   says the run has ended. `result` still settles (killedBy "cancelled",
 *   or Cancelled when it had not started).
 * - runId resolves when StartRun has answered (it rejects as `result` does
 *   when StartRun failed).
 */
export class RunStream implements AsyncIterable<OutputChunk> {
  /** The server's run id (or the one the request chose), once StartRun answered. */
  readonly runId: Promise<string>;
  /** The outcome, as runCode would have given it: the RunResult when the
   * status is OK (look at killedBy and exitCode), else the same
   * SandboxError subclass runCode rejects with. */
  readonly result: Promise<RunResult>;

  private readonly started: Promise<string>;
  private readonly startAbort = new AbortController();
  private readonly chunks: OutputChunk[] = [];
  private waiters: Array<() => void> = [];
  /** The outcome (or the failure) is known. */
  private ended = false;
  private failure: unknown = undefined;
  private failed = false;
  /** An iterator was handed out (a stream is iterated once). */
  private iterated = false;
  /** The consumer is done: output is dropped, not kept. */
  private closed = false;
  private cancelling: Promise<void> | null = null;
  private settle!: { resolve: (r: RunResult) => void; reject: (e: unknown) => void };
  private readonly onAbort = (): void => {
    this.cancel().catch(() => {
      /* the failure reaches `result` through the watch */
    });
  };

  constructor(
    private readonly calls: RunCalls,
    private readonly signal?: AbortSignal,
  ) {
    this.result = new Promise<RunResult>((resolve, reject) => {
      this.settle = { resolve, reject };
    });
    // Awaiting `result` is optional (iterating is enough): never an
    // unhandled rejection.
    this.result.catch(() => {});
    if (signal?.aborted) {
      this.startAbort.abort();
    } else {
      signal?.addEventListener("abort", this.onAbort, { once: true });
    }
    this.started = calls.start(this.startAbort.signal);
    this.runId = this.started;
    this.runId.catch(() => {});
    void this.pump();
  }

  /**
   * Cancels the run (CancelRun, sent once however often this is called or
   * the signal fires). Before StartRun was sent, nothing is sent at all and
   * the stream ends with Cancelled. Resolves when the server says the run
   * has ended (nothing of it is alive then), or at once when it had already
   * ended here; rejects when CancelRun itself failed (the connection lost,
   * no reply in time): `result` still says how the run ended.
   */
  cancel(): Promise<void> {
    if (this.cancelling === null) {
      this.cancelling = this.sendCancel();
      this.cancelling.catch(() => {}); // `void run.cancel()` must not crash the process
    }
    return this.cancelling;
  }

  [Symbol.asyncIterator](): AsyncIterator<OutputChunk> {
    if (this.iterated) {
      throw new TypeError("a RunStream can be iterated once (its chunks are not kept for a second reader)");
    }
    this.iterated = true;
    return {
      next: () => this.next(),
      return: async () => {
        await this.stop();
        return DONE;
      },
    };
  }

  /** The output as text: each stream decoded as UTF-8 with its own
   * TextDecoder in stream mode, so a character split between chunks comes
   * out whole; invalid bytes become U+FFFD. Iterates this stream (once), and
   * leaving it early cancels the run, as above. */
  text(): AsyncIterableIterator<TextChunk> {
    return decodeText(this[Symbol.asyncIterator]());
  }

  private async sendCancel(): Promise<void> {
    this.startAbort.abort(); // a StartRun not yet sent never will be
    try {
      await this.started;
    } catch {
      return; // it never started: nothing to cancel
    }
    if (this.ended) {
      return;
    }
    try {
      await this.calls.cancel();
    } catch (err) {
      if (!this.ended) {
        throw err;
      }
    }
  }

  private async pump(): Promise<void> {
    try {
      await this.started;
      let out = 0;
      let err = 0;
      for (;;) {
        const w = await this.calls.watch(out, err);
        out = this.take("stdout", w.stdout, w.stdoutOffset, out);
        err = this.take("stderr", w.stderr, w.stderrOffset, err);
        if (w.complete) {
          this.end(this.calls.outcome(w));
          return;
        }
      }
    } catch (e) {
      this.end(undefined, e);
    }
  }

  /** Queues the part of `data` past what this stream already has; returns
   * the new length of the stream. */
  private take(stream: OutputStreamName, data: Uint8Array, at: bigint, have: number): number {
    const start = Number(at);
    const end = start + data.length;
    if (end <= have) {
      return have;
    }
    if (!this.closed) {
      this.chunks.push({ stream, data: start >= have ? data : data.subarray(have - start) });
      this.wake();
    }
    return end;
  }

  private end(result: RunResult | undefined, error?: unknown): void {
    this.ended = true;
    this.signal?.removeEventListener("abort", this.onAbort);
    if (result !== undefined) {
      this.settle.resolve(result);
    } else {
      this.failed = true;
      this.failure = error;
      this.settle.reject(error as SandboxError);
    }
    this.wake();
  }

  private wake(): void {
    const ws = this.waiters;
    this.waiters = [];
    for (const w of ws) {
      w();
    }
  }

  private async next(): Promise<IteratorResult<OutputChunk>> {
    for (;;) {
      if (this.closed) {
        return DONE;
      }
      const chunk = this.chunks.shift();
      if (chunk !== undefined) {
        return { done: false, value: chunk };
      }
      if (this.ended) {
        this.closed = true;
        if (this.failed) {
          throw this.failure;
        }
        return DONE;
      }
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
  }

  /** The consumer left: drop the output; cancel a run still going. */
  private async stop(): Promise<void> {
    this.closed = true;
    this.chunks.length = 0;
    this.wake();
    if (!this.ended) {
      await this.cancel().catch(() => {
        /* `result` carries what happened */
      });
    }
  }
}

async function* decodeText(chunks: AsyncIterator<OutputChunk>): AsyncGenerator<TextChunk, void, undefined> {
  const decoders = { stdout: new TextDecoder("utf-8"), stderr: new TextDecoder("utf-8") };
  let finished = false;
  try {
    for (;;) {
      const r = await chunks.next();
      if (r.done === true) {
        break;
      }
      const text = decoders[r.value.stream].decode(r.value.data, { stream: true });
      if (text !== "") {
        yield { stream: r.value.stream, text };
      }
    }
    finished = true;
    for (const stream of ["stdout", "stderr"] as const) {
      const rest = decoders[stream].decode(); // a sequence cut off at the end: U+FFFD
      if (rest !== "") {
        yield { stream, text: rest };
      }
    }
  } finally {
    if (!finished) {
      await chunks.return?.();
    }
  }
}
