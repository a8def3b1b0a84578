/* stream.test.ts: client.stream(), startRun, watchRun and cancelRun against
 * real sandboxd servers (docs/STREAMING.md): output seen while the program
 * runs, a UTF-8 character split between chunks, cancel by AbortSignal
 * (timed, the whole process tree gone, CancelRun sent once), by leaving a
 * for-await early, and while queued (it never runs), NOT_FOUND, runCode
 * cancelled by its run id, the outcome's errors, --max-watchers full, and a
 * fleet (watch and cancel go where the start went), and the streaming
 * example (examples/stream_cancel.ts) run as a user runs it. Needs root. uid bases
 * 42000-42199 (docs in helpers/sandboxd.ts). */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import path from "node:path";
import { promisify } from "node:util";
import { after, before, test } from "node:test";

import {
  Cancelled,
  Client,
  DeadlineExceeded,
  InvalidArgument,
  NotFound,
  type OutputChunk,
  type RunResult,
  type RunStream,
} from "../src/index.js";
import { freePort, processesOfUids, rejection, repoRoot, Sandboxd, waitFor } from "./helpers/sandboxd.js";

const UID_A = 42000;
const WORKERS_A = 2;
let a: Sandboxd;
let metricsA: string;
let client: Client;

before(async () => {
  const http = await freePort();
  metricsA = `http://127.0.0.1:${http}/metrics`;
  a = await Sandboxd.start({ uidBase: UID_A, args: ["--workers", String(WORKERS_A), "--http-listen", `http://127.0.0.1:${http}`] });
  client = new Client(a.tcp);
});

after(async () => {
  client.close();
  await a.cleanup();
});

/** Iterates a stream to its end; the error it ends with, if any. */
async function drain(s: AsyncIterable<OutputChunk>): Promise<{ chunks: OutputChunk[]; error: unknown }> {
  const chunks: OutputChunk[] = [];
  try {
    for await (const c of s) {
      chunks.push(c);
    }
  } catch (error) {
    return { chunks, error };
  }
  return { chunks, error: undefined };
}

const concat = (chunks: OutputChunk[], stream: "stdout" | "stderr"): Buffer =>
  Buffer.concat(chunks.filter((c) => c.stream === stream).map((c) => c.data));

/** sandboxd_requests_total for one method and code, from /metrics. */
async function answered(metrics: string, method: string, code: string): Promise<number> {
  const text = await (await fetch(metrics)).text();
  // Summed over the tenant label (one series per tenant; "default" without --tenants).
  const re = new RegExp(`^sandboxd_requests_total\\{(?:tenant="[^"]*",)?method="${method}",code="${code}"\\} (\\d+)$`, "gm");
  let total = 0;
  for (const m of text.matchAll(re)) total += Number(m[1]);
  return total;
}

/** Whether the server logged this run as one that ran (status=OK). */
const ranOk = (s: Sandboxd, runId: string): boolean =>
  s.log().split("\n").some((l) => l.includes(`event=run run_id=${runId} `) && l.includes("status=OK"));

const slotProcesses = (): string[] => processesOfUids(UID_A, UID_A + WORKERS_A);

const percentile = (xs: number[], p: number): number => {
  const s = [...xs].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))]!;
};

