/* faults.test.ts: the at-most-once rules against a real sandboxd: what is
 * retried (RESOURCE_EXHAUSTED, UNAVAILABLE answered by the server), what
 * never is (UNKNOWN when the server dies mid-call, DEADLINE_EXCEEDED when no
 * reply comes), reconnecting after a restart, and many calls in flight on
 * one connection. Each test has its own server (uid bases 54100-54199). */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import * as path from "node:path";
import { test } from "node:test";

import { Cancelled, Client, DEFAULT_CONNECT_TIMEOUT_MS, DeadlineExceeded, ResourceExhausted, Unavailable, Unknown } from "../src/index.js";
import { rejection, repoRoot, Sandboxd, sleep, waitFor } from "./helpers/sandboxd.js";

/** Waits until the server reports a call running (GetInfo from a side client). */
async function running(url: string, n = 1): Promise<void> {
  const side = new Client(url);
  try {
    assert.ok(await waitFor(async () => (await side.info()).running >= n, 15000), `${n} call(s) running`);
  } finally {
    side.close();
  }
}

// --queue 1, not 0: sandboxd 0.1.0 with --queue 0 refuses every call, even
// with its worker idle (server/queue.c: work_queue_push needs len < capacity,
// and a call reaches a worker only through the queue). Reported; so one
// call runs, one waits in the queue, and the third is refused.
test("RESOURCE_EXHAUSTED (--workers 1 --queue 1, full): refused at once, retried with backoff only when allowed", { timeout: 90000 }, async () => {
  const s = await Sandboxd.start({ uidBase: 54100, args: ["--workers", "1", "--queue", "1"] });
  const c = new Client(s.tcp);
  const side = new Client(s.tcp);
  try {
    const long = c.runCode({ code: "import time\ntime.sleep(2)\nprint('long')", runId: "ts-re-long" });
    await running(s.tcp);
    const filler = c.runCode({ code: "print('queued')", runId: "ts-re-queued" });
    assert.ok(await waitFor(async () => (await side.info()).queueDepth === 1), "the queue is full");
    const noRetry = new Client(s.tcp, { retries: 0 });
    const e = await rejection(noRetry.runCode({ code: "print('refused')", runId: "ts-re-refused" }));
    noRetry.close();
    assert.ok(e instanceof ResourceExhausted, e.message);
    assert.equal(e.fromServer, true);
    assert.equal(e.mayHaveRun, false);
    assert.equal(e.attempts, 1);
    // With retries, the call is refused while the worker is busy and runs
    // once it is free: attempts > 1, one run.
    const patient = new Client(s.tcp, { retries: 8, retryBaseMs: 100, retryMaxMs: 800 });
    const r = await patient.runCode({ code: "print('retried')", runId: "ts-re-retried" });
    patient.close();
    assert.equal(r.stdoutText, "retried\n");
    assert.ok(r.attempts > 1, `attempts ${r.attempts}`);
    assert.equal((await long).stdoutText, "long\n");
    assert.equal((await filler).stdoutText, "queued\n");
    const ids = s.runIds();
    assert.deepEqual(ids.sort(), ["ts-re-long", "ts-re-queued", "ts-re-retried"], "nothing ran for RESOURCE_EXHAUSTED, the retried call once");
  } finally {
    side.close();
    c.close();
    await s.cleanup();
  }
});

test("DEADLINE_EXCEEDED from the server: a call still queued at its deadline never runs", { timeout: 90000 }, async () => {
  const s = await Sandboxd.start({ uidBase: 54110, args: ["--workers", "1", "--queue", "4"] });
  const c = new Client(s.tcp);
  try {
    const long = c.runCode({ code: "import time\ntime.sleep(1.5)", runId: "ts-dl-long" });
    await running(s.tcp);
    const hurried = new Client(s.tcp, { queueWaitMs: 300 });
    const e = await rejection(hurried.runCode({ code: "print(1)", runId: "ts-dl-late" }));
    hurried.close();
    assert.ok(e instanceof DeadlineExceeded, e.message);
    assert.equal(e.fromServer, true);
    assert.equal(e.mayHaveRun, false);
    assert.equal(e.attempts, 1, "never retried");
    await long;
    assert.deepEqual(s.runIds(), ["ts-dl-long"]);
  } finally {
    c.close();
    await s.cleanup();
  }
});

