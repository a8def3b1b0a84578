/* interpreter.test.ts: interpreter sessions and rich results through the
 * TypeScript client (sessionMode, result, stateLost, interpreterEnded, the
 * GetInfo fields; docs/INTERPRETER.md) against a real sandboxd. Needs root
 * (sandboxd does). uid base 54800. */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Client, FailedPrecondition, InvalidArgument } from "../src/index.js";
import { Sandboxd } from "./helpers/sandboxd.js";

let s: Sandboxd;
let client: Client;

before(async () => {
  s = await Sandboxd.start({ uidBase: 54800, args: ["--workers", "2", "--interpreter-grace-ms", "500"] });
  client = new Client(s.tcp);
});

after(async () => {
  client.close();
  assert.equal(await s.stop(), 0, "sandboxd exits 0 on SIGTERM");
  await s.cleanup();
});

test("x = 41, then x + 1 is 42: the state lives between calls", async () => {
  let r = await client.runCode({ code: "x = 41\n", sessionId: "ts-i1", sessionMode: "interpreter" });
  assert.equal(r.result, "");
  assert.equal(r.sessionMode, "interpreter");
  assert.ok(r.sessionCreated);
  r = await client.runCode({ code: "x + 1\n", sessionId: "ts-i1" });
  assert.deepEqual([r.result, r.resultTruncated, r.stateLost, r.interpreterEnded], ["42", false, false, false]);
  await client.closeSession("ts-i1");
});

test("every run returns its last expression's value", async () => {
  const r = await client.runCode({ code: "2 + 3\n" });
  assert.equal(r.result, "5");
  assert.equal(r.sessionMode, "");
});

test("a killed interpreter is reported, then the loss of its state", async () => {
  await client.runCode({ code: "y = 1\n", sessionId: "ts-i2", sessionMode: "interpreter" });
  let r = await client.runCode({
    code: "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(30)\n",
    sessionId: "ts-i2",
    limits: { timeoutMs: 1000 },
  });
  assert.equal(r.killedBy, "timeout");
  assert.ok(r.interpreterEnded && !r.stateLost);
  r = await client.runCode({ code: "'y' in dir()\n", sessionId: "ts-i2" });
  assert.ok(r.stateLost && !r.interpreterEnded);
  assert.equal(r.result, "False");
  assert.ok(r.feedback.some((f) => f.includes("state was lost")), r.feedback.join(" | "));
  await client.closeSession("ts-i2");
});

test("the other mode and a missing session are refused by the server", async () => {
  await client.runCode({ code: "z = 1\n", sessionId: "ts-i3", sessionMode: "files" });
  await assert.rejects(client.runCode({ code: "z\n", sessionId: "ts-i3", sessionMode: "interpreter" }), (e: unknown) =>
    e instanceof FailedPrecondition && /is a FILES session/.test(e.message),
  );
  await assert.rejects(client.runCode({ code: "1\n", sessionMode: "interpreter" }), (e: unknown) =>
    e instanceof InvalidArgument && /needs a session_id/.test(e.message),
  );
  await client.closeSession("ts-i3");
});

test("a bad sessionMode is refused before anything is sent", async () => {
  const before = (await client.info()).requestsTotal;
  await assert.rejects(
    client.runCode({ code: "1\n", sessionId: "ts-i4", sessionMode: "notebook" as unknown as "files" }),
    (e: unknown) => e instanceof RangeError && /sessionMode: "notebook"/.test(e.message),
  );
  assert.equal((await client.info()).requestsTotal, before + 1);
});

test("GetInfo reports the interpreters", async () => {
  const i = await client.info();
  assert.equal(i.maxInterpreters, 4);
  assert.equal(i.interpreterIdleS, 600);
  assert.equal(i.interpreterMaxLifetimeS, 3600);
  assert.ok(i.interpreterStartsTotal >= 2);
});