test("output is seen while the program runs: the first line within 300 ms of its print", { timeout: 90000 }, async (t) => {
  // time.time() in the sandbox and Date.now() here read the same clock
  // (CLOCK_REALTIME: the sandbox has no time namespace).
  const s = client.stream({
    code: `
      import time
      for i in range(10):
          print(i, repr(time.time()), flush=True)
          time.sleep(0.1)
    `,
  });
  const seen: Array<{ printed: number; at: number }> = [];
  let partial = "";
  let text = "";
  for await (const c of s.text()) {
    const at = Date.now();
    assert.equal(c.stream, "stdout");
    text += c.text;
    const lines = (partial + c.text).split("\n");
    partial = lines.pop()!;
    for (const line of lines) {
      seen.push({ printed: Number(line.split(" ")[1]) * 1000, at });
    }
  }
  const r = await s.result;
  assert.equal(seen.length, 10, text);
  const latency = seen.map((x) => x.at - x.printed);
  t.diagnostic(`print-to-chunk latency per line, ms: ${latency.map((x) => x.toFixed(1)).join(" ")}`);
  assert.ok(latency[0]! < 300, `the first line arrived ${latency[0]} ms after its print`);
  assert.ok(seen[0]!.at < seen[9]!.printed, "the first line arrived before the last one was printed (streamed, not at the end)");
  assert.equal(r.stdoutText, text, "the chunks are the result's stdout");
  assert.equal(r.killedBy, "none");
  assert.equal(r.runId, await s.runId);
  assert.equal(r.endpoint, a.tcp);
  assert.ok(ranOk(a, r.runId), "the server logged the run");
});

test("chunks are the bytes as they came; text() decodes a character split between chunks", { timeout: 90000 }, async () => {
  const code = `
    import sys, time
    sys.stdout.buffer.write(b"\\xc3"); sys.stdout.flush()
    time.sleep(0.3)
    sys.stdout.buffer.write(b"\\xa9\\n"); sys.stdout.flush()
    sys.stderr.write("err\\n")
  `;
  const raw = client.stream({ code });
  const { chunks, error } = await drain(raw);
  assert.equal(error, undefined);
  const out = chunks.filter((c) => c.stream === "stdout");
  assert.ok(out.length >= 2, `the two writes came apart: ${out.length} chunk(s)`);
  assert.deepEqual([...out[0]!.data], [0xc3], "the first chunk ends inside the character");
  assert.deepEqual([...concat(chunks, "stdout")], [0xc3, 0xa9, 0x0a]);
  assert.equal(concat(chunks, "stderr").toString(), "err\n");
  assert.deepEqual([...(await raw.result).stdout], [0xc3, 0xa9, 0x0a]);

  const decoded = client.stream({ code });
  const texts = { stdout: [] as string[], stderr: [] as string[] };
  for await (const c of decoded.text()) {
    texts[c.stream].push(c.text);
  }
  assert.equal(texts.stdout.join(""), "é\n", JSON.stringify(texts.stdout));
  assert.ok(!texts.stdout.some((x) => x.includes("\ufffd")), JSON.stringify(texts.stdout));
  assert.equal(texts.stderr.join(""), "err\n");
  assert.throws(() => decoded[Symbol.asyncIterator](), TypeError, "a stream is iterated once");
});

test("AbortSignal: a program with forked looping children is cancelled within 100 ms (median of 8), nothing of it left, CancelRun sent once", { timeout: 120000 }, async (t) => {
  const code = `
    import os, time
    for i in range(4):
        if os.fork() == 0:
            while True:
                pass
    print("ready", flush=True)
    while True:
        time.sleep(0.01)
  `;
  const cancelsBefore = await answered(metricsA, "CancelRun", "OK");
  const times: number[] = [];
  for (let i = 0; i < 8; i++) {
    const ac = new AbortController();
    const s = client.stream({ code, limits: { timeoutMs: 30000 } }, { signal: ac.signal });
    let abortedAt = 0;
    let more: Array<Promise<void>> = [];
    for await (const c of s) {
      if (abortedAt === 0 && Buffer.from(c.data).toString().includes("ready")) {
        const alive = slotProcesses();
        assert.ok(alive.length >= 5, `the program and its 4 children run as the slot's uid: ${alive.join(", ")}`);
        abortedAt = performance.now();
        ac.abort();
        if (i === 0) {
          more = [s.cancel(), s.cancel()]; // CancelRun still goes once
          ac.abort();
        }
      }
    }
    const ms = performance.now() - abortedAt;
    assert.ok(abortedAt > 0, "the program printed ready");
    assert.deepEqual(slotProcesses(), [], "no process of the slot's uids is left when the iteration ends");
    const r = await s.result;
    assert.equal(r.killedBy, "cancelled");
    assert.match(r.stdoutText, /^ready\n?$/, "the output up to the kill"); // print() may write "\n" apart
    await Promise.all(more);
    if (i === 0) {
      assert.equal(await answered(metricsA, "CancelRun", "OK"), cancelsBefore + 1, "one CancelRun for an abort and two cancel() calls");
    }
    times.push(ms);
  }
  t.diagnostic(`abort to the iteration's end, ms: ${times.map((x) => x.toFixed(1)).join(" ")} (median ${percentile(times, 0.5).toFixed(1)}, max ${Math.max(...times).toFixed(1)})`);
  // The median: one cancel of 4 CPU-hungry children on a loaded 2-CPU
  // machine can take longer (the kill waits for the scheduler).
  const median = percentile(times, 0.5);
  assert.ok(median < 100, `cancels took ${times.map((x) => x.toFixed(1)).join(" ")} ms (median ${median.toFixed(1)})`);
});

