/* inspector.test.mjs: the MCP front driven by the MCP Inspector's CLI
 * (@modelcontextprotocol/inspector, `mcp-inspector --cli TARGET --format
 * json --method ...`: one process per request, as a person or a CI job runs
 * it) over both transports of a real sandboxd (uid base 61400): sandbox-mcp
 * over stdio and /mcp over Streamable HTTP. Each answer is the Inspector's
 * JSON ({"result": ...} on stdout; an error envelope on stderr and its exit
 * code). The Inspector keeps a catalog under $HOME: it gets a HOME of its
 * own, removed at the end. Needs root (sandboxd does). */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { binDir, Sandboxd } from "./lib.mjs";

const inspectorBin = path.join(path.dirname(fileURLToPath(import.meta.url)), "node_modules", ".bin", "mcp-inspector");
let server;
let home;

before(async () => {
  server = await Sandboxd.start({
    uidBase: 61400, httpListen: true,
    args: ["--workers", "2", "--max-timeout-ms", "60000", "--http-fronts", "mcp"],
  });
  home = mkdtempSync(path.join(tmpdir(), "sbx-mcp-inspector-"));
});

after(async () => {
  if (home) rmSync(home, { recursive: true, force: true });
  assert.equal(await server.stop(), 0, "sandboxd exits 0 on SIGTERM");
});

/** One Inspector CLI run: {code, stdout, stderr, json: stdout parsed, or
 * undefined when empty}. */
function inspector(target, args) {
  return new Promise((resolve) => {
    execFile(inspectorBin, ["--cli", ...target, "--format", "json", ...args],
      { env: { ...process.env, HOME: home }, timeout: 60000 }, (err, stdout, stderr) => {
        const code = err ? (typeof err.code === "number" ? err.code : -1) : 0;
        resolve({ code, stdout, stderr, json: stdout.trim() ? JSON.parse(stdout) : undefined });
      });
  });
}

const transports = [
  ["stdio", () => [path.join(binDir, "sandbox-mcp"), "--endpoint", server.tcp]],
  ["http", () => [`${server.http}/mcp`, "--transport", "http"]],
];

for (const [label, target] of transports) {
  test(`inspector ${label}: tools/list has the four tools, and --strict finds no schema portability problem`, async () => {
    const r = await inspector(target(), ["--method", "tools/list", "--strict"]);
    assert.equal(r.code, 0, r.stderr);
    const byName = Object.fromEntries(r.json.result.tools.map((t) => [t.name, t]));
    assert.deepEqual(Object.keys(byName).sort(), ["close_session", "list_session_files", "preview_file", "run_code"]);
    assert.deepEqual(byName.run_code.inputSchema.required, ["code"]);
    assert.equal(byName.run_code.outputSchema.type, "object");
    assert.doesNotMatch(r.stderr, /Error: tool|Warning: tool|Schema portability/, "no finding of --strict");
  });

  test(`inspector ${label}: tools/call run_code answers with what the code printed`, async () => {
    const before = server.runs();
    const r = await inspector(target(), ["--method", "tools/call", "--tool-name", "run_code", "--tool-arg", "code=print(6*7)"]);
    assert.equal(r.code, 0, r.stderr);
    const res = r.json.result;
    assert.equal(res.isError, false);
    assert.equal(res.structuredContent.stdout, "42\n");
    assert.equal(res.structuredContent.status, "ok");
    assert.ok(res.content.some((c) => c.type === "text" && c.text === "stdout:\n42\n"), JSON.stringify(res.content));
    assert.equal(server.runs(), before + 1, "one run in the server's log");
  });

  test(`inspector ${label}: a failing run and a bad argument are tool results with isError (exit 5)`, async () => {
    let r = await inspector(target(), ["--method", "tools/call", "--tool-name", "run_code", "--tool-arg", "code=import sys; sys.exit(3)"]);
    assert.equal(r.code, 5, r.stderr);
    assert.equal(r.json.result.isError, true);
    assert.equal(r.json.result.structuredContent.exit_code, 3);
    assert.match(r.json.result.content[0].text, /status: error \(exit code 3\)/);
    assert.match(r.stderr, /tool_is_error/);
    r = await inspector(target(), ["--method", "tools/call", "--tool-name", "run_code", "--tool-args-json",
      JSON.stringify({ code: "print(1)", colour: "red" })]);
    assert.equal(r.code, 5, r.stderr);
    assert.match(r.json.result.content[0].text, /unknown property "colour"/);
  });

  test(`inspector ${label}: a session's file through resources/templates/list, resources/list and resources/read`, async () => {
    let r = await inspector(target(), ["--method", "tools/call", "--tool-name", "run_code", "--tool-args-json",
      JSON.stringify({ code: `open('notes.txt', 'w').write('from ${label}\\n')`, session_mode: "files" })]);
    assert.equal(r.code, 0, r.stderr);
    const sid = r.json.result.structuredContent.session_id;
    assert.match(sid, /^[0-9a-f-]{36}$/);
    const uri = `sandbox://sessions/${sid}/notes.txt`;
    try {
      r = await inspector(target(), ["--method", "resources/templates/list"]);
      assert.equal(r.code, 0, r.stderr);
      assert.deepEqual(r.json.result.resourceTemplates.map((t) => t.uriTemplate), ["sandbox://sessions/{session_id}/{+path}"]);

      r = await inspector(target(), ["--method", "resources/list"]);
      assert.equal(r.code, 0, r.stderr);
      const uris = r.json.result.resources.map((x) => x.uri);
      if (label === "http") {
        // /mcp lists the sessions any caller ran code in through it.
        assert.ok(uris.includes(uri), JSON.stringify(uris));
      } else {
        // sandbox-mcp lists its own process's sessions: each Inspector run is a new process.
        assert.deepEqual(uris, []);
      }

      r = await inspector(target(), ["--method", "resources/read", "--uri", uri]);
      assert.equal(r.code, 0, r.stderr);
      assert.deepEqual(r.json.result.contents, [{ uri, mimeType: "text/plain", text: `from ${label}\n` }]);
    } finally {
      r = await inspector(target(), ["--method", "tools/call", "--tool-name", "close_session", "--tool-args-json",
        JSON.stringify({ session_id: sid })]);
      assert.equal(r.code, 0, r.stderr);
    }
    r = await inspector(target(), ["--method", "resources/read", "--uri", uri]);
    assert.notEqual(r.code, 0, "the closed session's file is gone");
    assert.match(r.stderr, /Resource not found/);
  });
}
