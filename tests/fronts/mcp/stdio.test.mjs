/* stdio.test.mjs: sandbox-mcp over stdio, driven by the official MCP SDK's
 * Client and StdioClientTransport (the endpoint given as --endpoint URL, raw
 * lines below as -e URL), against a real sandboxd (uid base
 * 61100); then raw lines for what the SDK never sends: bad JSON, an
 * unknown method, bad params, batches, a line over the cap, and older
 * protocol revisions. Needs root (sandboxd does). */
import assert from "node:assert/strict";
import * as path from "node:path";
import { after, before, test } from "node:test";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { LATEST_PROTOCOL_VERSION } from "@modelcontextprotocol/sdk/types.js";

import { toolCases } from "./cases.mjs";
import { resourceCases } from "./resource_cases.mjs";
import { binDir, expectProgressRun, RawMcp, Sandboxd, ticks } from "./lib.mjs";

let server;
let client;
let transport;

before(async () => {
  server = await Sandboxd.start({ uidBase: 61100, args: ["--workers", "2", "--max-timeout-ms", "60000"] });
  // --endpoint, as the docs' client configurations spell it (the MCP
  // Inspector takes -e for itself); RawMcp below still uses -e.
  transport = new StdioClientTransport({ command: path.join(binDir, "sandbox-mcp"), args: ["--endpoint", server.tcp], stderr: "pipe" });
  client = new Client({ name: "sandboxd-tests", version: "1.0.0" });
  await client.connect(transport);
});

after(async () => {
  await client?.close();
  assert.equal(await server.stop(), 0, "sandboxd exits 0 on SIGTERM");
});

toolCases(() => ({ client, server }), "stdio");
resourceCases(() => ({ client, server }), "stdio");

test("stdio: the SDK negotiated its latest revision, which the server speaks", () => {
  assert.equal(LATEST_PROTOCOL_VERSION, "2025-11-25");
  assert.equal(transport._process !== undefined, true);
});

test("stdio: malformed messages get JSON-RPC errors and the server keeps serving", async () => {
  const raw = new RawMcp(server.tcp, ["--max-message-bytes", "65536"]);
  try {
    let m = await raw.call(1, "initialize", { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } });
    assert.equal(m.result.protocolVersion, "2025-11-25");
    raw.send(JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }));

    raw.send("{this is not json");
    m = await raw.next();
    assert.equal(m.id, null);
    assert.equal(m.error.code, -32700);

    m = await raw.call(2, "tools/unknown_method", {});
    assert.equal(m.id, 2);
    assert.equal(m.error.code, -32601);
    assert.match(m.error.message, /Method not found/);

    m = await raw.call(3, "tools/call", { arguments: { code: "1" } });
    assert.equal(m.error.code, -32602, "tools/call without a name");
    m = await raw.call(4, "tools/call", { name: "run_code", arguments: "print(1)" });
    assert.equal(m.error.code, -32602, "arguments not an object");
    m = await raw.call(5, "tools/call", [1, 2]);
    assert.equal(m.error.code, -32602, "params not an object");
    m = await raw.call(6, "initialize", {});
    assert.equal(m.error.code, -32602, "initialize without protocolVersion");

    raw.send(JSON.stringify({ jsonrpc: "1.0", id: 7, method: "ping" }));
    m = await raw.next();
    assert.equal(m.error.code, -32600);
    assert.equal(m.id, 7);
    raw.send(JSON.stringify({ jsonrpc: "2.0", id: { x: 1 }, method: "ping" }));
    m = await raw.next();
    assert.equal(m.error.code, -32600);
    assert.equal(m.id, null);
    raw.send(JSON.stringify([{ jsonrpc: "2.0", id: 8, method: "ping" }]));
    m = await raw.next();
    assert.equal(m.error.code, -32600, "batches are not part of MCP since 2025-06-18");
    raw.send(JSON.stringify({ jsonrpc: "2.0", id: 9, method: "ping", x: "y".repeat(70000) }));
    m = await raw.next();
    assert.equal(m.error.code, -32600);
    assert.match(m.error.message, /over 65536 bytes/);
    raw.send(JSON.stringify({ jsonrpc: "2.0", id: 10, result: {} })); // a response: no answer
    raw.send(JSON.stringify({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: 1 } }));

    m = await raw.call(11, "tools/call", { name: "run_code", arguments: { code: "print(6*7)" } });
    assert.equal(m.id, 11);
    assert.equal(m.result.structuredContent.stdout, "42\n", "still serving after all of the above");
    assert.equal(raw.rawOut.split("\n").filter(Boolean).length, 12, "one line per request, none for the rest");
  } finally {
    assert.equal(await raw.close(), 0, "exits 0 at the end of stdin");
  }
  assert.doesNotMatch(raw.stderr, /\{"jsonrpc"/, "nothing of the protocol on stderr");
});

