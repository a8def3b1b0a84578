/* unit.test.ts: the parts that need no server: the SP framing, URL parsing,
 * artifact paths, the generated code's freshness, and the two hostile peers
 * (a wrong protocol id, garbage) that a real sandboxd cannot play. */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, symlinkSync } from "node:fs";
import * as net from "node:net";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { test } from "node:test";

import { create } from "@bufbuild/protobuf";

import { parseEndpointUrl } from "../src/address.js";
import { runCodeRequest, serverInfoOf } from "../src/convert.js";
import { fnv1a, sessionScore } from "../src/fleet.js";
import { ArtifactSchema, GetInfoResponseSchema, RunCodeResponseSchema, RunState, WatchRunResponseSchema } from "../src/gen/sandbox_pb.js";
import { Artifact, Client, InvalidArgument, RunResult, Unavailable, Unknown } from "../src/index.js";
import { type RunCalls, RunStream } from "../src/stream.js";
import { checkPeerHeader, encodeRequest, FrameDecoder, SP_PROTOCOL_REP, SP_PROTOCOL_REQ, spHeader, splitReply, WireError } from "../src/wire.js";
import { repoRoot, tempDir } from "./helpers/sandboxd.js";

const pkgRoot = path.join(repoRoot, "client/typescript");

test("SP header: \\0SP\\0, protocol id big-endian, two zero bytes", () => {
  assert.deepEqual([...spHeader(SP_PROTOCOL_REQ)], [0, 0x53, 0x50, 0, 0, 0x30, 0, 0]);
  checkPeerHeader(Buffer.from([0, 0x53, 0x50, 0, 0, 0x31, 0, 0]), SP_PROTOCOL_REP);
  assert.throws(() => checkPeerHeader(Buffer.from([0, 0x53, 0x50, 0, 0, 0x30, 0, 0]), SP_PROTOCOL_REP), /protocol 0x30/);
  assert.throws(() => checkPeerHeader(Buffer.from("HTTP/1.1"), SP_PROTOCOL_REP), /did not send an SP header/);
  assert.throws(() => checkPeerHeader(Buffer.from([0, 0x53, 0x50, 0, 0, 0x31, 0, 1]), SP_PROTOCOL_REP), /reserved/);
});

test("a request frame: u64 length, request id with the high bit, payload (tcp); 0x01 first (ipc)", () => {
  const tcp = encodeRequest("tcp", 0x80000005, Buffer.from("abc"));
  assert.equal(tcp.toString("hex"), "0000000000000007" + "80000005" + "616263");
  const ipc = encodeRequest("ipc", 0xffffffff, Buffer.alloc(0));
  assert.equal(ipc.toString("hex"), "01" + "0000000000000004" + "ffffffff");
  assert.throws(() => encodeRequest("tcp", 5, Buffer.alloc(0)), /high bit/);
});

test("frame decoder: split anywhere, several per chunk, empty bodies", () => {
  const frames = Buffer.concat([frame("tcp", "hello"), frame("tcp", ""), frame("tcp", "x".repeat(1000))]);
  for (const step of [1, 3, 8, 9, 100, frames.length]) {
    const d = new FrameDecoder("tcp", 1 << 20);
    const got: string[] = [];
    for (let i = 0; i < frames.length; i += step) {
      got.push(...d.push(frames.subarray(i, i + step)).map((b) => b.toString()));
    }
    assert.deepEqual(got, ["hello", "", "x".repeat(1000)], `step ${step}`);
    assert.ok(d.idle);
  }
  const ipc = new FrameDecoder("ipc", 100);
  assert.deepEqual(ipc.push(frame("ipc", "yo")).map(String), ["yo"]);
});

test("frame decoder: a length over the cap, or a 2^63 length, is refused before any allocation", () => {
  const d = new FrameDecoder("tcp", 1024);
  const head = Buffer.alloc(8);
  head.writeBigUInt64BE(1025n);
  assert.throws(() => d.push(head), WireError);
  const huge = Buffer.alloc(8);
  huge.writeBigUInt64BE(2n ** 63n);
  assert.throws(() => new FrameDecoder("tcp", 1 << 30).push(huge), /over the cap/);
  const badType = Buffer.concat([Buffer.from([0x00]), Buffer.alloc(8)]);
  assert.throws(() => new FrameDecoder("ipc", 100).push(badType), /IPC message type 0/);
});

