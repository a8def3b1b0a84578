/* tenants.test.ts: API keys (ClientOptions.apiKey, $SANDBOX_API_KEY)
 * against real sandboxd servers with --tenants (docs/CLIENTS.md, "API
 * keys"): a key works; no key and a wrong key are Unauthenticated with the
 * server's exact message and are not retried (the server logs
 * event=auth_failed once per attempt); two clients with different keys and
 * the same session id see their own files, on one server and in a fleet
 * (each client's session pins are its own); a bad key is refused in this
 * process and never shown. uid bases 54900, 54920, 54940. */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { writeFileSync } from "node:fs";
import * as path from "node:path";
import { after, before, test } from "node:test";
import { inspect } from "node:util";

import { API_KEY_MAX, Client, Code, NotFound, Unauthenticated } from "../src/index.js";
import { sessionScore } from "../src/fleet.js";
import { rejection, Sandboxd, tempDir } from "./helpers/sandboxd.js";

const KEY_A = "sbx-alpha-0123456789abcdef";
const KEY_B = "sbx-beta-fedcba9876543210";
const NO_KEY = "this server needs an API key (RequestEnvelope.credential, Authorization: Bearer) or a client certificate of a tenant";
const WRONG_KEY = "the API key belongs to no tenant of this server";
/** What the server adds to a refused RunCode's or StartRun's message. */
const RAN = "; nothing ran";
const RULE = "at most 512 bytes of printable ASCII without spaces";

const sha256 = (s: string): string => createHash("sha256").update(s).digest("hex");
const write = (name: string, text: string): string => `open('${name}', 'w').write('${text}')\nprint('wrote')\n`;

let servers: Sandboxd[] = [];
const savedEnv = process.env.SANDBOX_API_KEY;

before(async () => {
  delete process.env.SANDBOX_API_KEY;
  const file = path.join(tempDir("sbx-ts-tenants-"), "tenants.json");
  writeFileSync(
    file,
    JSON.stringify({
      tenants: [
        { name: "alpha", api_keys_sha256: [sha256(KEY_A)] },
        { name: "beta", api_keys_sha256: [sha256(KEY_B)] },
      ],
    }),
  );
  servers = await Promise.all(
    [54900, 54920, 54940].map((uidBase) => Sandboxd.start({ uidBase, args: ["--workers", "1", "--tenants", file] })),
  );
});

after(async () => {
  if (savedEnv === undefined) {
    delete process.env.SANDBOX_API_KEY;
  } else {
    process.env.SANDBOX_API_KEY = savedEnv;
  }
  for (const s of servers) {
    await s.cleanup();
  }
});

const authFailures = (s: Sandboxd, reason: string): number => s.log().split(`event=auth_failed reason=${reason} `).length - 1;

test("a key works; no key and a wrong key are UNAUTHENTICATED, once, nothing ran", { timeout: 90000 }, async () => {
  const s = servers[0]!;
  const a = new Client(s.tcp, { apiKey: KEY_A });
  try {
    const r = await a.runCode({ code: "print('hello')", runId: "ts-tenant-ok" });
    assert.equal(r.stdoutText, "hello\n");
    assert.equal((await a.info()).workers, 1);
  } finally {
    a.close();
  }
  const cases: Array<[string | undefined, string, string]> = [
    [undefined, NO_KEY, "no_credential"],
    ["", NO_KEY, "no_credential"],
    ["sbx-not-a-tenant-key", WRONG_KEY, "unknown_key"],
  ];
  for (const [apiKey, message, reason] of cases) {
    const before = authFailures(s, reason);
    // retries: 3 and a quick backoff: UNAUTHENTICATED must not be retried even so.
    const c = new Client(s.tcp, { apiKey, retries: 3, retryBaseMs: 1 });
    try {
      const calls: Array<[() => Promise<unknown>, string]> = [
        [() => c.runCode({ code: "print(1)", runId: `ts-tenant-refused-${reason}` }), RAN],
        [() => c.info(), ""],
        [() => c.listFiles("demo"), ""],
      ];
      for (const [call, suffix] of calls) {
        const e = await rejection(call());
        assert.ok(e instanceof Unauthenticated, `${e.name}: ${e.message}`);
        assert.equal(e.code, Code.UNAUTHENTICATED);
        assert.equal(e.code, 16);
        assert.equal(e.codeName, "UNAUTHENTICATED");
        assert.equal(e.message, `UNAUTHENTICATED: ${message}${suffix}`);
        assert.equal(e.attempts, 1);
        assert.equal(e.fromServer, true);
        assert.equal(e.mayHaveRun, false);
        assert.equal(e.endpoint, s.tcp);
      }
      assert.equal(await c.health(), "SERVING"); // Health needs no key
    } finally {
      c.close();
    }
    assert.equal(authFailures(s, reason) - before, 3, `${String(apiKey)}: ${s.log().slice(-2000)}`);
  }
  assert.ok(!s.runIds().some((id) => id.startsWith("ts-tenant-refused")), "nothing refused ran");
});

