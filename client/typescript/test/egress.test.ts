/* egress.test.ts: allowNet and the egress summary through the TypeScript
 * client (issue 27, docs/EGRESS.md) against real sandboxd servers: one
 * without --egress-allow refuses a run that asks for the network
 * (InvalidArgument naming the entry, nothing ran), and the client refuses a
 * bare string before anything is sent. Needs root (sandboxd does). uid base
 * 54960. */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Client, InvalidArgument } from "../src/index.js";
import { Sandboxd } from "./helpers/sandboxd.js";

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
});

test("a bare string is a TypeError, and nothing is sent", async () => {
  const calls = closed.log().split('request_id="').length;
  await assert.rejects(client.runCode({ code: "print(1)\n", allowNet: "example.com" as unknown as string[] }), {
    name: "TypeError",
    message: 'allowNet: an array of strings such as ["pypi.org"], not a single string ("example.com")',
  });
  assert.equal(closed.log().split('request_id="').length, calls);
});
