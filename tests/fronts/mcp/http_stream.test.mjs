/* http_stream.test.mjs: progress and cancellation over /mcp (Streamable
 * HTTP): a run_code call with a progress token from a client that takes
 * text/event-stream is answered as an SSE stream (progress events, then
 * the response), and notifications/cancelled cancels it, but only from the
 * same caller and Mcp-Session-Id. Driven by the official MCP SDK's Client
 * and StreamableHTTPClientTransport (onprogress, an AbortSignal), then raw
 * requests for what the SDK does not show: a client that takes only JSON,
 * cancellations from another tenant or session (ignored: the run ends ok),
 * a client gone mid-stream (the run goes on, its answer dropped), a quiet
 * run kept within a short idle clock by keep-alives. Two sandboxd: one
 * with --tenants (uid base 61600), one with a 2 s idle clock (61700).
 * Needs root. */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { after, before, test } from "node:test";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

import { expectProgressRun, Sandboxd, sleep, ticks } from "./lib.mjs";

const KEY_A = "key-of-tenant-a-0123456789";
const KEY_B = "key-of-tenant-b-0123456789";
const UUID4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

let tenanted; // --tenants a, b
let quick; // --http-timeout-s 2
let tenantsPath;

before(async () => {
  const sha = (k) => createHash("sha256").update(k).digest("hex");
  tenantsPath = path.join(tmpdir(), `sbx-mcp-stream-tenants-${process.pid}.json`);
  writeFileSync(tenantsPath, JSON.stringify({ tenants: [
    { name: "a", api_keys_sha256: [sha(KEY_A)] },
    { name: "b", api_keys_sha256: [sha(KEY_B)] },
  ] }), { mode: 0o644 });
  tenanted = await Sandboxd.start({
    uidBase: 61600, httpListen: true,
    args: ["--workers", "2", "--max-timeout-ms", "60000", "--http-fronts", "mcp", "--tenants", tenantsPath],
  });
  quick = await Sandboxd.start({
    uidBase: 61700, httpListen: true,
    args: ["--workers", "2", "--max-timeout-ms", "60000", "--http-fronts", "mcp", "--http-timeout-s", "2"],
  });
});

after(async () => {
  rmSync(tenantsPath, { force: true });
  const codes = await Promise.all([tenanted?.stop(), quick?.stop()]);
  assert.deepEqual(codes, [0, 0], "each sandboxd exits 0 on SIGTERM");
});

/** An SDK client of tenant key, and what its transport's POSTs got back. */
async function sdkClient(key) {
  const seen = [];
  const recording = async (url, init) => {
    const r = await fetch(url, init);
    seen.push({ method: init?.method, body: String(init?.body ?? ""), type: r.headers.get("content-type"), status: r.status });
    return r;
  };
  const transport = new StreamableHTTPClientTransport(new URL(`${tenanted.http}/mcp`),
    { requestInit: { headers: { Authorization: `Bearer ${key}` } }, fetch: recording });
  const client = new Client({ name: "sandboxd-stream-tests", version: "1.0.0" });
  await client.connect(transport);
  return { client, transport, seen };
}

test("http stream: onprogress gets the run's output while it runs, over text/event-stream", { timeout: 60000 }, async () => {
  const { client, transport, seen } = await sdkClient(KEY_A);
  try {
    assert.match(transport.sessionId ?? "", UUID4, "initialize's answer carried an Mcp-Session-Id");
    await expectProgressRun(client);
    const call = seen.find((s) => s.body.includes('"tools/call"'));
    assert.match(call.type, /^text\/event-stream/, "the call was answered as a stream");
    // Without onprogress the same call is a plain JSON answer.
    await client.callTool({ name: "run_code", arguments: { code: "print(1)" } });
    assert.match(seen.filter((s) => s.body.includes('"tools/call"')).at(-1).type, /^application\/json/);
  } finally {
    await client.close();
  }
});