test("leaving a for await early cancels the run (raw chunks and text()); the result says cancelled", { timeout: 90000 }, async () => {
  const code = `
    import os, time
    if os.fork() == 0:
        while True:
            time.sleep(0.01)
    while True:
        print("tick", flush=True)
        time.sleep(0.05)
  `;
  for (const mode of ["raw", "text"] as const) {
    const s = client.stream({ code, runId: `ts-break-${mode}` });
    let n = 0;
    if (mode === "raw") {
      for await (const c of s) {
        n += c.data.length;
        break;
      }
    } else {
      for await (const c of s.text()) {
        n += c.text.length;
        break;
      }
    }
    assert.ok(n > 0);
    // return() resolved once the server said the run had ended.
    assert.deepEqual(slotProcesses(), [], `${mode}: nothing of the run is left after the loop`);
    const r = await s.result;
    assert.equal(r.killedBy, "cancelled", mode);
    assert.equal(r.runId, `ts-break-${mode}`);
  }
});

test("raw calls: startRun, a watchRun loop from offsets, cancelRun of an ended run; NotFound for an unknown run id", { timeout: 90000 }, async () => {
  for (const id of ["ts-no-such-run", "not a valid id"]) {
    const w = await rejection(client.watchRun(id));
    assert.ok(w instanceof NotFound, w.message);
    assert.equal(w.fromServer, true);
    const c = await rejection(client.cancelRun(id));
    assert.ok(c instanceof NotFound, c.message);
  }
  const h = await client.startRun({ code: "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.1)" });
  assert.equal(h.endpoint, a.tcp);
  assert.equal(h.attempts, 1);
  let out = 0;
  let got = "";
  let result: RunResult | undefined;
  const states = new Set<string>();
  for (let i = 0; i < 100 && result === undefined; i++) {
    const u = await client.watchRun(h, { stdoutOffset: out, waitMs: 5000 });
    states.add(u.state);
    assert.equal(u.stdoutOffset, out, "the reply starts where asked");
    out += u.stdout.length;
    got += Buffer.from(u.stdout).toString();
    result = u.result;
    assert.equal(u.complete, result !== undefined);
  }
  assert.equal(got, "0\n1\n2\n");
  assert.equal(result?.stdoutText, "0\n1\n2\n");
  assert.ok(states.has("done"), [...states].join(","));
  assert.equal(await client.cancelRun(h), "done", "cancelling an ended run changes nothing");
  assert.equal(result?.killedBy, "none");
});

