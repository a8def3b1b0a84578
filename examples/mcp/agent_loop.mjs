/* agent_loop.mjs: an agent loop over MCP, as an agent framework drives
 * sandboxd's MCP front with the official MCP TypeScript SDK client.
 *
 *   cd examples/mcp && npm ci      # ./scripts/build does it too
 *   node agent_loop.mjs [SANDBOX_MCP] [ENDPOINT]
 *
 * SANDBOX_MCP: the sandbox-mcp binary (default build/bin/sandbox-mcp of
 * this checkout); ENDPOINT: a running sandboxd (default
 * tcp://127.0.0.1:7878, the server's default). The "model" here is a fixed
 * plan, so that the loop is reproducible; a real agent puts an LLM where
 * nextStep() is. Each step is one tools/call; the loop reads each result
 * the way a model reads it (structuredContent: status, stdout, stderr, the
 * value of the last expression, artifacts) and decides what comes next:
 *
 *   1. data into an interpreter session (its variables live between calls);
 *   2. a step with a mistake: the error comes back as a tool result (not a
 *      protocol error), with the traceback, and the agent corrects itself;
 *   3. the corrected step, using step 1's variables;
 *   4. a figure (plt.show()), which comes back as an image;
 *   5. a file the session wrote, read as an MCP resource (resources/read
 *      of the sandbox:// URI resources/list gives);
 *   6. close_session.
 *
 * One JSON line per step on stdout. Run by ctest's fronts_mcp_example. */
import * as path from "node:path";
import { fileURLToPath } from "node:url";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const sandboxMcp = process.argv[2] ?? path.join(here, "..", "..", "build", "bin", "sandbox-mcp");
const endpoint = process.argv[3] ?? "tcp://127.0.0.1:7878";
const session = `agent-${process.pid}`;

/** The plan: given what the last step returned, the next tool call (or null). */
function nextStep(step, last) {
  const run = (code) => ({ name: "run_code", arguments: { code, session_id: session, session_mode: "interpreter" } });
  switch (step) {
    case 1:
      return run("import random\nrandom.seed(7)\nsales = [random.randint(50, 150) for _ in range(12)]\nlen(sales)\n");
    case 2: // a mistake a model makes: a name it never defined
      return run("best_month = sales.index(max(sale))\n");
    case 3: // it reads the traceback and corrects the name
      if (!/NameError: name 'sale' is not defined/.test(last.structuredContent.stderr)) {
        throw new Error(`expected the NameError in step 2's result, got ${JSON.stringify(last.structuredContent)}`);
      }
      return run("best_month = sales.index(max(sales)) + 1\nwith open('report.txt', 'w') as f:\n    f.write(f'best month: {best_month}\\n')\nbest_month\n");
    case 4:
      return run("import matplotlib.pyplot as plt\nplt.plot(range(1, 13), sales)\nplt.title('sales')\nplt.show()\n");
    case 5:
      return { resource: "report.txt" };
    case 6:
      return { name: "close_session", arguments: { session_id: session } };
    default:
      return null;
  }
}

const transport = new StdioClientTransport({ command: sandboxMcp, args: ["--endpoint", endpoint], stderr: "inherit" });
const client = new Client({ name: "sandboxd-agent-example", version: "1.0.0" });
await client.connect(transport);
try {
  const { tools } = await client.listTools();
  console.log(JSON.stringify({ step: 0, tools: tools.map((t) => t.name) }));
  let last = null;
  for (let step = 1; ; step++) {
    const call = nextStep(step, last);
    if (call === null) {
      break;
    }
    if (call.resource !== undefined) {
      // The session's files are resources: list them, read the one wanted.
      const { resources } = await client.listResources();
      const found = resources.find((r) => r.uri.endsWith(`/${session}/${call.resource}`));
      if (found === undefined) {
        throw new Error(`${call.resource} is not among the resources: ${resources.map((r) => r.uri).join(", ")}`);
      }
      const { contents } = await client.readResource({ uri: found.uri });
      console.log(JSON.stringify({ step, uri: found.uri, mimeType: contents[0].mimeType, text: contents[0].text }));
      continue;
    }
    last = await client.callTool(call);
    const s = last.structuredContent ?? {};
    console.log(JSON.stringify({
      step,
      tool: call.name,
      isError: last.isError === true,
      status: s.status,
      result: s.result,
      stderrTail: typeof s.stderr === "string" ? s.stderr.trim().split("\n").pop() : undefined,
      images: last.content.filter((c) => c.type === "image").map((c) => c.mimeType),
    }));
  }
} finally {
  await client.close();
}
