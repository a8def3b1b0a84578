// Drives the npm piston-client (pinned in package-lock.json) against a
// server: node client.mjs SERVER_URL CALLS_JSON, where CALLS_JSON is a list
// of {"op": "runtimes"} or {"op": "execute", "language", "code", "config"};
// prints the list of answers as JSON. The client's own failures (it catches
// them and returns {success: false, error}) are kept, with the error's text.
//
// With PISTON_API_KEY set, every request carries "Authorization: Bearer
// KEY" (sandboxd with --tenants): piston-client has no option for headers,
// so node's http.request, which its node-fetch calls for each request, is
// wrapped to add the header, as a deployment would wrap it.
import http from "node:http";

const apiKey = process.env.PISTON_API_KEY;
if (apiKey) {
  const request = http.request;
  http.request = (options, ...rest) => {
    options.headers = { ...(options.headers ?? {}), Authorization: `Bearer ${apiKey}` };
    return request(options, ...rest);
  };
}
const { default: piston } = await import("piston-client");

const [server, callsJson] = process.argv.slice(2);
const client = piston({ server });
const answers = [];
for (const call of JSON.parse(callsJson)) {
  const answer =
    call.op === "runtimes"
      ? await client.runtimes()
      : await client.execute(call.language, call.code, call.config ?? {});
  if (answer && answer.success === false) answer.error = String(answer.error);
  answers.push(answer);
}
console.log(JSON.stringify(answers));