test("http stream: an AbortSignal cancels the run (CancelRun, killed_by=cancelled); later calls work", { timeout: 60000 }, async () => {
  const { client } = await sdkClient(KEY_A);
  try {
    const before = (tenanted.log().match(/killed_by=cancelled/g) ?? []).length;
    const ac = new AbortController();
    const t0 = Date.now();
    const call = client.callTool({ name: "run_code", arguments: { code: ticks(200) } }, undefined,
      { signal: ac.signal, onprogress: () => ac.abort("enough") });
    await assert.rejects(call, /enough|abort/i);
    const until = Date.now() + 15000;
    while ((tenanted.log().match(/killed_by=cancelled/g) ?? []).length === before) {
      assert.ok(Date.now() < until, `no killed_by=cancelled in the log: ${tenanted.log().slice(-2000)}`);
      await sleep(50);
    }
    assert.ok(Date.now() - t0 < 20000, "cancelled long before its 60 s");
    assert.match(tenanted.log(), /tenant=a [^\n]*killed_by=cancelled/);
    const r = await client.callTool({ name: "run_code", arguments: { code: "print('after')" } }, undefined, { onprogress: () => {} });
    assert.equal(r.structuredContent.stdout, "after\n", "the client goes on");
  } finally {
    await client.close();
  }
});

/* ---- raw requests ---- */

/** One POST over a connection of its own (no keep-alive); the body parsed
 * as SSE events (data lines as JSON; comments counted) or JSON. onEvent(ev,
 * req) sees each event as it comes. */
function rawPost(base, message, headers = {}, onEvent = () => {}) {
  const url = new URL(`${base}/mcp`);
  const body = JSON.stringify(message);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: url.hostname, port: url.port, path: "/mcp", method: "POST", agent: false,
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream",
        "content-length": Buffer.byteLength(body), ...headers } }, (res) => {
      const out = { status: res.statusCode, headers: res.headers, text: "", events: [], comments: 0, ended: false };
      let pending = "";
      res.setEncoding("utf8");
      res.on("data", (d) => {
        out.text += d;
        if (!String(res.headers["content-type"]).startsWith("text/event-stream")) return;
        pending += d;
        let cut;
        while ((cut = pending.indexOf("\n\n")) >= 0) {
          const block = pending.slice(0, cut);
          pending = pending.slice(cut + 2);
          if (block.startsWith(":")) { out.comments++; continue; }
          const data = block.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
          const ev = JSON.parse(data);
          out.events.push(ev);
          onEvent(ev, req);
        }
      });
      res.on("end", () => {
        out.ended = true;
        if (String(res.headers["content-type"]).startsWith("application/json") && out.text) out.json = JSON.parse(out.text);
        resolve(out);
      });
      res.on("error", () => resolve(out));
      res.on("close", () => resolve(out));
    });
    req.on("error", (e) => (e.code === "ECONNRESET" ? resolve({ aborted: true }) : reject(e)));
    req.end(body);
  });
}

const runCall = (id, code, token) => ({ jsonrpc: "2.0", id, method: "tools/call",
  params: { name: "run_code", arguments: { code }, ...(token === undefined ? {} : { _meta: { progressToken: token } }) } });
const cancel = (requestId) => ({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId, reason: "test" } });
const initialize = { jsonrpc: "2.0", id: 1, method: "initialize",
  params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } } };

test("http stream: a client that takes only application/json gets JSON, progress token or not", async () => {
  const r = await rawPost(quick.http, runCall(1, "print('json')", "t"), { accept: "application/json" });
  assert.equal(r.status, 200);
  assert.match(r.headers["content-type"], /^application\/json/);
  assert.equal(r.json.id, 1);
  assert.equal(r.json.result.structuredContent.stdout, "json\n");
  // Taking both, without a token: JSON too; with one: a stream whose last event is the response.
  const plain = await rawPost(quick.http, runCall(2, "print('plain')"));
  assert.match(plain.headers["content-type"], /^application\/json/);
  const streamed = await rawPost(quick.http, runCall(3, "print('sse')", "t3"));
  assert.match(streamed.headers["content-type"], /^text\/event-stream/);
  assert.ok(streamed.ended);
  assert.equal(streamed.events.at(-1).id, 3);
  assert.equal(streamed.events.at(-1).result.structuredContent.stdout, "sse\n");
  assert.deepEqual(streamed.events.slice(0, -1).map((e) => [e.method, e.params.progressToken]),
    streamed.events.slice(0, -1).map(() => ["notifications/progress", "t3"]));
  // Other tools and methods stay JSON even with a token.
  const ping = await rawPost(quick.http, { jsonrpc: "2.0", id: 4, method: "ping", params: { _meta: { progressToken: 1 } } });
  assert.match(ping.headers["content-type"], /^application\/json/);
  // An Mcp-Session-Id that is not visible ASCII is refused; an unknown one is served.
  const bad = await rawPost(quick.http, { jsonrpc: "2.0", id: 5, method: "ping" }, { "mcp-session-id": "a b" });
  assert.equal(bad.status, 400);
  assert.match(bad.json.error.message, /Mcp-Session-Id/);
  const unknown = await rawPost(quick.http, { jsonrpc: "2.0", id: 6, method: "ping" }, { "mcp-session-id": "never-issued" });
  assert.equal(unknown.status, 200);
});

