/* tenant_client.mjs: the official MCP SDK client (Client and
 * StreamableHTTPClientTransport) with an Authorization header, for the
 * tenants tests (tests/fronts/tenants/test_fronts_tenants.py, pytest):
 *
 *   node tenant_client.mjs ENDPOINT KEY CALLS_JSON
 *
 * KEY "" sends no Authorization header. CALLS_JSON is a list of
 * {"name": TOOL, "arguments": {...}}; prints one JSON object: {"results":
 * [CallToolResult, ...]} or, when connecting or a call failed, {"error":
 * its text, "code": its code (the HTTP status for the transport's errors)}.
 * Nothing here stands in for the server: every call goes over HTTP. */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [endpoint, key, callsJson] = process.argv.slice(2);
const headers = key ? { Authorization: `Bearer ${key}` } : {};
const client = new Client({ name: "sandboxd-tenant-tests", version: "1.0.0" });
const out = { results: [] };
try {
  await client.connect(new StreamableHTTPClientTransport(new URL(endpoint), { requestInit: { headers } }));
  for (const call of JSON.parse(callsJson)) out.results.push(await client.callTool(call));
} catch (e) {
  out.error = String(e?.message ?? e);
  out.code = e?.code;
} finally {
  await client.close().catch(() => {});
}
console.log(JSON.stringify(out));
