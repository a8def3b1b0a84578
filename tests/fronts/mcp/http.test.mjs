/* http.test.mjs: the MCP front at /mcp on sandboxd's HTTP listener
 * (--http-fronts mcp), driven by the official MCP SDK's Client and
 * StreamableHTTPClientTransport: the same tool cases as over stdio; then
 * raw requests for the transport's own rules: Origin (DNS rebinding),
 * Host (421), MCP-Protocol-Version, session ids at initialize, GET and DELETE, media
 * types, the body cap, malformed messages, notifications; every refusal a
 * JSON-RPC error (id null before a message was read). Needs root (uid base
 * 61200). */
import assert from "node:assert/strict";
import http from "node:http";
import { after, before, test } from "node:test";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

import { toolCases } from "./cases.mjs";
import { resourceCases } from "./resource_cases.mjs";
import { Sandboxd } from "./lib.mjs";

let server;
let client;
let endpoint;

before(async () => {
  server = await Sandboxd.start({
    uidBase: 61200, httpListen: true,
    args: ["--workers", "2", "--max-timeout-ms", "60000", "--http-fronts", "mcp", "--http-max-body-bytes", "65536"],
  });
  endpoint = `${server.http}/mcp`;
  client = new Client({ name: "sandboxd-tests", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(endpoint)));
});

after(async () => {
  await client?.close();
  assert.equal(await server.stop(), 0, "sandboxd exits 0 on SIGTERM");
});

toolCases(() => ({ client, server }), "http");
resourceCases(() => ({ client, server }), "http");

const JSON_HEADERS = { "content-type": "application/json", accept: "application/json, text/event-stream" };
const init = (version = "2025-11-25") => JSON.stringify({
  jsonrpc: "2.0", id: 1, method: "initialize",
  params: { protocolVersion: version, capabilities: {}, clientInfo: { name: "raw", version: "1" } },
});

async function post(body, headers = {}) {
  const r = await fetch(endpoint, { method: "POST", headers: { ...JSON_HEADERS, ...headers }, body });
  const text = await r.text();
  return { status: r.status, headers: r.headers, text, json: text && r.headers.get("content-type")?.startsWith("application/json") ? JSON.parse(text) : undefined };
}

test("http: initialize over raw POST: JSON answer, a new session id, older revisions negotiated", async () => {
  let r = await post(init());
  assert.equal(r.status, 200);
  assert.match(r.headers.get("content-type"), /^application\/json/);
  assert.equal(r.json.result.protocolVersion, "2025-11-25");
  const sid = r.headers.get("mcp-session-id");
  assert.match(sid ?? "", /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/, "initialize issues a session id");
  assert.notEqual((await post(init())).headers.get("mcp-session-id"), sid, "a new one each time");
  const ping = await post(JSON.stringify({ jsonrpc: "2.0", id: 2, method: "ping" }), { "mcp-session-id": sid });
  assert.equal(ping.status, 200);
  assert.equal(ping.headers.get("mcp-session-id"), null, "only initialize's answer carries one");
  // Mcp-Session-Id: 1 to 128 visible ASCII characters, else 400 (a JSON-RPC error).
  const pingWith = (id) => post(JSON.stringify({ jsonrpc: "2.0", id: 3, method: "ping" }), { "mcp-session-id": id });
  assert.equal((await pingWith("s".repeat(128))).status, 200, "128 characters are taken");
  for (const bad of ["s".repeat(129), "a b", "tab\there"]) {
    const refused = await pingWith(bad);
    assert.equal(refused.status, 400, `Mcp-Session-Id ${JSON.stringify(bad.slice(0, 20))} is refused`);
    assert.match(refused.json.error.message, /Mcp-Session-Id header must be 1 to 128 visible ASCII characters/);
  }
  r = await post(init("2025-03-26"));
  assert.equal(r.json.result.protocolVersion, "2025-03-26");
  r = await post(init("2099-01-01"));
  assert.equal(r.json.result.protocolVersion, "2025-11-25");
});

/* A refusal before any message was read (the listener's or the
 * transport's): a JSON-RPC error object with id null, labelled JSON. */
function transportError(r, message) {
  assert.match(r.headers.get("content-type") ?? "", /^application\/json/, r.text);
  assert.equal(r.json.jsonrpc, "2.0");
  assert.ok("id" in r.json && r.json.id === null, r.text);
  assert.equal(typeof r.json.error.code, "number");
  assert.match(r.json.error.message, message);
}

/* One raw request with a Host header of our choosing (fetch sets its own). */
function rawPost(host, body) {
  const url = new URL(endpoint);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: url.hostname, port: url.port, path: "/mcp", method: "POST",
      headers: { ...JSON_HEADERS, host, "content-length": Buffer.byteLength(body) } }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (d) => { text += d; });
      res.on("end", () => resolve({ status: res.statusCode, headers: new Headers(res.headers), text,
        json: text ? JSON.parse(text) : undefined }));
    });
    req.on("error", reject);
    req.end(body);
  });
}

