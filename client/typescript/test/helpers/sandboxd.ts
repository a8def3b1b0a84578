/* sandboxd.ts (tests): starts a real sandboxd for a test, as
 * tests/integration/service/test_service.py's Server does: its own port,
 * ipc socket, state dir (a temp dir) and uid range, ready when its log
 * says event=ready. Never a stand-in. uid ranges of these tests (a server
 * takes uid_base..uid_base+workers): 54000-54999 (methods, faults, fleet,
 * tls, the benchmark), 42000-42499 (stream). */
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, existsSync, mkdtempSync, openSync, readdirSync, readFileSync, chmodSync, rmSync } from "node:fs";
import * as net from "node:net";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

import { SandboxError } from "../../src/index.js";

const here = path.dirname(fileURLToPath(import.meta.url));
/** dist/test/helpers -> the repository root. */
export const repoRoot = path.resolve(here, "../../../../..");
export const binDir = process.env.SANDBOXD_BIN_DIR ?? path.join(repoRoot, "build/bin");

export interface ServerOptions {
  uidBase: number;
  args?: string[];
  /** Loopback address to listen on (default 127.0.0.1). */
  host?: string;
  port?: number;
  /** Reuse a temp dir (its state dir and ipc socket): a restart. */
  tmp?: string;
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/* A test file that dies (an assertion outside a test, an uncaught error)
 * must not leave servers behind: they hold uids, ports and mounts. */
const live = new Set<ChildProcess>();
process.on("exit", () => {
  for (const p of live) {
    p.kill("SIGTERM"); // it drains and unmounts on its own
  }
});

/** A temp dir removed when the test process exits. */
export function tempDir(prefix: string): string {
  const dir = mkdtempSync(path.join(tmpdir(), prefix));
  process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A free TCP port on every given loopback address (bind, then close). */
export async function freePort(hosts: string[] = ["127.0.0.1"]): Promise<number> {
  for (let tries = 0; tries < 50; tries++) {
    const port = await bindAndClose(hosts[0]!, 0);
    let ok = true;
    for (const h of hosts.slice(1)) {
      ok &&= (await bindAndClose(h, port).catch(() => -1)) === port;
    }
    if (ok) {
      return port;
    }
  }
  throw new Error("no free port");
}

function bindAndClose(host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(port, host, () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
  });
}

export class Sandboxd {
  readonly tcp: string;
  readonly ipc: string;
  readonly logPath: string;
  readonly state: string;
  private exited: Promise<number | null>;
  exitCode: number | null | undefined;

  private constructor(
    readonly opts: ServerOptions,
    readonly tmp: string,
    readonly host: string,
    readonly port: number,
    private proc: ChildProcess,
  ) {
    const hostPart = host.includes(":") ? `[${host}]` : host;
    this.tcp = `tcp://${hostPart}:${port}`;
    this.ipc = `ipc://${path.join(tmp, "sock")}`;
    this.logPath = path.join(tmp, `sandboxd-${port}.log`);
    this.state = path.join(tmp, "state");
    this.exited = this.watch(proc);
  }

  static async start(opts: ServerOptions): Promise<Sandboxd> {
    const tmp = opts.tmp ?? mkdtempSync(path.join(tmpdir(), "sbx-ts-"));
    chmodSync(tmp, 0o755);
    const host = opts.host ?? "127.0.0.1";
    const port = opts.port ?? (await freePort([host]));
    const s = new Sandboxd(opts, tmp, host, port, spawnServer(opts, tmp, host, port));
    await s.waitLog("event=ready", 15000);
    return s;
  }

  log(): string {
    return existsSync(this.logPath) ? readFileSync(this.logPath, "utf8") : "";
  }

  /** run_ids of the runs this server logged (event=run lines). */
  runIds(): string[] {
    return [...this.log().matchAll(/event=run run_id=(\S+)/g)].map((m) => m[1]!);
  }

  async waitLog(text: string, timeoutMs = 10000): Promise<void> {
    const until = Date.now() + timeoutMs;
    while (Date.now() < until) {
      if (this.log().includes(text)) {
        return;
      }
      if (this.exitCode !== undefined) {
        throw new Error(`sandboxd exited ${this.exitCode}: ${this.log()}`);
      }
      await sleep(50);
    }
    throw new Error(`sandboxd: no "${text}" in the log within ${timeoutMs} ms:\n${this.log()}`);
  }