test("http stream: a cancellation from another tenant or session is ignored; the caller's own cancels", { timeout: 90000 }, async () => {
  const auth = (key) => ({ authorization: `Bearer ${key}` });
  const a = await rawPost(tenanted.http, initialize, auth(KEY_A));
  const sa = a.headers["mcp-session-id"];
  assert.match(sa, UUID4);
  const b = await rawPost(tenanted.http, initialize, auth(KEY_B));
  assert.notEqual(b.headers["mcp-session-id"], sa, "each initialize gets a new session id");
  const cancelledBefore = (tenanted.log().match(/killed_by=cancelled/g) ?? []).length;

  // Tenant a's run, request id 5 in session sa; the wrong cancellations come once it runs.
  let wrongSent;
  const long = rawPost(tenanted.http, runCall(5, ticks(8), "p5"), { ...auth(KEY_A), "mcp-session-id": sa }, () => {
    wrongSent ??= (async () => {
      for (const [key, session] of [[KEY_B, sa], [KEY_B, undefined], [KEY_A, "another-session"], [KEY_A, undefined]]) {
        const r = await rawPost(tenanted.http, cancel(5), { ...auth(key), ...(session ? { "mcp-session-id": session } : {}) });
        assert.equal(r.status, 202, "a cancellation is answered 202 whatever it names");
      }
    })();
  });
  const r = await long;
  await wrongSent;
  const answer = r.events.at(-1);
  assert.equal(answer.id, 5, `the run was not cancelled: ${JSON.stringify(r.events.at(-1))}`);
  assert.equal(answer.result.structuredContent.status, "ok");
  assert.equal(answer.result.structuredContent.stdout.split("\n").length, 9);
  assert.equal((tenanted.log().match(/killed_by=cancelled/g) ?? []).length, cancelledBefore);

  // The same request id, cancelled by its own caller and session: no answer, the run killed.
  let rightSent;
  const own = await rawPost(tenanted.http, runCall(5, ticks(200), "p5"), { ...auth(KEY_A), "mcp-session-id": sa }, () => {
    rightSent ??= rawPost(tenanted.http, cancel(5), { ...auth(KEY_A), "mcp-session-id": sa });
  });
  assert.equal((await rightSent).status, 202);
  assert.ok(own.ended, "the stream ended");
  assert.ok(own.events.length >= 1);
  assert.deepEqual(own.events.filter((e) => e.method !== "notifications/progress"), [], "no response for a cancelled call");
  await tenanted.waitLog("killed_by=cancelled");
  assert.equal((tenanted.log().match(/killed_by=cancelled/g) ?? []).length, cancelledBefore + 1);
});

test("http stream: a client gone mid-stream is no cancellation: the run goes on to its end", { timeout: 60000 }, async () => {
  const marker = `gone-${process.pid}`;
  const code = `import time\nprint('${marker}', flush=True)\ntime.sleep(2)\nprint('end')\n`;
  const r = await rawPost(quick.http, runCall(7, code, "g"), {}, (ev, req) => req.destroy());
  assert.ok(r.aborted || !r.events.some((e) => e.id === 7), "the client left before the answer");
  // The run ends on its own (killed_by=none), with both lines printed.
  const expect = new RegExp(`killed_by=none [^\\n]*stdout_bytes=${marker.length + 1 + 4}`);
  const until = Date.now() + 20000;
  while (!expect.test(quick.log())) {
    assert.ok(Date.now() < until, `no run that ran to its end: ${quick.log().slice(-2000)}`);
    await sleep(100);
  }
  const after = await rawPost(quick.http, runCall(8, "print('still')", "s"));
  assert.equal(after.events.at(-1).result.structuredContent.stdout, "still\n");
});

test("http stream: a quiet run outlasts the 2 s idle clock: keep-alive comments, then the answer", { timeout: 60000 }, async () => {
  const call = runCall(9, "import time\ntime.sleep(5)\nprint('woke')", "q");
  call.params.arguments.limits = { timeout_ms: 20000 };
  const r = await rawPost(quick.http, call);
  assert.ok(r.comments >= 2, `keep-alives were sent (${r.comments})`);
  assert.equal(r.events.at(-1).id, 9);
  assert.equal(r.events.at(-1).result.structuredContent.stdout, "woke\n");
});