test("http: a Host that is not the server's is 421 (DNS rebinding), a JSON-RPC error; nothing runs", async () => {
  const before = server.runs();
  const call = JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "run_code", arguments: { code: "print(1)" } } });
  for (const host of ["rebound.example", `rebound.example:${new URL(endpoint).port}`]) {
    const r = await rawPost(host, call);
    assert.equal(r.status, 421, host);
    transportError(r, /DNS rebinding/);
  }
  const ok = await rawPost(`localhost:${new URL(endpoint).port}`, JSON.stringify({ jsonrpc: "2.0", id: 3, method: "ping" }));
  assert.equal(ok.status, 200, "the server's own name is served");
  assert.equal(server.runs(), before);
});

test("http: a request with an Origin header is 403 (DNS rebinding), and nothing runs", async () => {
  const before = server.runs();
  const call = JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "run_code", arguments: { code: "print(1)" } } });
  for (const origin of ["http://evil.example", "http://127.0.0.1:1234", "null"]) {
    const r = await post(call, { origin });
    assert.equal(r.status, 403, origin);
    transportError(r, /Origin/);
  }
  const g = await fetch(endpoint, { method: "GET", headers: { origin: "http://evil.example", accept: "text/event-stream" } });
  assert.equal(g.status, 403);
  assert.equal(server.runs(), before);
});

test("http: MCP-Protocol-Version: supported ones served, others 400", async () => {
  const ping = JSON.stringify({ jsonrpc: "2.0", id: 3, method: "ping" });
  for (const v of ["2025-11-25", "2025-06-18", "2025-03-26"]) {
    assert.equal((await post(ping, { "mcp-protocol-version": v })).status, 200, v);
  }
  const r = await post(ping, { "mcp-protocol-version": "1999-01-01" });
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /unsupported MCP-Protocol-Version "1999-01-01"/);
  assert.equal((await post(ping)).status, 200, "no header: the server assumes a revision it speaks");
});

test("http: GET (no server stream) and DELETE (a session needs no ending) are 405 with Allow: POST", async () => {
  const g = await fetch(endpoint, { method: "GET", headers: { accept: "text/event-stream" } });
  assert.equal(g.status, 405);
  assert.equal(g.headers.get("allow"), "POST");
  const d = await fetch(endpoint, { method: "DELETE", headers: { "mcp-session-id": "x" } });
  assert.equal(d.status, 405);
  assert.equal(d.headers.get("allow"), "POST");
});

test("http: media types, the body cap, malformed messages; the server keeps serving", async () => {
  const before = server.runs();
  let r = await post(JSON.stringify({ jsonrpc: "2.0", id: 4, method: "ping" }), { "content-type": "text/plain" });
  assert.equal(r.status, 415);
  transportError(r, /application\/json/);
  r = await post(JSON.stringify({ jsonrpc: "2.0", id: 4, method: "ping" }), { accept: "text/html" });
  assert.equal(r.status, 406);
  r = await post(JSON.stringify({ jsonrpc: "2.0", id: 5, method: "tools/call", params: { name: "run_code", arguments: { code: "#".repeat(70000) } } }));
  assert.equal(r.status, 413);
  transportError(r, /--http-max-body-bytes/);
  r = await post("{not json");
  assert.equal(r.status, 400);
  assert.equal(r.json.error.code, -32700);
  assert.equal(r.json.id, null);
  r = await post(JSON.stringify([{ jsonrpc: "2.0", id: 6, method: "ping" }]));
  assert.equal(r.status, 400);
  assert.equal(r.json.error.code, -32600);
  r = await post(JSON.stringify({ jsonrpc: "2.0", id: 7, method: "no/such/method" }));
  assert.equal(r.status, 200);
  assert.equal(r.json.id, 7);
  assert.equal(r.json.error.code, -32601);
  r = await post(JSON.stringify({ jsonrpc: "2.0", id: 8, method: "tools/call", params: { name: "run_code", arguments: [] } }));
  assert.equal(r.json.error.code, -32602);
  r = await post(JSON.stringify({ jsonrpc: "2.0", id: 9, method: "tools/call", params: { name: "nope", arguments: {} } }));
  assert.equal(r.json.error.code, -32602);
  r = await post(JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }));
  assert.equal(r.status, 202);
  assert.equal(r.text, "");
  r = await post(JSON.stringify({ jsonrpc: "2.0", id: 10, result: {} }));
  assert.equal(r.status, 202);
  assert.equal(server.runs(), before, "nothing ran");
  r = await post(JSON.stringify({ jsonrpc: "2.0", id: 11, method: "tools/call", params: { name: "run_code", arguments: { code: "print(6*7)" } } }));
  assert.equal(r.status, 200);
  assert.equal(r.json.result.structuredContent.stdout, "42\n");
});