test("DEADLINE_EXCEEDED from the client: no reply in time (a stopped server); may have run, never retried", { timeout: 90000 }, async () => {
  const s = await Sandboxd.start({ uidBase: 54120, args: ["--workers", "1"] });
  const c = new Client(s.tcp, { queueWaitMs: 200, replyMarginMs: 300, retries: 3 });
  try {
    assert.equal(await c.health(), "SERVING"); // the connection is up before the server stops
    s.signal("SIGSTOP");
    const t0 = performance.now();
    const e = await rejection(c.runCode({ code: "print(1)", runId: "ts-dl-client", limits: { timeoutMs: 500 } }));
    const waited = performance.now() - t0;
    assert.ok(e instanceof DeadlineExceeded, e.message);
    assert.equal(e.fromServer, false);
    assert.equal(e.mayHaveRun, true);
    assert.equal(e.attempts, 1, "never retried");
    assert.match(e.message, /no reply within 1000 ms; the code may or may not have run/);
    assert.ok(waited >= 950 && waited < 5000, `waited ${waited} ms for 200 + 500 + 300`);
  } finally {
    s.signal("SIGCONT");
    c.close();
    await s.cleanup();
  }
});

test("UNAVAILABLE while draining: answered at once by the server, nothing ran; the running call finishes", { timeout: 90000 }, async () => {
  const s = await Sandboxd.start({ uidBase: 54130, args: ["--workers", "1"] });
  const c = new Client(s.tcp, { retries: 0 });
  try {
    const slow = c.runCode({ code: "import time\ntime.sleep(1.5)\nprint('finished')", runId: "ts-drain-slow" });
    await running(s.tcp);
    s.signal("SIGTERM");
    await s.waitLog("event=draining").catch(() => sleep(200));
    const e = await rejection(c.runCode({ code: "print('new')", runId: "ts-drain-new" }));
    assert.ok(e instanceof Unavailable, e.message);
    assert.equal(e.fromServer, true);
    assert.equal(e.mayHaveRun, false);
    assert.equal((await slow).stdoutText, "finished\n");
    assert.equal(await s.stop(), 0);
    assert.deepEqual(s.runIds(), ["ts-drain-slow"]);
  } finally {
    c.close();
    await s.cleanup();
  }
});

test("UNKNOWN when the server is killed mid-call (never retried); the client reconnects after a restart", { timeout: 90000 }, async () => {
  const s = await Sandboxd.start({ uidBase: 54140, args: ["--workers", "1"] });
  const c = new Client(s.tcp, { retries: 3, reconnectBaseMs: 50, reconnectMaxMs: 200 });
  try {
    const call = rejection(c.runCode({ code: "import time\nprint('started', flush=True)\ntime.sleep(5)", runId: "ts-killed" }));
    await running(s.tcp);
    await s.kill();
    const e = await call;
    assert.ok(e instanceof Unknown, e.message);
    assert.equal(e.fromServer, false);
    assert.equal(e.mayHaveRun, true);
    assert.equal(e.attempts, 1, "never retried");
    assert.match(e.message, /may or may not have run/);
    assert.equal(c.endpoints()[0]!.state, "dead");

    // A call made while the server is down waits for it (nothing is sent
    // anywhere until a connection is up), then runs once.
    const waiting = c.runCode({ code: "print('after restart')", runId: "ts-after-restart" });
    await sleep(300);
    await s.restart(); // same port, state dir: also clears what the dead one left
    const r = await waiting;
    assert.equal(r.stdoutText, "after restart\n");
    assert.equal(r.attempts, 1);
    assert.equal(c.endpoints()[0]!.connections, 2, "one reconnect");
    // A graceful restart too: the old connection closes, the next call reconnects.
    assert.equal(await s.stop(), 0);
    // (a request sent in the instant the server closes is UNKNOWN: the
    // client cannot tell; so wait until it has seen the close)
    assert.ok(await waitFor(() => c.endpoints()[0]!.state !== "live"), "the close was seen");
    await s.restart();
    assert.equal((await c.runCode({ code: "print(2)" })).stdoutText, "2\n");
    assert.equal(s.runIds().filter((id) => id === "ts-after-restart").length, 1);
  } finally {
    c.close();
    await s.cleanup();
  }
});

test("a server that is down: UNAVAILABLE from the client after connectTimeoutMs, nothing sent", { timeout: 90000 }, async () => {
  const s = await Sandboxd.start({ uidBase: 54150, args: ["--workers", "1"] });
  await s.cleanup();
  const c = new Client(s.tcp, { connectTimeoutMs: 500 });
  try {
    const e = await rejection(c.runCode({ code: "print(1)" }));
    assert.ok(e instanceof Unavailable, e.message);
    assert.equal(e.fromServer, false);
    assert.equal(e.mayHaveRun, false);
    assert.match(e.message, /no endpoint reachable within 500 ms \(connectTimeoutMs\).*ECONNREFUSED.*nothing was sent/);
  } finally {
    c.close();
  }
});

