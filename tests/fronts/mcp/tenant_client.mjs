/* tenant_client.mjs: the official MCP SDK client (Client and
 * StreamableHTTPClientTransport) with an Authorization header, for the
 * tenants tests (tests/fronts/tenants/test_fronts_tenants.py, pytest):
 *
 *   node tenant_client.mjs ENDPOINT KEY CALLS_JSON
 *
 * KEY "" sends no Authorization header. CALLS_JSON is a list of
 * {"name": TOOL, "arguments": {...}}, {"read": URI} (resources/read) or
 * {"list": true} (resources/list, every page); prints one JSON object:
 * {"results": [CallToolResult, ReadResourceResult or {"error": {code,
 * message, data}}, {"resources": [...]}, ...]} or, when connecting or a
 * call failed, {"error": its text, "code": its code (the HTTP status for
 * the transport's errors)}.
 * Nothing here stands in for the server: every call goes over HTTP. */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [endpoint, key, callsJson] = process.argv.slice(2);
const headers = key ? { Authorization: `Bearer ${key}` } : {};
const client = new Client({ name: "sandboxd-tenant-tests", version: "1.0.0" });
const out = { results: [] };

async function one(call) {
  if (call.read !== undefined) {
    return client.readResource({ uri: call.read }).catch((e) => ({ error: { code: e.code, message: e.message, data: e.data } }));
  }
  if (call.list) {
    const resources = [];
    let cursor;
    do {
      const page = await client.listResources(cursor !== undefined ? { cursor } : {});
      resources.push(...page.resources);
      cursor = page.nextCursor;
    } while (cursor !== undefined);
    return { resources };
  }
  return client.callTool(call);
}
try {
  await client.connect(new StreamableHTTPClientTransport(new URL(endpoint), { requestInit: { headers } }));
  for (const call of JSON.parse(callsJson)) out.results.push(await one(call));
} catch (e) {
  out.error = String(e?.message ?? e);
  out.code = e?.code;
} finally {
  await client.close().catch(() => {});
}
console.log(JSON.stringify(out));