  signal(sig: NodeJS.Signals): void {
    this.proc.kill(sig);
  }

  /** SIGTERM (drain), then the exit status. */
  async stop(timeoutMs = 30000): Promise<number | null> {
    if (this.exitCode === undefined) {
      this.proc.kill("SIGTERM");
    }
    const t = setTimeout(() => this.proc.kill("SIGKILL"), timeoutMs);
    const code = await this.exited;
    clearTimeout(t);
    return code;
  }

  /** SIGKILL: the server dies with its calls in flight. */
  async kill(): Promise<void> {
    this.proc.kill("SIGKILL");
    await this.exited;
  }

  /** A new sandboxd on the same port, ipc path and state dir (a restart;
   * after a kill it also clears what the dead one left mounted). */
  async restart(): Promise<void> {
    if (this.exitCode === undefined) {
      await this.stop();
    }
    this.proc = spawnServer(this.opts, this.tmp, this.host, this.port);
    this.exitCode = undefined;
    this.exited = this.watch(this.proc);
    const readyLines = this.log().split("event=ready").length - 1;
    const until = Date.now() + 15000;
    while (this.log().split("event=ready").length - 1 === readyLines) {
      if (Date.now() > until || this.exitCode !== undefined) {
        throw new Error(`sandboxd did not restart: ${this.log()}`);
      }
      await sleep(50);
    }
  }

  /** Stops the server and removes its temp dir. A server that was killed
   * left its workspaces mounted: a restart on the same state dir clears
   * them (sandboxd does at start), then it is stopped again. */
  async cleanup(): Promise<void> {
    let code = await this.stop();
    if (code !== 0) {
      await this.restart();
      code = await this.stop();
    }
    if (code === 0) {
      rmSync(this.tmp, { recursive: true, force: true });
    }
  }

  private watch(proc: ChildProcess): Promise<number | null> {
    live.add(proc);
    return new Promise((resolve) => {
      proc.once("exit", (code, sig) => {
        live.delete(proc);
        this.exitCode = code ?? (sig !== null ? -1 : null);
        resolve(code);
      });
    });
  }
}

function spawnServer(opts: ServerOptions, tmp: string, host: string, port: number): ChildProcess {
  const hostPart = host.includes(":") ? `[${host}]` : host;
  const logFd = openSync(path.join(tmp, `sandboxd-${port}.log`), "a");
  const args = [
    "--listen", `tcp://${hostPart}:${port}`,
    "--listen", `ipc://${path.join(tmp, "sock")}`,
    "--state-dir", path.join(tmp, "state"),
    "--uid-base", String(opts.uidBase),
    ...(opts.args ?? []),
  ];
  const proc = spawn(path.join(binDir, "sandboxd"), args, { stdio: ["ignore", logFd, logFd] });
  closeSync(logFd);
  return proc;
}

/** Waits until cond() holds, polling; false after timeoutMs. */
export async function waitFor(cond: () => boolean | Promise<boolean>, timeoutMs = 10000): Promise<boolean> {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    if (await cond()) {
      return true;
    }
    await sleep(25);
  }
  return false;
}

/** The processes (pid and name) whose real, effective, saved or fs uid is
 * in [lo, hi]: what runs as a server's slot uids, read from /proc. */
export function processesOfUids(lo: number, hi: number): string[] {
  const found: string[] = [];
  for (const pid of readdirSync("/proc")) {
    if (!/^\d+$/.test(pid)) {
      continue;
    }
    let status: string;
    try {
      status = readFileSync(`/proc/${pid}/status`, "utf8");
    } catch {
      continue; // gone meanwhile
    }
    const uids = /^Uid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)/m.exec(status);
    if (uids !== null && uids.slice(1).some((u) => Number(u) >= lo && Number(u) <= hi)) {
      found.push(`${pid} ${/^Name:\s+(.*)$/m.exec(status)?.[1] ?? "?"}`);
    }
  }
  return found;
}

/** The SandboxError a call that must fail rejects with. */
export async function rejection(p: Promise<unknown>): Promise<SandboxError> {
  const e = await p.then(
    () => assert.fail("the call should have failed"),
    (err: unknown) => err,
  );
  assert.ok(e instanceof SandboxError, `not a SandboxError: ${String(e)}`);
  return e;
}