test("runCode is cancelled by its run id (cancelRun from another call): killedBy cancelled", { timeout: 90000 }, async () => {
  const call = client.runCode({ code: "import time\nprint('started', flush=True)\ntime.sleep(30)", runId: "ts-runcode-cancel" });
  let seen = "";
  for (let i = 0; i < 100 && seen !== "started\n"; i++) {
    // A RunCode run is in the run table: it can be watched too (NotFound
    // until the server has dispatched the call, which races this watch).
    const u = await client.watchRun("ts-runcode-cancel", { stdoutOffset: seen.length, waitMs: 2000 }).catch((e: unknown) => {
      if (e instanceof NotFound) {
        return undefined;
      }
      throw e;
    });
    seen += u === undefined ? "" : Buffer.from(u.stdout).toString();
  }
  assert.equal(seen, "started\n");
  assert.equal(await client.cancelRun("ts-runcode-cancel"), "done");
  const r = await call;
  assert.equal(r.killedBy, "cancelled");
  assert.equal(r.killedByCode, 5);
  assert.ok(r.wallTimeMs < 20000, `${r.wallTimeMs}`);
});

test("refusals: StartRun's (InvalidArgument, nothing ran), a bad waitMs and an aborted signal (nothing sent)", { timeout: 90000 }, async () => {
  const startsBefore = await answered(metricsA, "StartRun", "INVALID_ARGUMENT");
  const bad = client.stream({ code: "print(1)", runId: "ts-bad-limits", limits: { timeoutMs: -1 } });
  const { error } = await drain(bad);
  assert.ok(error instanceof InvalidArgument, String(error));
  assert.equal(error.fromServer, true);
  assert.equal(error.mayHaveRun, false);
  assert.match(error.message, /limits\.timeout_ms/);
  assert.equal(await rejection(bad.result), error, "result rejects with the error the iteration threw");
  assert.equal(await rejection(bad.runId), error);
  assert.equal(await answered(metricsA, "StartRun", "INVALID_ARGUMENT"), startsBefore + 1);

  const requestsBefore = (await client.info()).requestsTotal;
  const zero = client.stream({ code: "print(1)" }, { waitMs: 0 });
  const ez = await rejection(zero.result);
  assert.ok(ez instanceof InvalidArgument && /wait_ms/.test(ez.message) && !ez.fromServer, ez.message);

  const ac = new AbortController();
  ac.abort();
  const early = client.stream({ code: "print(1)", runId: "ts-aborted-early" }, { signal: ac.signal });
  const ee = await rejection(early.result);
  assert.ok(ee instanceof Cancelled, ee.message);
  assert.equal(ee.mayHaveRun, false);
  await early.cancel(); // nothing to cancel: resolves
  // Only this GetInfo reached the server since the one above.
  assert.equal((await client.info()).requestsTotal, requestsBefore + 1);
  assert.ok(!a.runIds().includes("ts-aborted-early"));
});

test("a watch is awaited longer than its waitMs: a silent run outlasts several long polls", { timeout: 90000 }, async () => {
  const c = new Client(a.tcp, { replyMarginMs: 400 });
  try {
    const watchesBefore = await answered(metricsA, "WatchRun", "OK");
    const s = c.stream({ code: "import time\ntime.sleep(3.2)\nprint('late')" }, { waitMs: 1000 });
    const { chunks, error } = await drain(s);
    assert.equal(error, undefined, String(error));
    assert.equal(concat(chunks, "stdout").toString(), "late\n");
    const watches = (await answered(metricsA, "WatchRun", "OK")) - watchesBefore;
    assert.ok(watches >= 3, `${watches} watches: long polls that ended with no news were asked again`);
  } finally {
    c.close();
  }
});