test("the connect timeout's default is the one docs/CLIENTS.md gives every client (5000 ms), named in the error", { timeout: 90000 }, async () => {
  const doc = readFileSync(path.join(repoRoot, "docs/CLIENTS.md"), "utf8");
  const documented = /\| TypeScript \| `connectTimeoutMs` \| (\d+) ms \|/.exec(doc);
  assert.ok(documented, "docs/CLIENTS.md names TypeScript's connectTimeoutMs and its default");
  assert.equal(DEFAULT_CONNECT_TIMEOUT_MS, Number(documented[1]));
  const s = await Sandboxd.start({ uidBase: 54155, args: ["--workers", "1"] });
  await s.cleanup(); // its port is closed now: every dial is refused
  const c = new Client(s.tcp); // the defaults
  try {
    const e = await rejection(c.runCode({ code: "print(1)" }));
    assert.ok(e instanceof Unavailable, e.message);
    assert.equal(e.mayHaveRun, false);
    assert.match(e.message, new RegExp(`no endpoint reachable within ${documented[1]} ms \\(connectTimeoutMs\\)`));
  } finally {
    c.close();
  }
});

test("16 calls in flight on one connection overlap up to --workers 2 (about 16/2 run times)", { timeout: 90000 }, async () => {
  const s = await Sandboxd.start({ uidBase: 54160, args: ["--workers", "2", "--queue", "64"] });
  const c = new Client(s.tcp);
  try {
    const code = "import time\nt0 = time.time()\ntime.sleep(0.6)\nprint(t0, time.time())";
    const single = await c.runCode({ code });
    const [s0, s1] = single.stdoutText.split(" ").map(Number) as [number, number];
    const one = (s1 - s0) * 1000;
    const t0 = performance.now();
    const rs = await Promise.all(Array.from({ length: 16 }, (_, i) => c.runCode({ code, runId: `ts-par-${i}` })));
    const elapsed = performance.now() - t0;
    // From the runs' own clocks: how many ran at once, at most.
    const spans = rs.map((r) => r.stdoutText.split(" ").map(Number) as [number, number]);
    const events = spans.flatMap(([a, b]) => [[a, 1], [b, -1]] as const).sort((x, y) => x[0] - y[0] || x[1] - y[1]);
    let now = 0;
    let peak = 0;
    for (const [, d] of events) {
      now += d;
      peak = Math.max(peak, now);
    }
    assert.equal(peak, 2, "two runs at a time: the calls overlapped, the server's two workers bounded them");
    assert.ok(elapsed < 16 * one * 0.75, `16 calls took ${elapsed.toFixed(0)} ms, a run ${one.toFixed(0)} ms: no overlap?`);
    assert.deepEqual(c.endpoints().map((e) => e.connections), [1], "all on one connection");
    assert.equal(new Set(rs.map((r) => r.runId)).size, 16);
    console.log(`# 16 calls: ${elapsed.toFixed(0)} ms; one run ${one.toFixed(0)} ms; 16/2 runs = ${(8 * one).toFixed(0)} ms`);
  } finally {
    c.close();
    await s.cleanup();
  }
});

test("AbortSignal: before sending, nothing is sent; after, the call is abandoned here and the run still runs to its end", { timeout: 90000 }, async () => {
  const s = await Sandboxd.start({ uidBase: 54170, args: ["--workers", "1"] });
  const c = new Client(s.tcp);
  try {
    const early = new AbortController();
    early.abort();
    const e1 = await rejection(c.runCode({ code: "print(1)", runId: "ts-abort-early" }, { signal: early.signal }));
    assert.ok(e1 instanceof Cancelled, e1.message);
    assert.equal(e1.mayHaveRun, false);

    const late = new AbortController();
    const call = rejection(c.runCode({ code: "import time\ntime.sleep(1)\nprint('ran anyway')", runId: "ts-abort-late" }, { signal: late.signal }));
    await running(s.tcp);
    late.abort();
    const e2 = await call;
    assert.ok(e2 instanceof Cancelled, e2.message);
    assert.equal(e2.mayHaveRun, true);
    assert.match(e2.message, /not cancelled on the server; the code may still run/);
    await s.waitLog("run_id=ts-abort-late", 10000);
    assert.deepEqual(s.runIds(), ["ts-abort-late"], "the abandoned run ran to its end; the early one never left");
  } finally {
    c.close();
    await s.cleanup();
  }
});
