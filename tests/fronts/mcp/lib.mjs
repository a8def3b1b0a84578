/* lib.mjs: what the MCP front's tests share: a real sandboxd started for the
 * test (its own port, state dir and uid range from 61100-61999, ready when
 * its log says event=ready, stopped with SIGTERM), sandbox-mcp as a raw
 * child for the malformed-message cases, and small helpers on tool results.
 * Nothing here stands in for the server. */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import * as net from "node:net";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
export const binDir = process.env.SANDBOXD_BIN_DIR ?? path.join(repoRoot, "build/bin");

const live = new Set();
process.on("exit", () => {
  for (const p of live) p.kill("SIGTERM"); // it drains and unmounts on its own
});

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const p = s.address().port;
      s.close(() => resolve(p));
    });
  });
}

export class Sandboxd {
  static async start({ uidBase, args = [], httpListen = false }) {
    const s = new Sandboxd();
    s.tmp = mkdtempSync(path.join(tmpdir(), "sbx-mcp-"));
    chmodSync(s.tmp, 0o755);
    s.port = await freePort();
    s.tcp = `tcp://127.0.0.1:${s.port}`;
    s.logPath = path.join(s.tmp, "sandboxd.log");
    const extra = [];
    if (httpListen) {
      s.httpPort = await freePort();
      s.http = `http://127.0.0.1:${s.httpPort}`;
      extra.push("--http-listen", s.http);
    }
    const log = openSync(s.logPath, "a");
    s.proc = spawn(path.join(binDir, "sandboxd"),
      ["--listen", s.tcp, "--state-dir", path.join(s.tmp, "state"), "--uid-base", String(uidBase), ...extra, ...args],
      { stdio: ["ignore", log, log] });
    live.add(s.proc);
    s.exited = new Promise((resolve) => s.proc.on("exit", (code) => { live.delete(s.proc); resolve(code); }));
    s.proc.on("exit", (code) => { s.exitCode = code; });
    await s.waitLog("event=ready", 15000);
    return s;
  }

  log() {
    return existsSync(this.logPath) ? readFileSync(this.logPath, "utf8") : "";
  }

  /** How many runs the server logged (event=run lines). */
  runs() {
    return (this.log().match(/event=run /g) ?? []).length;
  }

  async waitLog(text, timeoutMs = 10000) {
    const until = Date.now() + timeoutMs;
    while (Date.now() < until) {
      if (this.log().includes(text)) return;
      if (this.exitCode !== undefined) throw new Error(`sandboxd exited ${this.exitCode}: ${this.log()}`);
      await sleep(50);
    }
    throw new Error(`sandboxd: no "${text}" in its log in time: ${this.log().slice(-3000)}`);
  }

  /** SIGTERM; the exit status. */
  async stop() {
    if (this.exitCode === undefined) this.proc.kill("SIGTERM");
    const code = await this.exited;
    rmSync(this.tmp, { recursive: true, force: true });
    return code;
  }
}

/** sandbox-mcp as a child speaking raw lines: send(text) writes one line,
 * next() resolves with the next stdout line parsed as JSON. */
export class RawMcp {
  constructor(url, args = []) {
    this.proc = spawn(path.join(binDir, "sandbox-mcp"), ["-e", url, ...args], { stdio: ["pipe", "pipe", "pipe"] });
    live.add(this.proc);
    this.stderr = "";
    this.proc.stderr.on("data", (d) => { this.stderr += d; });
    this.lines = [];
    this.waiters = [];
    this.rawOut = "";
    createInterface({ input: this.proc.stdout }).on("line", (l) => {
      this.rawOut += l + "\n";
      const w = this.waiters.shift();
      if (w) w(l);
      else this.lines.push(l);
    });
    this.exited = new Promise((resolve) => this.proc.on("exit", (code) => { live.delete(this.proc); resolve(code); }));
  }

  send(text) {
    this.proc.stdin.write(text + "\n");
  }

  async next(timeoutMs = 60000) {
    const line = this.lines.length > 0 ? this.lines.shift() : await new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`no line from sandbox-mcp in ${timeoutMs} ms; stderr: ${this.stderr}`)), timeoutMs);
      this.waiters.push((l) => { clearTimeout(t); resolve(l); });
    });
    return JSON.parse(line);
  }

  /** A request and its response (the next line: one request at a time). */
  async call(id, method, params) {
    this.send(JSON.stringify({ jsonrpc: "2.0", id, method, ...(params === undefined ? {} : { params }) }));
    return this.next();
  }

  async close() {
    this.proc.stdin.end();
    return this.exited;
  }
}

/** The text blocks of a tool result, joined. */
export const texts = (r) => r.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");

/** Python code that draws a plot with matplotlib into output/plot.png and
 * closes it (a figure left open would come back as output/figure-1.png too). */
export const PLOT = [
  "import matplotlib", "matplotlib.use('Agg')", "import matplotlib.pyplot as plt",
  "plt.plot([1, 2, 3], [1, 4, 9])", "plt.savefig('output/plot.png')", "plt.close()", "print('plotted')", "",
].join("\n");

// A run printing a tick every 0.3 s, N times (code: ticks(N)).
export const ticks = (n) => `import time\nfor i in range(${n}):\n    print('tick', i, flush=True)\n    time.sleep(0.3)\n`;

// run_code of five ticks with onprogress, through the official SDK client on
// either transport; checks what a progress token promises on both: the
// output as messages, in order, progress increasing to the output's bytes,
// the first while the run ran. Returns the call's result.
export async function expectProgressRun(client) {
  const seen = [];
  const t0 = Date.now();
  const r = await client.callTool({ name: "run_code", arguments: { code: ticks(5) } }, undefined,
    { onprogress: (p) => seen.push({ ...p, at: Date.now() - t0 }) });
  const done = Date.now() - t0;
  assert.equal(r.structuredContent.stdout, "tick 0\ntick 1\ntick 2\ntick 3\ntick 4\n");
  assert.ok(seen.length >= 5, `one notification per output chunk at least (${seen.length})`);
  assert.equal(seen.map((p) => p.message).join(""), r.structuredContent.stdout, "the messages are the output, in order");
  for (let i = 1; i < seen.length; i++) assert.ok(seen[i].progress > seen[i - 1].progress, "progress increases");
  assert.equal(seen.at(-1).progress, Buffer.byteLength(r.structuredContent.stdout), "progress counts the output's bytes");
  assert.ok(seen[0].at < done - 800, `the first came while the run ran (${seen[0].at} ms of ${done} ms)`);
  return r;
}