test("one worker: a run aborted while queued never starts (Cancelled, nothing ran); a run queued past its deadline is DeadlineExceeded", { timeout: 90000 }, async () => {
  const b = await Sandboxd.start({ uidBase: 42020, args: ["--workers", "1", "--queue", "4"] });
  const c = new Client(b.tcp);
  const side = new Client(b.tcp);
  try {
    const occupy = c.runCode({ code: "import time\ntime.sleep(2)\nprint('occupied')", runId: "ts-q-occupy" });
    assert.ok(await waitFor(async () => (await side.info()).running === 1, 15000), "the worker is busy");
    const ac = new AbortController();
    const queued = c.stream({ code: "print('must not run')", runId: "ts-q-cancelled" }, { signal: ac.signal });
    assert.equal(await queued.runId, "ts-q-cancelled");
    assert.equal((await side.info()).queueDepth, 1, "it waits in the queue");
    ac.abort();
    const { chunks, error } = await drain(queued);
    assert.deepEqual(chunks, []);
    assert.ok(error instanceof Cancelled, String(error));
    assert.equal(error.fromServer, true);
    assert.equal(error.mayHaveRun, false, "the server said nothing ran");
    assert.equal(await rejection(queued.result), error);

    // A started run's outcome other than OK: still queued at its envelope's
    // deadline (queueWaitMs), it is refused by the worker.
    const hurried = new Client(b.tcp, { queueWaitMs: 300 });
    const late = hurried.stream({ code: "print('too late')", runId: "ts-q-late" });
    const el = await rejection(late.result);
    hurried.close();
    assert.ok(el instanceof DeadlineExceeded, el.message);
    assert.equal(el.fromServer, true);
    assert.equal(el.mayHaveRun, false);

    assert.equal((await occupy).stdoutText, "occupied\n");
    const afterwards = await c.runCode({ code: "print('after')", runId: "ts-q-after" });
    assert.equal(afterwards.stdoutText, "after\n");
    assert.ok(ranOk(b, "ts-q-occupy") && ranOk(b, "ts-q-after"), b.log());
    assert.ok(!ranOk(b, "ts-q-cancelled"), "the cancelled run never ran");
    assert.ok(!ranOk(b, "ts-q-late"));
    const lines = (id: string): string[] => b.log().split("\n").filter((l) => l.includes(`event=run run_id=${id} `));
    assert.match(lines("ts-q-cancelled").join("\n"), /^[^\n]* status=CANCELLED [^\n]*$/, "its one line says it was cancelled");
    assert.match(lines("ts-q-late").join("\n"), /^[^\n]* status=DEADLINE_EXCEEDED [^\n]*$/);
  } finally {
    side.close();
    c.close();
    await b.cleanup();
  }
});

test("--max-watchers 1 full: the other streams poll (wait_ms 0, with backoff) and all finish with all their output", { timeout: 90000 }, async () => {
  const http = await freePort();
  const metrics = `http://127.0.0.1:${http}/metrics`;
  const s = await Sandboxd.start({ uidBase: 42040, args: ["--workers", "3", "--max-watchers", "1", "--http-listen", `http://127.0.0.1:${http}`] });
  const c = new Client(s.tcp);
  try {
    const silent = c.stream({ code: "import time\ntime.sleep(2)\nprint('quiet')" }, { waitMs: 5000 });
    assert.ok(await waitFor(async () => (await c.info()).watchers === 1, 10000), "the silent run's watch holds the only watcher");
    const code = "import time\nfor i in range(8):\n    print(i, flush=True)\n    time.sleep(0.1)";
    const talkers = [c.stream({ code }), c.stream({ code })];
    const all = await Promise.all([silent, ...talkers].map((x: RunStream) => drain(x)));
    for (const { error } of all) {
      assert.equal(error, undefined, String(error));
    }
    assert.equal(concat(all[0]!.chunks, "stdout").toString(), "quiet\n");
    for (const { chunks } of all.slice(1)) {
      assert.equal(concat(chunks, "stdout").toString(), "0\n1\n2\n3\n4\n5\n6\n7\n");
    }
    assert.ok((await answered(metrics, "WatchRun", "RESOURCE_EXHAUSTED")) > 0, "watches were refused for the cap (the test saw the case)");
  } finally {
    c.close();
    await s.cleanup();
  }
});

