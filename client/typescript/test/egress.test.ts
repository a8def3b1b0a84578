/* egress.test.ts: allowNet and the egress summary through the TypeScript
 * client (issue 27, docs/EGRESS.md) against real sandboxd servers: one
 * without --egress-allow refuses a run that asks for the network
 * (InvalidArgument naming the entry, nothing ran), the client refuses a bare
 * string before anything is sent, and one whose --egress-allow holds
 * loopback lets a run fetch from a web server of this test through its
 * proxy, the reply's egress summary counting the connection. Needs root
 * (sandboxd does). uid bases 54960, 54980. */
import assert from "node:assert/strict";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";

import { Client, InvalidArgument } from "../src/index.js";
import { Sandboxd } from "./helpers/sandboxd.js";

const BODY = "egress-ok-5e0b";

/** urllib honours HTTP_PROXY, which the server sets for a run with allowNet. */
const fetchCode = (port: number): string =>
  `import urllib.request\nprint(urllib.request.urlopen("http://127.0.0.1:${port}/x", timeout=20).read().decode())\n`;

/** Runs the server ran (a refused one is logged with its status). */
const ran = (s: Sandboxd): number => (s.log().match(/event=run .* status=OK /g) ?? []).length;

let closed: Sandboxd;
let client: Client;

before(async () => {
  closed = await Sandboxd.start({ uidBase: 54960, args: ["--workers", "1"] });
  client = new Client(closed.tcp);
});

after(async () => {
  client.close();
  assert.equal(await closed.stop(), 0, "sandboxd exits 0 on SIGTERM");
  await closed.cleanup();
});

test("a server without --egress-allow refuses allowNet, naming the entry; nothing ran", async () => {
  const before = ran(closed);
  await assert.rejects(
    client.runCode({ code: "print(1)\n", allowNet: ["example.com"] }),
    (e: unknown) => e instanceof InvalidArgument && e.message.includes('allow_net[0] ("example.com")') && e.fromServer && !e.mayHaveRun,
  );
  // StartRun checks the request as RunCode does.
  await assert.rejects(
    client.startRun({ code: "print(1)\n", allowNet: ["example.com"] }),
    (e: unknown) => e instanceof InvalidArgument && e.message.includes('allow_net[0] ("example.com")'),
  );
  assert.equal(ran(closed), before);
  // Without allowNet: no network, no summary.
  const r = await client.runCode({ code: "print(1)\n" });
  assert.equal(r.stdoutText, "1\n");
  assert.equal(r.egress, undefined);
  assert.deepEqual((await client.info()).egressAllow, []);
});

test("a bare string is a TypeError, and nothing is sent", async () => {
  const calls = closed.log().split('request_id="').length;
  await assert.rejects(client.runCode({ code: "print(1)\n", allowNet: "example.com" as unknown as string[] }), {
    name: "TypeError",
    message: 'allowNet: an array of strings such as ["pypi.org"], not a single string ("example.com")',
  });
  assert.equal(closed.log().split('request_id="').length, calls);
});

test("a run reaches its allow list through the proxy; egress counts it", async () => {
  const web = http.createServer((_req, res) => {
    res.writeHead(200, { "Content-Length": String(BODY.length) });
    res.end(BODY);
  });
  await new Promise<void>((resolve) => web.listen(0, "127.0.0.1", resolve));
  const port = (web.address() as AddressInfo).port;
  // Private addresses are allowed only by CIDR entries; a ceiling entry
  // without a port allows 80 and 443 only.
  const s = await Sandboxd.start({ uidBase: 54980, args: ["--workers", "1", "--egress-allow", `127.0.0.0/8:${port}`] });
  const c = new Client(s.tcp);
  try {
    assert.deepEqual((await c.info()).egressAllow, [`127.0.0.0/8:${port}`]);
    const r = await c.runCode({ code: fetchCode(port), allowNet: [`127.0.0.1:${port}`], limits: { timeoutMs: 30000 } });
    assert.equal(r.stdoutText, `${BODY}\n`, `${r.stderrText} ${r.feedback.join(" | ")}`);
    assert.ok(r.egress !== undefined && r.egress.connections >= 1, JSON.stringify(r.egress));
    assert.equal(r.egress.refused, 0);
    assert.ok(r.egress.bytesDown >= BODY.length, JSON.stringify(r.egress));
  } finally {
    c.close();
    await s.cleanup();
    await new Promise((resolve) => web.close(resolve));
  }
});
