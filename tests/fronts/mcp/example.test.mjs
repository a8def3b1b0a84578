/* example.test.mjs: examples/mcp/agent_loop.mjs, an agent loop over MCP
 * with the official SDK client, run as a user runs it (node, its own
 * node_modules from its lockfile, sandbox-mcp over stdio) against a real
 * sandboxd (uid base 61300), and its steps checked: the tools listed, an
 * interpreter session's value, a mistake returned as a tool result and
 * corrected, a figure as an image, a session file read as a resource, the
 * session closed. Needs root (sandboxd does). */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import * as path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { binDir, Sandboxd } from "./lib.mjs";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
let server;

before(async () => {
  server = await Sandboxd.start({ uidBase: 61300, args: ["--workers", "2"] });
});

after(async () => {
  assert.equal(await server.stop(), 0, "sandboxd exits 0 on SIGTERM");
});

test("example: the agent loop over MCP runs its six steps", { timeout: 120000 }, async () => {
  const example = path.join(repo, "examples", "mcp", "agent_loop.mjs");
  const { stdout } = await promisify(execFile)(process.execPath, [example, path.join(binDir, "sandbox-mcp"), server.tcp],
    { timeout: 110000, cwd: "/tmp" });
  const steps = stdout.trim().split("\n").map((l) => JSON.parse(l));
  assert.equal(steps.length, 7, stdout);
  assert.deepEqual(steps[0].tools.sort(), ["close_session", "list_session_files", "preview_file", "run_code"]);
  assert.deepEqual([steps[1].status, steps[1].result], ["ok", "12"], "step 1: the data's length as the result");
  assert.equal(steps[2].isError, true, "step 2: the mistake is a tool result with isError");
  assert.match(steps[2].stderrTail, /NameError: name 'sale' is not defined/);
  assert.equal(steps[3].status, "ok", "step 3: corrected, using step 1's variables");
  assert.match(steps[3].result, /^\d+$/);
  assert.deepEqual(steps[4].images, ["image/png"], "step 4: the figure as an image");
  assert.equal(steps[5].mimeType, "text/plain");
  assert.equal(steps[5].text, `best month: ${steps[3].result}\n`, "step 5: the session's file read as a resource");
  assert.equal(steps[6].tool, "close_session");
  assert.equal(steps[6].isError, false, "step 6: the session closed");
});
