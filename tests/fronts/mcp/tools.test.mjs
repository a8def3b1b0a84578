/* tools.test.mjs: the size of the tool list an agent carries in its
 * context on every turn. sandbox-mcp's tools/list answer (descriptions and
 * schemas from client/mcp/tools.c), its result serialized as compact JSON,
 * measured in UTF-8 bytes and in tokens of o200k_base (gpt-tokenizer, which
 * ships its ranks: offline), against budgets set just above the size it
 * has: a change that makes the list grow has to raise them here, on
 * purpose. tools/list needs no sandboxd (the endpoint is never called), so
 * this group needs no root. */
import assert from "node:assert/strict";
import { test } from "node:test";

import { countTokens } from "gpt-tokenizer/encoding/o200k_base";

import { RawMcp } from "./lib.mjs";

// Measured 2026-11-27: 10,434 bytes and 2,473 tokens before the tools were
// shortened, 6,568 and 1,562 after (docs/CLIENTS.md, "The tool list's size").
// run_code's language and version: 6,698 and 1,593 (within the budget).
const BUDGET_BYTES = 6700;
const BUDGET_TOKENS = 1600;
const WHERE = "JSON.stringify of the result of sandbox-mcp's tools/list; the text is client/mcp/tools.c's";

test("tools: the tool list stays within its budget of bytes and tokens", async (t) => {
  const raw = new RawMcp("tcp://127.0.0.1:1"); // never connected: tools/list is the server's own
  let answer;
  try {
    answer = await raw.call(1, "tools/list", {});
  } finally {
    await raw.close();
  }
  const { tools } = answer.result;
  assert.deepEqual(tools.map((x) => x.name), ["run_code", "list_session_files", "preview_file", "close_session"]);
  const sizes = tools.map((x) => {
    const s = JSON.stringify(x);
    return `${x.name} ${Buffer.byteLength(s)} bytes, ${countTokens(s)} tokens (description ${Buffer.byteLength(x.description)}, ` +
      `inputSchema ${Buffer.byteLength(JSON.stringify(x.inputSchema))}, ` +
      `outputSchema ${x.outputSchema ? Buffer.byteLength(JSON.stringify(x.outputSchema)) : 0})`;
  });
  const whole = JSON.stringify(answer.result);
  const bytes = Buffer.byteLength(whole);
  const tokens = countTokens(whole);
  t.diagnostic(`tools/list: ${bytes} bytes, ${tokens} o200k_base tokens; ${sizes.join("; ")}`);
  assert.ok(bytes <= BUDGET_BYTES,
    `tools/list is ${bytes} bytes, over its budget of ${BUDGET_BYTES} (${WHERE}): ${sizes.join("; ")}`);
  assert.ok(tokens <= BUDGET_TOKENS,
    `tools/list is ${tokens} o200k_base tokens, over its budget of ${BUDGET_TOKENS} (${WHERE}): ${sizes.join("; ")}`);
});