test("reply ids: 4 bytes with the high bit, or the peer is broken", () => {
  const { requestId, payload } = splitReply(Buffer.from("80000001ff", "hex"));
  assert.equal(requestId, 0x80000001);
  assert.equal(payload.toString("hex"), "ff");
  assert.throws(() => splitReply(Buffer.from("800000", "hex")), /no request id/);
  assert.throws(() => splitReply(Buffer.from("00000001", "hex")), /high bit/);
});

test("endpoint URLs: tcp, tls+tcp, ipc, IPv6; others refused", () => {
  assert.deepEqual(parseEndpointUrl("tcp://127.0.0.1:7878"), { url: "tcp://127.0.0.1:7878", transport: "tcp", host: "127.0.0.1", port: 7878, path: "" });
  assert.equal(parseEndpointUrl("tcp://[::1]:80").host, "::1");
  assert.equal(parseEndpointUrl("tls+tcp://sandbox.svc:443").transport, "tls");
  assert.equal(parseEndpointUrl("ipc:///run/s.sock").path, "/run/s.sock");
  for (const bad of ["http://x:1", "tcp://x", "tcp://x:0", "tcp://x:70000", "ipc://", "tcp://a:b:1", "127.0.0.1:1"]) {
    assert.throws(() => parseEndpointUrl(bad), TypeError, bad);
  }
});

test("killed_by: named values, and a future value passed through, not a crash", () => {
  const r = new RunResult(
    // a reply a newer server might send: killed_by 7
    { killedBy: 7, artifacts: [], feedback: [], stdout: new Uint8Array([0xff, 0x41]), stderr: new Uint8Array(), wallTimeMs: 5n, cpuTimeMs: 1n, peakMemoryBytes: 2n } as never,
    "tcp://x:1",
    1,
  );
  assert.equal(r.killedBy, "killed_by_7");
  assert.equal(r.killedByCode, 7);
  assert.equal(r.stdoutText, "\ufffdA");
  assert.equal(new RunResult(create(RunCodeResponseSchema, { killedBy: 5 }), "tcp://x:1", 1).killedBy, "cancelled");
});

/* ---- RunStream's loop over scripted calls: what a real server never
 * does (an overlapping reply) or cannot be timed to do (an abort while
 * StartRun is on its way). Against servers: stream.test.ts. ---- */

function scripted(replies: Array<{ out?: string; at?: number; complete?: boolean }>) {
  const log: string[] = [];
  let release: (id: string) => void = () => {};
  const calls: RunCalls = {
    start: (signal) => {
      log.push(`start aborted=${signal.aborted}`);
      return new Promise((resolve) => {
        release = resolve;
      });
    },
    watch: async (out) => {
      const r = replies.shift() ?? { complete: true };
      log.push(`watch ${out}`);
      const stdout = new TextEncoder().encode(r.out ?? "");
      return create(WatchRunResponseSchema, { state: r.complete === true ? RunState.DONE : RunState.RUNNING, stdout, stdoutOffset: BigInt(r.at ?? out), complete: r.complete === true });
    },
    cancel: async () => {
      log.push("cancel");
    },
    outcome: () => new RunResult(create(RunCodeResponseSchema, { runId: "r1", killedBy: 5 }), "tcp://x:1", 1),
  };
  return { calls, log, started: (id: string) => release(id) };
}

test("RunStream: an overlapping reply is cut where this stream's output ends; nothing is repeated", async () => {
  const s = scripted([{ out: "abc" }, { out: "bcde", at: 1 }, { out: "", at: 5, complete: true }]);
  const stream = new RunStream(s.calls);
  s.started("r1");
  const got: string[] = [];
  for await (const c of stream) {
    got.push(Buffer.from(c.data).toString());
  }
  assert.deepEqual(got, ["abc", "de"]);
  assert.deepEqual(s.log, ["start aborted=false", "watch 0", "watch 3", "watch 5"]);
  assert.equal((await stream.result).killedBy, "cancelled");
});