test("stdio: older revisions are negotiated, unknown ones get the latest", async () => {
  const raw = new RawMcp(server.tcp);
  try {
    for (const [asked, got] of [["2025-06-18", "2025-06-18"], ["2025-03-26", "2025-03-26"], ["2024-11-05", "2024-11-05"], ["2099-01-01", "2025-11-25"]]) {
      const m = await raw.call(asked, "initialize", { protocolVersion: asked, capabilities: {}, clientInfo: { name: "raw", version: "1" } });
      assert.equal(m.result.protocolVersion, got, asked);
    }
  } finally {
    await raw.close();
  }
});

test("stdio: parallel tool calls are served side by side", async () => {
  const t0 = Date.now();
  const calls = [1, 2, 3].map((i) => client.callTool({ name: "run_code", arguments: { code: `print(${i})` } }));
  const rs = await Promise.all(calls);
  assert.deepEqual(rs.map((r) => r.structuredContent.stdout), ["1\n", "2\n", "3\n"]);
  assert.ok(Date.now() - t0 >= 0);
});

// ---- progress and cancellation (over /mcp: http_stream.test.mjs) ----

test("stdio: a progress token gets the run's output as notifications/progress while it runs", { timeout: 60000 }, async () => {
  await expectProgressRun(client);
});

test("stdio: a progress message holds at most 4 KiB of a chunk, cut at a whole character; progress counts every byte", { timeout: 60000 }, async () => {
  const seen = [];
  // One write of 10000 bytes of two-byte characters: a chunk over the cap.
  const r = await client.callTool({ name: "run_code", arguments: { code: "import sys\nsys.stdout.write('\u00e9' * 5000)\n" } }, undefined,
    { onprogress: (p) => seen.push(p) });
  assert.equal(r.structuredContent.status, "ok");
  assert.ok(seen.length >= 1);
  for (const p of seen) {
    assert.ok(Buffer.byteLength(p.message) <= 4096, `a message of ${Buffer.byteLength(p.message)} bytes`);
    assert.match(p.message, /^\u00e9+$/, "whole characters only");
  }
  assert.equal(seen.at(-1).progress, 10000, "progress counts the bytes cut from the messages too");
});

test("stdio: notifications/cancelled cancels the run (CancelRun), and the call gets no answer", { timeout: 60000 }, async () => {
  // Through the SDK: an AbortSignal sends notifications/cancelled.
  const ac = new AbortController();
  const before = server.runs();
  const call = client.callTool({ name: "run_code", arguments: { code: ticks(200) } }, undefined,
    { signal: ac.signal, onprogress: () => ac.abort("enough") });
  await assert.rejects(call, /enough|abort/i);
  await server.waitLog("killed_by=cancelled", 15000);
  assert.equal(server.runs(), before + 1, "the run ended, logged as cancelled");
  const r = await client.callTool({ name: "run_code", arguments: { code: "print('after')" } });
  assert.equal(r.structuredContent.stdout, "after\n", "the connection goes on");

  // Raw lines: no response for the cancelled id, later requests answered.
  const raw = new RawMcp(server.tcp);
  try {
    await raw.call(1, "initialize", { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "1" } });
    // A line every 5 ms: notifications are in flight when the cancellation comes.
    const flood = "import time\nfor i in range(300):\n    print(('tick %d ' % i) * 100, flush=True)\n    time.sleep(0.01)\n";
    raw.send(JSON.stringify({ jsonrpc: "2.0", id: "long", method: "tools/call",
      params: { name: "run_code", arguments: { code: flood }, _meta: { progressToken: "p" } } }));
    const first = await raw.next();
    assert.equal(first.method, "notifications/progress");
    assert.equal(first.params.progressToken, "p");
    // Cancellations of ids that are not running are ignored.
    raw.send(JSON.stringify({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: "other" } }));
    raw.send(JSON.stringify({ jsonrpc: "2.0", method: "notifications/cancelled", params: { reason: "no id" } }));
    raw.send(JSON.stringify({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: "long", reason: "user" } }));
    const t0 = Date.now();
    let m = await raw.call(2, "ping");
    while (m.method === "notifications/progress") m = await raw.next(); // sent before the cancel took effect
    assert.equal(m.id, 2, "ping answered");
    await sleepMs(1500);
    m = await raw.call(3, "tools/call", { name: "run_code", arguments: { code: "print(1)" } });
    assert.equal(m.id, 3, `no answer for the cancelled call; next: ${JSON.stringify(m).slice(0, 200)}`);
    assert.ok(Date.now() - t0 < 10000);
    const lines = raw.rawOut.split("\n");
    assert.equal(lines.filter((l) => l.includes('"id":"long"')).length, 0, "never an answer for id long");
    const pinged = lines.findIndex((l) => l.includes('"id":2'));
    assert.deepEqual(lines.slice(pinged).filter((l) => l.includes("notifications/progress")), [],
      "no progress for the cancelled call after the answer to a message read after the cancellation");
  } finally {
    assert.equal(await raw.close(), 0);
  }
});

const sleepMs = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
