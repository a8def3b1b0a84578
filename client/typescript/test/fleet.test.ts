/* fleet.test.ts: one client, a fleet of three real sandboxd servers behind
 * one host name (a Kubernetes headless Service: one name, one address per
 * pod). The servers listen on 127.0.0.2, .3 and .4, same port; the name is
 * resolved by the client's resolver option, as DNS would. Shown: calls land
 * on all three; one killed mid-load fails exactly its in-flight calls with
 * UNKNOWN, later calls go to the others, and no run id runs twice (the
 * servers' own logs). uid bases 54300, 54320, 54340. */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Client, RunResult, SandboxError, Unknown } from "../src/index.js";
import { freePort, Sandboxd, waitFor } from "./helpers/sandboxd.js";

const HOSTS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
let servers: Sandboxd[] = [];
let port = 0;
let dns: string[] = [...HOSTS];
let client: Client;

before(async () => {
  port = await freePort(HOSTS);
  servers = await Promise.all(
    HOSTS.map((host, i) => Sandboxd.start({ uidBase: 54300 + 20 * i, host, port, args: ["--workers", "2", "--queue", "64"] })),
  );
  client = new Client(`tcp://sandbox.fleet.test:${port}`, {
    resolver: async () => [...dns],
    resolveIntervalMs: 300,
    reconnectBaseMs: 200,
    reconnectMaxMs: 1000,
  });
});

after(async () => {
  client.close();
  for (const s of servers) {
    await s.cleanup();
  }
});

const keyOf = (host: string): string => `tcp://${host}:${port}`;

/** Every run id in every server's log, with the server that ran it. */
function ranWhere(): Map<string, string[]> {
  const m = new Map<string, string[]>();
  servers.forEach((s, i) => {
    for (const id of s.runIds()) {
      m.set(id, [...(m.get(id) ?? []), HOSTS[i]!]);
    }
  });
  return m;
}

test("the name counts as one endpoint per address; calls land on all three", { timeout: 90000 }, async () => {
  const rs = await Promise.all(Array.from({ length: 12 }, (_, i) => client.runCode({ code: "import time\ntime.sleep(0.3)\nprint('x')", runId: `fleet-spread-${i}` })));
  assert.deepEqual(client.endpoints().map((e) => e.key).sort(), HOSTS.map(keyOf));
  const used = new Map<string, number>();
  for (const r of rs) {
    used.set(r.endpoint, (used.get(r.endpoint) ?? 0) + 1);
  }
  assert.deepEqual([...used.keys()].sort(), HOSTS.map(keyOf), `calls per endpoint: ${JSON.stringify([...used])}`);
  const where = ranWhere();
  for (const r of rs) {
    assert.deepEqual(where.get(r.runId), [r.endpoint.slice(6, -(String(port).length + 1))], `${r.runId} ran once, where the client says`);
  }
});

test("one server killed mid-load: its in-flight calls are UNKNOWN, the rest succeed elsewhere, nothing runs twice", { timeout: 90000 }, async () => {
  const victim = servers[1]!;
  const victimKey = keyOf(HOSTS[1]!);
  const code = "import time\ntime.sleep(1.5)\nprint('done')";
  const load = Array.from({ length: 18 }, (_, i) =>
    client.runCode({ code, runId: `fleet-load-${i}` }).then(
      (r) => r,
      (e: unknown) => e as SandboxError,
    ),
  );
  // Kill it once its workers are busy with this load.
  assert.ok(await waitFor(() => client.endpoints().find((e) => e.key === victimKey)!.inFlight >= 3), "the victim has calls");
  await new Promise((r) => setTimeout(r, 400));
  await victim.kill();
  // Calls made in the instant of the crash may still be sent to it (and be
  // UNKNOWN); "later" means once the client has seen the connection go.
  assert.ok(await waitFor(() => client.endpoints().find((e) => e.key === victimKey)!.state !== "live"), "the death was seen");
  const attemptsBefore = client.endpoints().find((e) => e.key === victimKey)!.connectAttempts;
  const later = await Promise.all(Array.from({ length: 24 }, (_, i) => client.runCode({ code: "print('later')", runId: `fleet-later-${i}` })));
  // Skipped, not tried by each call: only the background reconnects
  // (backoff from 200 ms) knocked on it meanwhile.
  const knocks = client.endpoints().find((e) => e.key === victimKey)!.connectAttempts - attemptsBefore;
  assert.ok(knocks <= 8, `${knocks} connects tried on the dead endpoint during 24 later calls`);
  const outcomes = await Promise.all(load);

  const failed = outcomes.filter((o): o is SandboxError => o instanceof SandboxError);
  const ok = outcomes.filter((o): o is RunResult => o instanceof RunResult);
  assert.ok(failed.length >= 3, `the victim's calls failed (${failed.length})`);
  for (const e of failed) {
    assert.ok(e instanceof Unknown, e.message);
    assert.equal(e.endpoint, victimKey, "only calls that were on the killed server fail");
    assert.equal(e.mayHaveRun, true);
    assert.equal(e.attempts, 1, "never resent");
  }
  assert.equal(ok.length + failed.length, 18);
  for (const r of ok) {
    assert.notEqual(r.endpoint, victimKey);
    assert.equal(r.stdoutText, "done\n");
  }
  for (const r of later) {
    assert.notEqual(r.endpoint, victimKey, "later calls skip the dead endpoint");
  }
  assert.equal(client.endpoints().find((e) => e.key === victimKey)!.state, "dead");

  // The servers' logs: every run id at most once, each OK one exactly where
  // the client says it ran; the failed ones on no surviving server.
  const where = ranWhere();
  for (const [id, hosts] of where) {
    assert.equal(hosts.length, 1, `${id} ran on ${hosts.join(" and ")}`);
  }
  for (const r of [...ok, ...later]) {
    assert.deepEqual(where.get(r.runId), [r.endpoint.slice(6, -(String(port).length + 1))], r.runId);
  }
  const okIds = new Set(ok.map((r) => r.runId));
  const failedIds = Array.from({ length: 18 }, (_, i) => `fleet-load-${i}`).filter((id) => !okIds.has(id));
  for (const id of failedIds) {
    const ran = where.get(id) ?? [];
    assert.ok(ran.every((h) => h === HOSTS[1]), `${id}, failed on the victim, ran on ${ran.join(",")}`);
  }
  console.log(`# fleet: ${ok.length} ok, ${failed.length} UNKNOWN on the killed server, ${later.length} later calls on the others`);
});