test("a fleet: each stream's watches and cancel go to the server its start went to", { timeout: 120000 }, async () => {
  const hosts = ["127.0.0.2", "127.0.0.3"];
  const port = await freePort(hosts);
  const servers = await Promise.all(hosts.map((host, i) => Sandboxd.start({ uidBase: 42100 + 20 * i, host, port, args: ["--workers", "2"] })));
  const c = new Client(servers.map((x) => x.tcp));
  try {
    const code = "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.1)";
    const streams = Array.from({ length: 6 }, (_, i) => c.stream({ code, runId: `ts-fleet-${i}` }));
    const results = await Promise.all(streams.map(async (s) => {
      const { chunks, error } = await drain(s);
      assert.equal(error, undefined, String(error));
      assert.equal(concat(chunks, "stdout").toString(), "0\n1\n2\n");
      return s.result;
    }));
    const used = new Set(results.map((r) => r.endpoint));
    assert.deepEqual([...used].sort(), servers.map((x) => x.tcp).sort(), "the starts went to both servers");
    for (const r of results) {
      const where = servers.filter((x) => ranOk(x, r.runId)).map((x) => x.tcp);
      assert.deepEqual(where, [r.endpoint], `${r.runId} ran once, where the client says`);
    }

    const loop = "import time\nwhile True:\n    print('tick', flush=True)\n    time.sleep(0.05)";
    const cancels = Array.from({ length: 4 }, (_, i) => c.stream({ code: loop, runId: `ts-fleet-cancel-${i}` }));
    // 4 runs on 2 servers with 2 workers each: all of them running at once.
    for (const s of cancels) {
      for await (const _ of s) {
        break; // return(): CancelRun to the endpoint of the start
      }
    }
    const cancelled = await Promise.all(cancels.map((s) => s.result));
    assert.deepEqual(cancelled.map((r) => r.killedBy), ["cancelled", "cancelled", "cancelled", "cancelled"]);
    assert.equal(new Set(cancelled.map((r) => r.endpoint)).size, 2, "cancelled on both servers");

    const h = await c.startRun({ code: "print('raw')" });
    const bare = await rejection(c.watchRun(h.runId));
    assert.ok(bare instanceof InvalidArgument && !bare.fromServer, `a bare run id with two endpoints: ${bare.message}`);
    let u = await c.watchRun(h, { waitMs: 5000 });
    for (let i = 0; i < 50 && !u.complete; i++) {
      u = await c.watchRun(h, { stdoutOffset: u.stdoutOffset + u.stdout.length, waitMs: 5000 });
    }
    assert.equal(u.result?.stdoutText, "raw\n");
    assert.equal(u.result?.endpoint, h.endpoint);
  } finally {
    c.close();
    for (const s of servers) {
      await s.cleanup();
    }
  }
});

test("the streaming example (examples/stream_cancel.ts) shows lines as they come, then cancels", { timeout: 90000 }, async () => {
  const example = path.join(repoRoot, "client/typescript/dist/examples/stream_cancel.js");
  const { stdout } = await promisify(execFile)(process.execPath, [example, a.tcp, "3"], { timeout: 60000 });
  const lines = stdout.trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
  assert.deepEqual(lines.slice(0, 3).map((l) => l.line), ["line 0", "line 1", "line 2"], stdout);
  const end = lines[3]!;
  assert.equal(lines.length, 4, stdout);
  assert.equal(end.end, true);
  assert.equal(end.killedBy, "cancelled", "leaving the loop cancelled the run");
  const printed = end.linesPrinted as number;
  assert.ok(printed >= 3 && printed < 100, `cancelled soon after the third line, not after 500 (${printed} printed)`);
  assert.ok((end.wallTimeMs as number) < 30000, `the run ended at the cancel, not at its end (${String(end.wallTimeMs)} ms)`);
  assert.ok(a.log().split("\n").some((l) => l.includes(`event=run run_id=${String(end.runId)} `) && l.includes("killed_by=cancelled")),
    "the server logged the run as cancelled");
});