test("RunStream: an abort while StartRun is on its way waits for its answer, then cancels once", async () => {
  const s = scripted([{ out: "x" }]);
  const ac = new AbortController();
  const stream = new RunStream(s.calls, ac.signal);
  ac.abort();
  void stream.cancel();
  await new Promise((r) => setTimeout(r, 20));
  assert.deepEqual(s.log, ["start aborted=false"], "no CancelRun before the run id is known");
  s.started("r1");
  assert.equal(await stream.runId, "r1");
  await stream.cancel();
  await stream.result;
  assert.equal(s.log.filter((l) => l === "cancel").length, 1, s.log.join(", "));
  // An aborted signal before stream(): StartRun's signal is aborted (it sends nothing).
  const before = scripted([]);
  const gone = new AbortController();
  gone.abort();
  void new RunStream(before.calls, gone.signal);
  assert.deepEqual(before.log, ["start aborted=true"]);
});

test("artifacts: saveTo refuses paths that leave the directory, and symlinks on the way", async () => {
  const dir = tempDir("sbx-ts-art-");
  const outside = tempDir("sbx-ts-outside-");
  const art = (relativePath: string, content = "x") =>
    new Artifact(create(ArtifactSchema, { name: path.basename(relativePath), relativePath, content: Buffer.from(content) }));
  for (const bad of ["../evil", "a/../../evil", "/etc/evil", "a//b", "./a", "a/.", "", "a\\..\\b", "a\0b"]) {
    await assert.rejects(art(bad).saveTo(dir), /artifact path/, bad);
  }
  symlinkSync(outside, path.join(dir, "link"));
  await assert.rejects(art("link/evil").saveTo(dir), /not a plain directory/);
  symlinkSync(path.join(outside, "target"), path.join(dir, "file-link"));
  await assert.rejects(art("file-link").saveTo(dir), /ELOOP|symbolic/);
  assert.deepEqual(readdirSync(outside), [], "nothing was written outside");
  const saved = await art("sub/deeper/ok.txt", "content").saveTo(dir);
  assert.equal(saved, path.join(dir, "sub/deeper/ok.txt"));
  assert.equal(readFileSync(saved, "utf8"), "content");
  const omitted = new Artifact(create(ArtifactSchema, { relativePath: "big.bin", contentOmitted: true, size: 10n }));
  await assert.rejects(omitted.saveTo(dir), /omitted/);
  assert.ok(!existsSync(path.join(dir, "big.bin")));
});

