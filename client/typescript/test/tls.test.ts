/* tls.test.ts: tls+tcp:// framing. sandboxd has no TLS listener yet, so the
 * test builds a TLS-terminating relay from node:tls and node:net that
 * forwards to a real sandboxd's tcp port, with certificates made here by
 * openssl. It shows the SP exchange working through node:tls (handshake,
 * SNI and certificate checks, many calls in flight); it does not show
 * interoperation with nng's own TLS transport, which has no server here to
 * test against. uid base 54400. */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import * as net from "node:net";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { after, before, test } from "node:test";
import * as tls from "node:tls";

import { Client, SandboxError, Unavailable } from "../src/index.js";
import { Sandboxd, tempDir } from "./helpers/sandboxd.js";

let s: Sandboxd;
let relay: tls.Server;
let relayPort = 0;
let upstreamConnections = 0;
let certs: { dir: string; ca: Buffer };

function makeCerts(): { dir: string; ca: Buffer } {
  const dir = tempDir("sbx-ts-tls-");
  const ossl = (...args: string[]) => execFileSync("openssl", args, { cwd: dir, stdio: "pipe" });
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  ossl("req", "-x509", ...ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=sandboxd test CA");
  ossl("req", ...ec, "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=sandbox.tls.test");
  writeFileSync(path.join(dir, "ext.cnf"), "subjectAltName=DNS:sandbox.tls.test,IP:127.0.0.1\n");
  ossl("x509", "-req", "-in", "srv.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", "srv.crt", "-days", "2", "-extfile", "ext.cnf");
  return { dir, ca: readFileSync(path.join(dir, "ca.crt")) };
}

before(async () => {
  s = await Sandboxd.start({ uidBase: 54400, args: ["--workers", "2"] });
  certs = makeCerts();
  const sandboxdPort = Number(new URL(s.tcp.replace("tcp:", "http:")).port);
  relay = tls.createServer(
    { key: readFileSync(path.join(certs.dir, "srv.key")), cert: readFileSync(path.join(certs.dir, "srv.crt")) },
    (down) => {
      // Only after a completed TLS handshake: count what reached sandboxd.
      upstreamConnections++;
      const up = net.connect(sandboxdPort, "127.0.0.1");
      down.pipe(up);
      up.pipe(down);
      down.on("error", () => up.destroy());
      up.on("error", () => down.destroy());
      down.on("close", () => up.destroy());
      up.on("close", () => down.destroy());
    },
  );
  relay.on("tlsClientError", () => {});
  await new Promise<void>((r) => relay.listen(0, "127.0.0.1", r));
  relayPort = (relay.address() as net.AddressInfo).port;
});

after(async () => {
  await new Promise<void>((r) => relay.close(() => r()));
  rmSync(certs.dir, { recursive: true, force: true });
  await s.cleanup();
});

test("tls+tcp:// by name (SNI and the certificate's DNS name), many calls in flight", { timeout: 90000 }, async () => {
  const c = new Client(`tls+tcp://sandbox.tls.test:${relayPort}`, { tls: { ca: certs.ca }, resolver: async () => ["127.0.0.1"] });
  try {
    assert.equal(await c.health(), "SERVING");
    const rs = await Promise.all(Array.from({ length: 6 }, (_, i) => c.runCode({ code: `print(${i} * 7)` })));
    assert.deepEqual(rs.map((r) => r.stdoutText), [0, 1, 2, 3, 4, 5].map((i) => `${i * 7}\n`));
    assert.equal(rs[0]!.endpoint, `tls+tcp://127.0.0.1:${relayPort}`);
    // Over 4 KiB: the GetInfo size check runs through TLS too.
    const big = await c.runCode({ code: "print(len(open('mounts/f').read()))", files: [{ path: "f", content: "z".repeat(20000) }] });
    assert.equal(big.stdoutText, "20000\n");
    assert.equal(c.endpoints()[0]!.connections, 1);
  } finally {
    c.close();
  }
});

test("tls+tcp:// by IP address: the certificate's IP SAN is checked", { timeout: 90000 }, async () => {
  const c = new Client(`tls+tcp://127.0.0.1:${relayPort}`, { tls: { ca: certs.ca } });
  try {
    assert.equal((await c.runCode({ code: "print('ip')" })).stdoutText, "ip\n");
  } finally {
    c.close();
  }
});

test("an untrusted certificate or a wrong name: UNAVAILABLE, nothing reaches the server", { timeout: 90000 }, async () => {
  const before = upstreamConnections;
  const cases: Array<[string, tls.ConnectionOptions, RegExp]> = [
    [`tls+tcp://sandbox.tls.test:${relayPort}`, {}, /self[- ]signed|unable to (get|verify)/i],
    [`tls+tcp://wrong.name.test:${relayPort}`, { ca: certs.ca }, /altnames|does not match|Hostname/i],
  ];
  for (const [url, opts, why] of cases) {
    const c = new Client(url, { tls: opts, resolver: async () => ["127.0.0.1"], waitForEndpointMs: 300 });
    try {
      const e = await c.runCode({ code: "print(1)" }).then(
        () => assert.fail("should fail"),
        (err: unknown) => err as SandboxError,
      );
      assert.ok(e instanceof Unavailable, e.message);
      assert.equal(e.mayHaveRun, false);
      assert.match(e.message, why);
    } finally {
      c.close();
    }
  }
  assert.equal(upstreamConnections, before, "no connection got past TLS");
});
