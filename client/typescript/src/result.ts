/* result.ts: what a RunCode call returns, as plain TypeScript values, and
 * saving artifacts to disk.
 *
 * Artifact paths come from the sandbox, i.e. from untrusted code: saving
 * never writes outside the chosen directory, never follows a symlink it
 * finds there, and refuses paths with empty, "." or ".." components. */
import { constants as fsc } from "node:fs";
import { lstat, mkdir, open } from "node:fs/promises";
import * as path from "node:path";

import type { Artifact as ArtifactMessage, RunCodeResponse } from "./gen/sandbox_pb.js";

export type KilledByName = "none" | "timeout" | "memory" | "output_limit" | "signal" | "cancelled";
/** A value a newer server may send is passed through as "killed_by_<n>". */
export type KilledBy = KilledByName | `killed_by_${number}`;

/** Indexed by the wire value (proto/sandbox.proto's KilledBy). */
const KILLED_BY: readonly KilledByName[] = ["none", "timeout", "memory", "output_limit", "signal", "cancelled"];

export function killedByName(value: number): KilledBy {
  return KILLED_BY[value] ?? `killed_by_${value}`;
}

const utf8 = new TextDecoder("utf-8", { fatal: false });

/** Bytes as text, invalid UTF-8 replaced by U+FFFD (output is bytes). */
export function textOf(bytes: Uint8Array): string {
  return utf8.decode(bytes);
}

export class Artifact {
  readonly name: string;
  /** Below output/, "/"-separated, as the server reported it. */
  readonly relativePath: string;
  readonly size: number;
  readonly mime: string;
  readonly content: Uint8Array;
  /** Over a cap of the server: metadata only, content is empty. */
  readonly contentOmitted: boolean;

  constructor(m: ArtifactMessage) {
    this.name = m.name;
    this.relativePath = m.relativePath;
    this.size = Number(m.size);
    this.mime = m.mime;
    this.content = m.content;
    this.contentOmitted = m.contentOmitted;
  }

  get text(): string {
    return textOf(this.content);
  }

  /** Writes the content to dir/relativePath and returns that path. Throws
   * when the content was omitted, when the path is not a plain relative
   * one, or when anything on the way inside dir is a symlink or not a
   * directory: never writes outside dir. */
  async saveTo(dir: string): Promise<string> {
    if (this.contentOmitted) {
      throw new Error(`artifact ${JSON.stringify(this.relativePath)}: the server omitted its content`);
    }
    const parts = safeRelativeParts(this.relativePath);
    const root = path.resolve(dir);
    await mkdir(root, { recursive: true });
    let parent = root;
    for (const part of parts.slice(0, -1)) {
      parent = path.join(parent, part);
      await ensurePlainDirectory(parent);
    }
    const target = path.join(parent, parts[parts.length - 1]!);
    const rel = path.relative(root, target);
    if (rel === "" || rel.startsWith("..") || path.isAbsolute(rel)) {
      throw new Error(`artifact ${JSON.stringify(this.relativePath)} would be written outside ${root}`);
    }
    // O_NOFOLLOW: a symlink planted at the final name is refused (ELOOP).
    const fh = await open(target, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_TRUNC | fsc.O_NOFOLLOW, 0o644);
    try {
      await fh.writeFile(this.content);
    } finally {
      await fh.close();
    }
    return target;
  }
}

/** Splits an artifact path into components, refusing anything but a plain
 * relative path (the server promises one; we do not rely on it). */
export function safeRelativeParts(rel: string): string[] {
  const bad = (why: string): Error => new Error(`artifact path ${JSON.stringify(rel)}: ${why}`);
  if (rel === "" || rel.length > 4096) {
    throw bad("empty or too long");
  }
  if (rel.includes("\0") || rel.includes("\\")) {
    throw bad("NUL or backslash");
  }
  if (rel.startsWith("/")) {
    throw bad("absolute");
  }
  const parts = rel.split("/");
  for (const p of parts) {
    if (p === "" || p === "." || p === "..") {
      throw bad("empty, '.' or '..' component");
    }
  }
  return parts;
}

async function ensurePlainDirectory(p: string): Promise<void> {
  try {
    await mkdir(p, 0o755);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") {
      throw err;
    }
  }
  const st = await lstat(p);
  if (st.isSymbolicLink() || !st.isDirectory()) {
    throw new Error(`${p} is not a plain directory (a symlink or a file): refusing to write below it`);
  }
}

export interface SaveReport {
  saved: string[];
  skipped: { relativePath: string; reason: string }[];
}

/** What a run with allowNet did on the network, as the server's egress
 * proxy saw it (docs/EGRESS.md): connections (requests and tunnels) the
 * program opened, how many were refused (the allow list or a cap), bytes
 * relayed from it (up) and to it (down). */
export interface Egress {
  readonly connections: number;
  readonly refused: number;
  readonly bytesUp: number;
  readonly bytesDown: number;
}