test("generated code: src/gen is what protoc-gen-es makes from proto/sandbox.proto now", () => {
  const out = tempDir("sbx-ts-gen-");
  execFileSync(path.join(pkgRoot, "node_modules/.bin/buf"), ["generate", "-o", out], {
    cwd: pkgRoot,
    env: { ...process.env, PATH: `${path.join(pkgRoot, "node_modules/.bin")}:${process.env.PATH ?? ""}` },
  });
  const fresh = readFileSync(path.join(out, "src/gen/sandbox_pb.ts"), "utf8");
  const built = readFileSync(path.join(pkgRoot, "src/gen/sandbox_pb.ts"), "utf8");
  assert.ok(fresh === built, "src/gen/sandbox_pb.ts is stale: run `npm run build` in client/typescript");
  // And dist/ was compiled from it: same message names in the same order.
  const names = (s: string) => [...s.matchAll(/export const (\w+Schema)\b/g)].map((m) => m[1]).join(",");
  const compiled = readFileSync(path.join(pkgRoot, "dist/src/gen/sandbox_pb.js"), "utf8");
  assert.equal(names(compiled), names(fresh), "dist/ is stale: run `npm run build`");
  assert.ok(compiled.includes(fresh.match(/fileDesc\("([^"]+)"/)![1]!), "dist/ embeds another descriptor than proto/ gives");
});

/* ---- hostile peers: a tiny fake SP peer, for what a real sandboxd never does ---- */

interface FakePeer {
  url: string;
  close: () => Promise<void>;
  received: Buffer[];
}

/** A TCP listener that answers the SP handshake with `header` and then
 * behaves as `onRequest` says. */
async function fakePeer(header: Buffer, onRequest?: (sock: net.Socket, req: Buffer) => void): Promise<FakePeer> {
  const received: Buffer[] = [];
  const socks = new Set<net.Socket>();
  const server = net.createServer((sock) => {
    socks.add(sock);
    sock.on("error", () => {});
    let buf = Buffer.alloc(0);
    let shook = false;
    sock.write(header);
    sock.on("data", (c: Buffer) => {
      buf = Buffer.concat([buf, c]);
      if (!shook && buf.length >= 8) {
        shook = true;
        buf = buf.subarray(8);
      }
      while (shook && buf.length >= 8) {
        const len = Number(buf.readBigUInt64BE(0));
        if (buf.length < 8 + len) {
          break;
        }
        const body = buf.subarray(8, 8 + len);
        buf = buf.subarray(8 + len);
        received.push(body);
        onRequest?.(sock, body);
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as net.AddressInfo).port;
  return {
    url: `tcp://127.0.0.1:${port}`,
    received,
    close: () =>
      new Promise((r) => {
        for (const s of socks) s.destroy();
        server.close(() => r());
      }),
  };
}

const quick = { connectTimeoutMs: 300, queueWaitMs: 500, replyMarginMs: 500, retries: 0 };

test("a peer with the wrong SP protocol id: the connection is closed, nothing is sent, UNAVAILABLE", async () => {
  for (const proto of [0x30, 0x10, 0x3100]) {
    const h = spHeader(0);
    h.writeUInt16BE(proto, 4);
    const peer = await fakePeer(h);
    const c = new Client(peer.url, quick);
    try {
      const err = await c.health().catch((e: unknown) => e);
      assert.ok(err instanceof Unavailable, String(err));
      assert.equal(err.mayHaveRun, false);
      assert.equal(err.fromServer, false);
      assert.match(err.message, new RegExp(`protocol 0x${proto.toString(16)}, want 0x31`));
      assert.equal(peer.received.length, 0, "no request left");
    } finally {
      c.close();
      await peer.close();
    }
  }
});

test("a peer that sends garbage instead of an SP header: UNAVAILABLE, nothing sent", async () => {
  const peer = await fakePeer(Buffer.from("HTTP/1.1 400 Bad Request\r\n\r\n"));
  const c = new Client(peer.url, quick);
  try {
    const err = await c.runCode({ code: "print(1)" }).catch((e: unknown) => e);
    assert.ok(err instanceof Unavailable, String(err));
    assert.match(err.message, /did not send an SP header/);
    assert.equal(peer.received.length, 0);
  } finally {
    c.close();
    await peer.close();
  }
});

test("garbage after the handshake (a huge length, an id without the high bit): UNKNOWN, never resent", async () => {
  const replies: Array<(sock: net.Socket, req: Buffer) => void> = [
    (sock) => {
      const h = Buffer.alloc(8);
      h.writeBigUInt64BE(2n ** 62n); // "a message of 4 EiB follows"
      sock.write(h);
    },
    (sock) => sock.write(Buffer.from("0000000000000006" + "00000001" + "0800", "hex")),
    (sock) => sock.write(Buffer.from("0000000000000002" + "8000", "hex")),
  ];
  for (const reply of replies) {
    const peer = await fakePeer(spHeader(SP_PROTOCOL_REP), reply);
    const c = new Client(peer.url, { ...quick, retries: 3 });
    try {
      const err = await c.runCode({ code: "print(1)" }).catch((e: unknown) => e);
      assert.ok(err instanceof Unknown, String(err));
      assert.equal(err.mayHaveRun, true);
      assert.match(err.message, /may or may not have run/);
      await new Promise((r) => setTimeout(r, 200));
      assert.equal(peer.received.length, 1, "sent once, never again");
    } finally {
      c.close();
      await peer.close();
    }
  }
});

test("a reply to an unknown request id is dropped; the right one is delivered", async () => {
  const peer = await fakePeer(spHeader(SP_PROTOCOL_REP), (sock, req) => {
    const id = req.subarray(0, 4);
    const wrong = Buffer.from(id);
    wrong.writeUInt32BE(((id.readUInt32BE(0) + 7) | 0x80000000) >>> 0);
    // An empty ReplyEnvelope: status OK, empty payload = HealthResponse{UNKNOWN}
    for (const i of [wrong, id]) {
      const h = Buffer.alloc(8);
      h.writeBigUInt64BE(4n);
      sock.write(Buffer.concat([h, i]));
    }
  });
  const c = new Client(peer.url, quick);
  assert.equal(await c.health(), "UNKNOWN");
  c.close();
  await peer.close();
});

test("client-side refusals name the field and send nothing", async () => {
  const peer = await fakePeer(spHeader(SP_PROTOCOL_REP));
  const c = new Client(peer.url, { ...quick, maxRequestBytes: 2000 });
  await assert.rejects(c.runCode({ code: "x", limits: { timeoutMs: 1.5 } }), (e: unknown) => e instanceof InvalidArgument && /limits\.timeout_ms/.test(e.message));
  await assert.rejects(c.readFile("s", "p", { offset: -1 }), (e: unknown) => e instanceof InvalidArgument && /offset/.test(e.message));
  // 3000 bytes < 4 KiB: no GetInfo needed, the client's own cap refuses it.
  await assert.rejects(c.runCode({ code: "#".repeat(3000) }), (e: unknown) => e instanceof InvalidArgument && /client's cap of 2000/.test(e.message) && !e.mayHaveRun);
  assert.equal(peer.received.length, 0);
  c.close();
  await peer.close();
});

test("sessionMode: only the names it has; Object.prototype's are refused like any other", () => {
  assert.equal(runCodeRequest({ code: "x", sessionMode: "interpreter" }).sessionMode, 2);
  for (const m of ["toString", "__proto__", "constructor", "hasOwnProperty", "bogus"]) {
    assert.throws(() => runCodeRequest({ code: "x", sessionMode: m as "files" }), RangeError, m);
  }
});

test("allowNet: an array of strings into the request; a bare string or a non-string entry is a TypeError", () => {
  assert.deepEqual(runCodeRequest({ code: "x", allowNet: ["pypi.org", "*.example.com:443"] }).allowNet, ["pypi.org", "*.example.com:443"]);
  assert.deepEqual(runCodeRequest({ code: "x" }).allowNet, []);
  // Spread, a string would be one host per character.
  assert.throws(() => runCodeRequest({ code: "x", allowNet: "pypi.org" as unknown as string[] }), {
    name: "TypeError",
    message: 'allowNet: an array of strings such as ["pypi.org"], not a single string ("pypi.org")',
  });
  assert.throws(() => runCodeRequest({ code: "x", allowNet: ["a", 443] as unknown as string[] }), { name: "TypeError", message: "allowNet[1]: a string, not number" });
});

test("egress: the reply's summary, undefined when it has none", () => {
  assert.equal(new RunResult(create(RunCodeResponseSchema, { runId: "r" }), "tcp://x:1", 1).egress, undefined);
  const r = new RunResult(
    create(RunCodeResponseSchema, { runId: "r", egress: { connections: 3, refused: 1, bytesUp: 517n, bytesDown: 5000000000n } }),
    "tcp://x:1",
    1,
  );
  assert.deepEqual(r.egress, { connections: 3, refused: 1, bytesUp: 517, bytesDown: 5000000000 });
});

test("language, version, compileLimits into the request; compileLimits unset is not sent", () => {
  const m = runCodeRequest({ code: "x", language: "c++", version: "^12" });
  assert.deepEqual([m.runtime, m.language, m.version, m.compileLimits], ["", "c++", "^12", undefined]);
  assert.equal(runCodeRequest({ code: "x", language: "c", compileLimits: { timeoutMs: 9000 } }).compileLimits?.timeoutMs, 9000n);
});

test("compile: the reply's compile stage, undefined when it has none", () => {
  assert.equal(new RunResult(create(RunCodeResponseSchema, { runId: "r" }), "tcp://x:1", 1).compile, undefined);
  const r = new RunResult(
    create(RunCodeResponseSchema, {
      runId: "r",
      exitCode: 1,
      compile: { stderr: new TextEncoder().encode("main.c:1: error"), stderrTruncated: true, killedBy: 1, exitCode: 1, wallTimeMs: 40n, cpuTimeMs: 30n, peakMemoryBytes: 1048576n, failed: true },
    }),
    "tcp://x:1",
    1,
  );
  assert.deepEqual({ ...r.compile, stderr: new TextDecoder().decode(r.compile?.stderr) }, {
    stdout: new Uint8Array(),
    stderr: "main.c:1: error",
    stdoutTruncated: false,
    stderrTruncated: true,
    killedBy: "timeout",
    exitCode: 1,
    signal: 0,
    wallTimeMs: 40,
    cpuTimeMs: 30,
    peakMemoryBytes: 1048576,
    failed: true,
  });
});

test("info: runtimeInfo, every runtime with its fields", () => {
  const info = serverInfoOf(
    create(GetInfoResponseSchema, { runtimeInfo: [{ name: "node", language: "javascript", version: "20.1.0", aliases: ["js"], available: false, unavailableReason: "self-test failed", file: "main.js" }] }),
    "tcp://x:1",
  );
  assert.deepEqual(info.runtimeInfo, [{ name: "node", language: "javascript", version: "20.1.0", aliases: ["js"], available: false, unavailableReason: "self-test failed", compiled: false, file: "main.js" }]);
});

test("info: each ready zygote's memory as numbers, in the server's order; none without zygotes", () => {
  assert.deepEqual(serverInfoOf(create(GetInfoResponseSchema, {}), "tcp://x:1").zygoteMemory, []);
  const info = serverInfoOf(
    create(GetInfoResponseSchema, {
      zygotes: 2,
      zygoteMemory: [
        { slot: 0, environment: "", rssBytes: 60874752n, pssBytes: 42294272n, forks: 3n, ageMs: 1066n },
        { slot: 1, environment: "0123456789ab", rssBytes: 5000000000n, pssBytes: 1n, forks: 0n, ageMs: 2n },
      ],
    }),
    "tcp://x:1",
  );
  assert.deepEqual(info.zygoteMemory, [
    { slot: 0, environment: "", rssBytes: 60874752, pssBytes: 42294272, forks: 3, ageMs: 1066 },
    { slot: 1, environment: "0123456789ab", rssBytes: 5000000000, pssBytes: 1, forks: 0, ageMs: 2 },
  ]);
});

function frame(framing: "tcp" | "ipc", body: string): Buffer {
  const b = Buffer.from(body);
  const h = Buffer.alloc(8);
  h.writeBigUInt64BE(BigInt(b.length));
  return Buffer.concat(framing === "ipc" ? [Buffer.from([1]), h, b] : [h, b]);
}

test("sessions: the cross-client rendezvous rule (FNV-1a 32), with the vectors the C and Python tests hold", () => {
  assert.deepEqual([fnv1a(""), fnv1a("a"), fnv1a("foobar")], [0x811c9dc5, 0xe40c292c, 0xbf9cf968]);
  const keys = ["tcp://127.0.0.2:7878", "tcp://127.0.0.3:7878", "tcp://127.0.0.4:7878", "tcp://[::1]:7878", "ipc:///run/sandboxd.sock"];
  assert.equal(sessionScore("s1", keys[0]!), 0x305f6990);
  assert.equal(sessionScore("fleet-s", keys[3]!), 0x4fc52943);
  const home = (sid: string, ks: string[]): string =>
    [...ks].sort((a, b) => sessionScore(sid, b) - sessionScore(sid, a) || (a < b ? -1 : 1))[0]!;
  assert.equal(home("s1", keys.slice(0, 3)), "tcp://127.0.0.4:7878");
  assert.equal(home("s1", keys), "ipc:///run/sandboxd.sock");
  assert.equal(home("fleet-s", keys), "tcp://127.0.0.2:7878");
  assert.equal(home("notebook-42", keys), "tcp://127.0.0.3:7878");
});