test("the dead endpoint is used again once it is back (reconnect with backoff)", { timeout: 90000 }, async () => {
  const victim = servers[1]!;
  await victim.restart(); // same address, port and state dir
  const victimKey = keyOf(HOSTS[1]!);
  assert.ok(await waitFor(() => client.endpoints().find((e) => e.key === victimKey)!.state === "live", 10000), "reconnected in the background");
  const rs = await Promise.all(Array.from({ length: 9 }, (_, i) => client.runCode({ code: "import time\ntime.sleep(0.2)", runId: `fleet-back-${i}` })));
  assert.ok(rs.some((r) => r.endpoint === victimKey), "calls reach it again");
});

test("re-resolution: an address gone from the name gets no more calls; a new one does", { timeout: 90000 }, async () => {
  dns = [HOSTS[0]!, HOSTS[1]!];
  assert.ok(await waitFor(async () => {
    await client.health(); // a call lets the client notice the stale resolution
    return client.endpoints().length === 2;
  }, 5000), "the address left the set");
  const rs = await Promise.all(Array.from({ length: 8 }, () => client.runCode({ code: "import time\ntime.sleep(0.2)" })));
  assert.ok(rs.every((r) => r.endpoint !== keyOf(HOSTS[2]!)), "nothing sent to the removed address");
  dns = [...HOSTS];
  assert.ok(await waitFor(async () => {
    await client.health();
    return client.endpoints().length === 3;
  }, 5000), "it is back");
});

test("a session's calls all go to the server that holds it", { timeout: 90000 }, async () => {
  const ids = ["fs-a", "fs-b", "fs-c", "fs-d"];
  const first = await Promise.all(ids.map((id) => client.runCode({ sessionId: id, code: "open('f', 'w').write('kept')" })));
  for (let round = 0; round < 3; round++) {
    const again = await Promise.all(ids.map((id) => client.runCode({ sessionId: id, code: "print(open('f').read())" })));
    again.forEach((r, i) => {
      assert.equal(r.endpoint, first[i]!.endpoint, `${ids[i]} stays put`);
      assert.equal(r.stdoutText, "kept\n");
    });
  }
  for (const id of ids) {
    assert.equal((await client.listFiles(id)).entries.some((e) => e.name === "f"), true);
    await client.closeSession(id);
  }
  // A second client with the same endpoint list finds the sessions where
  // the first put them (rendezvous hashing), without talking to it.
  const other = new Client(`tcp://sandbox.fleet.test:${port}`, { resolver: async () => [...HOSTS] });
  try {
    const made = await client.runCode({ sessionId: "fs-shared", code: "open('g', 'w').write('1')" });
    const seen = await other.runCode({ sessionId: "fs-shared", code: "print(open('g').read())" });
    assert.equal(seen.endpoint, made.endpoint);
    assert.equal(seen.stdoutText, "1\n");
    await other.closeSession("fs-shared");
  } finally {
    other.close();
  }
});