test("two tenants, one session id, one server: each sees its own files", { timeout: 90000 }, async () => {
  const s = servers[0]!;
  const a = new Client(s.tcp, { apiKey: KEY_A });
  const b = new Client(s.tcp, { apiKey: KEY_B });
  try {
    const ra = await a.runCode({ code: write("a.txt", "from alpha"), sessionId: "demo" });
    const rb = await b.runCode({ code: write("b.txt", "from beta"), sessionId: "demo" });
    assert.ok(ra.sessionCreated && rb.sessionCreated);
    const namesA = (await a.listFiles("demo")).entries.map((e) => e.name);
    const namesB = (await b.listFiles("demo")).entries.map((e) => e.name);
    assert.ok(namesA.includes("a.txt") && !namesA.includes("b.txt"), String(namesA));
    assert.ok(namesB.includes("b.txt") && !namesB.includes("a.txt"), String(namesB));
    assert.equal(Buffer.from((await a.readFile("demo", "a.txt")).content).toString(), "from alpha");
    assert.equal(Buffer.from((await b.readFile("demo", "b.txt")).content).toString(), "from beta");
    assert.ok((await rejection(a.readFile("demo", "b.txt"))) instanceof NotFound);
    await a.closeSession("demo");
    assert.ok((await rejection(a.listFiles("demo"))) instanceof NotFound);
    assert.equal(Buffer.from((await b.readFile("demo", "b.txt")).content).toString(), "from beta");
  } finally {
    a.close();
    b.close();
  }
});

const homeOf = (sessionId: string, keys: string[]): string =>
  [...keys].sort((x, y) => sessionScore(sessionId, y) - sessionScore(sessionId, x) || (x < y ? -1 : x > y ? 1 : 0))[0]!;

test("a fleet: two clients' session pins are their own", { timeout: 90000 }, async () => {
  // A sees two servers, B three; the session id is one whose home among
  // A's two differs from its home among B's three. B must go to its own
  // home, not follow A's pin (a pin cache shared by the clients of a
  // process would send it where A's session lives).
  const urls = servers.map((s) => s.tcp);
  let session = "";
  for (let i = 0; session === ""; i++) {
    if (homeOf(`nb-${i}`, urls.slice(0, 2)) !== homeOf(`nb-${i}`, urls)) {
      session = `nb-${i}`;
    }
  }
  const homeA = homeOf(session, urls.slice(0, 2));
  const homeB = homeOf(session, urls);
  const a = new Client(urls.slice(0, 2), { apiKey: KEY_A });
  const b = new Client(urls, { apiKey: KEY_B });
  try {
    const ra = await a.runCode({ code: write("a.txt", "alpha"), sessionId: session });
    assert.equal(ra.endpoint, homeA);
    const rb = await b.runCode({ code: write("b.txt", "beta"), sessionId: session });
    assert.equal(rb.endpoint, homeB, `A's home ${homeA}, B's ${homeB}`);
    assert.ok(rb.sessionCreated);
    for (let i = 0; i < 3; i++) {
      assert.equal((await a.runCode({ code: "print(1)", sessionId: session })).endpoint, homeA);
      assert.equal((await b.runCode({ code: "print(1)", sessionId: session })).endpoint, homeB);
    }
    assert.ok((await a.listFiles(session)).entries.some((e) => e.name === "a.txt"));
    assert.ok(!(await b.listFiles(session)).entries.some((e) => e.name === "a.txt"));
  } finally {
    a.close();
    b.close();
  }
});

test("$SANDBOX_API_KEY is picked up; apiKey wins; \"\" sends none", { timeout: 90000 }, async () => {
  const s = servers[0]!;
  process.env.SANDBOX_API_KEY = KEY_B;
  const clients: Client[] = [];
  const open = (apiKey?: string): Client => {
    const c = new Client(s.tcp, apiKey === undefined ? {} : { apiKey });
    clients.push(c);
    return c;
  };
  try {
    await open().runCode({ code: write("b.txt", "env"), sessionId: "env" });
    assert.equal(Buffer.from((await open(KEY_B).readFile("env", "b.txt")).content).toString(), "env");
    assert.ok((await rejection(open(KEY_A).readFile("env", "b.txt"))) instanceof NotFound);
    assert.ok((await rejection(open("").info())) instanceof Unauthenticated);
    process.env.SANDBOX_API_KEY = "";
    assert.ok((await rejection(open().info())) instanceof Unauthenticated);
  } finally {
    delete process.env.SANDBOX_API_KEY;
    for (const c of clients) {
      c.close();
    }
  }
});

test("a bad key is refused here and never shown; no inspect shows a key", () => {
  const bad: Array<[string, string]> = [
    ["a".repeat(513), "this one has 513 characters"],
    ["has space", "character 4 of 9 is a space"],
    ["trailing-newline\n", "character 17 of 17 is a space"],
    ["tab\there", "character 4 of 8"],
    ["del\x7f", "character 4 of 4"],
    ["nul\x00", "character 4 of 4"],
    ["caf\u00e9", "character 4 of 4"],
  ];
  for (const [key, where] of bad) {
    assert.throws(
      () => new Client("tcp://127.0.0.1:9", { apiKey: key }),
      (e: unknown) => {
        assert.ok(e instanceof RangeError);
        assert.ok(e.message.startsWith("ClientOptions.apiKey: ") && e.message.includes(RULE) && e.message.includes(where), e.message);
        assert.ok(!e.message.includes(key.trim()), e.message);
        return true;
      },
    );
    if (key.includes("\x00")) {
      continue; // no environment variable holds a NUL
    }
    process.env.SANDBOX_API_KEY = key;
    try {
      assert.throws(
        () => new Client("tcp://127.0.0.1:9"),
        (e: unknown) => e instanceof RangeError && e.message.startsWith("$SANDBOX_API_KEY: ") && !e.message.includes(key.trim()),
      );
    } finally {
      delete process.env.SANDBOX_API_KEY;
    }
  }
  assert.throws(() => new Client("tcp://127.0.0.1:9", { apiKey: 42 as unknown as string }), TypeError);
  const largest = "k".repeat(API_KEY_MAX);
  const c = new Client("tcp://127.0.0.1:9", { apiKey: largest });
  try {
    for (const text of [inspect(c, { depth: 10, showHidden: true }), JSON.stringify(c) ?? "", String(c)]) {
      assert.ok(!text.includes("kkkk"), text.slice(0, 500));
    }
  } finally {
    c.close();
  }
});