/** A compiled runtime's compile stage (c, cpp: docs/RUNTIMES.md), its own
 * run in the same sandbox. failed: it was killed or exited non-zero; then
 * the program never ran, the RunResult's killedBy, exitCode and signal are
 * the compiler's, its stdout and stderr are empty, and the compiler's
 * output is here. */
export interface CompileResult {
  readonly stdout: Uint8Array;
  readonly stderr: Uint8Array;
  readonly stdoutTruncated: boolean;
  readonly stderrTruncated: boolean;
  readonly killedBy: KilledBy;
  readonly exitCode: number;
  readonly signal: number;
  readonly wallTimeMs: number;
  readonly cpuTimeMs: number;
  readonly peakMemoryBytes: number;
  readonly failed: boolean;
}

export class RunResult {
  readonly runId: string;
  readonly sessionId: string;
  readonly sessionCreated: boolean;
  readonly stdout: Uint8Array;
  readonly stderr: Uint8Array;
  readonly stdoutTruncated: boolean;
  readonly stderrTruncated: boolean;
  readonly killedBy: KilledBy;
  /** killed_by as on the wire (for values this client does not name). */
  readonly killedByCode: number;
  readonly exitCode: number;
  readonly signal: number;
  readonly wallTimeMs: number;
  readonly cpuTimeMs: number;
  readonly peakMemoryBytes: number;
  readonly artifacts: readonly Artifact[];
  readonly feedback: readonly string[];
  /** The endpoint that ran it, and how many calls it took (retries). */
  readonly endpoint: string;
  readonly attempts: number;
  /** The last expression's value as text/plain ("" when none; at most 64
   * KiB, resultTruncated), and in an interpreter session whether this call
   * ran in a fresh interpreter (the earlier state is gone: feedback says
   * why) or ended the interpreter (docs/INTERPRETER.md). sessionMode:
   * "files", "interpreter", or "" without a session. */
  readonly result: string;
  readonly resultTruncated: boolean;
  readonly stateLost: boolean;
  readonly interpreterEnded: boolean;
  readonly sessionMode: string;
  /** A run with allowNet: what it did on the network; undefined when the
   * reply has no summary (a run without network, or an older server). */
  readonly egress: Egress | undefined;
  /** A compiled runtime's compile stage; undefined for the others. */
  readonly compile: CompileResult | undefined;

  constructor(m: RunCodeResponse, endpoint: string, attempts: number) {
    this.runId = m.runId;
    this.sessionId = m.sessionId;
    this.sessionCreated = m.sessionCreated;
    this.stdout = m.stdout;
    this.stderr = m.stderr;
    this.stdoutTruncated = m.stdoutTruncated;
    this.stderrTruncated = m.stderrTruncated;
    this.killedByCode = m.killedBy;
    this.killedBy = killedByName(m.killedBy);
    this.exitCode = m.exitCode;
    this.signal = m.signal;
    this.wallTimeMs = Number(m.wallTimeMs);
    this.cpuTimeMs = Number(m.cpuTimeMs);
    this.peakMemoryBytes = Number(m.peakMemoryBytes);
    this.artifacts = m.artifacts.map((a) => new Artifact(a));
    this.feedback = [...m.feedback];
    this.endpoint = endpoint;
    this.attempts = attempts;
    this.result = m.result;
    this.resultTruncated = m.resultTruncated;
    this.stateLost = m.stateLost;
    this.interpreterEnded = m.interpreterEnded;
    this.sessionMode = m.sessionMode === 2 ? "interpreter" : m.sessionMode === 1 ? "files" : "";
    const e = m.egress;
    this.egress =
      e === undefined
        ? undefined
        : { connections: e.connections, refused: e.refused, bytesUp: Number(e.bytesUp), bytesDown: Number(e.bytesDown) };
    const k = m.compile;
    this.compile =
      k === undefined
        ? undefined
        : {
            stdout: k.stdout,
            stderr: k.stderr,
            stdoutTruncated: k.stdoutTruncated,
            stderrTruncated: k.stderrTruncated,
            killedBy: killedByName(k.killedBy),
            exitCode: k.exitCode,
            signal: k.signal,
            wallTimeMs: Number(k.wallTimeMs),
            cpuTimeMs: Number(k.cpuTimeMs),
            peakMemoryBytes: Number(k.peakMemoryBytes),
            failed: k.failed,
          };
  }

  get stdoutText(): string {
    return textOf(this.stdout);
  }

  get stderrText(): string {
    return textOf(this.stderr);
  }

  /** Saves every artifact with content below dir (see Artifact.saveTo); one
   * that cannot be saved safely is skipped and reported, never written. */
  async saveArtifacts(dir: string): Promise<SaveReport> {
    const report: SaveReport = { saved: [], skipped: [] };
    for (const a of this.artifacts) {
      try {
        report.saved.push(await a.saveTo(dir));
      } catch (err) {
        report.skipped.push({ relativePath: a.relativePath, reason: (err as Error).message });
      }
    }
    return report;
  }
}
