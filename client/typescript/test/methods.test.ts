/* methods.test.ts: every method of the client against a real sandboxd, over
 * tcp and ipc, and the statuses a user meets in normal use (INVALID_ARGUMENT
 * naming the field, NOT_FOUND, FAILED_PRECONDITION), artifacts saved
 * safely, and the example provider. Needs root (sandboxd does). */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, existsSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";

import { Client, FailedPrecondition, InvalidArgument, NotFound } from "../src/index.js";
import { rejection, repoRoot, Sandboxd, tempDir, waitFor } from "./helpers/sandboxd.js";

let s: Sandboxd;
let client: Client;

before(async () => {
  s = await Sandboxd.start({ uidBase: 54000, args: ["--workers", "2", "--max-message-bytes", "65536", "--max-timeout-ms", "10000"] });
  client = new Client(s.tcp);
});

after(async () => {
  client.close();
  assert.equal(await s.stop(), 0, "sandboxd exits 0 on SIGTERM");
  await s.cleanup();
});

const runLines = (): number => s.runIds().length;

test("health and info, over tcp and ipc", { timeout: 90000 }, async () => {
  for (const url of [s.tcp, s.ipc]) {
    const c = new Client(url);
    try {
      assert.equal(await c.health(), "SERVING");
      const info = await c.info();
      assert.equal(info.workers, 2);
      assert.equal(info.maxMessageBytes, 65536);
      assert.equal(info.isolation.uidBase, 54000);
      assert.equal(info.maxLimits.timeoutMs, 10000);
      assert.ok(info.runtimes.includes("python"), String(info.runtimes));
      assert.equal(info.endpoint, url);
      const r = await c.runCode({ code: 'print("hello")' });
      assert.equal(r.stdoutText, "hello\n");
    } finally {
      c.close();
    }
  }
});

test("runCode: stdin, args, files, env, run id, exit code, bytes, timings", { timeout: 90000 }, async () => {
  const r = await client.runCode({
    code: `
      import os, sys
      print(sys.stdin.read(), sys.argv[1:], open("mounts/sub/d.txt").read(), open("mounts/b.bin", "rb").read().hex(), os.environ["GREETING"])
      sys.stdout.flush()
      sys.stdout.buffer.write(b"\\xff raw")
      sys.stderr.write("err")
      sys.exit(3)
    `,
    stdin: "in-data",
    args: ["a b", "c"],
    files: [
      { path: "sub/d.txt", content: "file-content" },
      { path: "b.bin", content: new Uint8Array([0, 1, 255]) },
    ],
    env: { GREETING: "hi" },
    runId: "ts-methods-1",
    limits: { timeoutMs: 5000, memoryBytes: 256 << 20 },
  });
  assert.equal(r.stdoutText, "in-data ['a b', 'c'] file-content 0001ff hi\n\ufffd raw");
  assert.deepEqual([...r.stdout.slice(-5)], [0xff, 0x20, 0x72, 0x61, 0x77], "stdout is bytes, untouched");
  assert.equal(r.stderrText, "err");
  assert.equal(r.exitCode, 3);
  assert.equal(r.killedBy, "none");
  assert.equal(r.runId, "ts-methods-1");
  assert.ok(r.wallTimeMs > 0 && r.peakMemoryBytes > 0, `${r.wallTimeMs} ${r.peakMemoryBytes}`);
  assert.equal(r.attempts, 1);
  assert.ok(s.runIds().includes("ts-methods-1"));
});

test("killedBy: timeout, memory, output_limit, signal", { timeout: 90000 }, async () => {
  const cases: Array<[string, string, object]> = [
    ["timeout", "while True: pass", { timeoutMs: 1000 }],
    ["memory", "x = bytearray(512 << 20)\nprint(len(x))", { memoryBytes: 64 << 20 }],
    ["output_limit", 'import sys\nwhile True: sys.stdout.write("x" * 65536)', { outputBytes: 16384 }],
    ["signal", "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", {}],
  ];
  const results = await Promise.all(cases.map(([, code, limits]) => client.runCode({ code, limits })));
  cases.forEach(([want], i) => assert.equal(results[i]!.killedBy, want, want));
  assert.equal(results[3]!.signal, 11);
  assert.ok(results[2]!.stdoutTruncated && results[2]!.stdout.length <= 16384);
});

test("INVALID_ARGUMENT names the field, from the server; nothing runs", { timeout: 90000 }, async () => {
  const before = runLines();
  const cases: Array<[Parameters<Client["runCode"]>[0], string]> = [
    [{ code: "print(1)", limits: { timeoutMs: -1 } }, "limits.timeout_ms"],
    [{ code: "print(1)", limits: { timeoutMs: 10001 } }, "limits.timeout_ms"],
    [{ code: "print(1)", limits: { memoryBytes: 1 << 20 } }, "limits.memory_bytes"],
    [{ code: "print(1)", runId: "../etc" }, "run_id"],
    [{ code: "print(1)", files: [{ path: "../x", content: "x" }] }, "files[0].path"],
    [{ code: "print(1)", files: [{ path: "ok", url: "ftp://example.invalid/x" }] }, "files[0]"],
    [{ code: "print(1)", env: { "1BAD": "x" } }, "env"],
    [{ code: "print(1)", sessionId: "../abc" }, "session_id"],
    [{ code: "" }, "code"],
  ];
  for (const [params, field] of cases) {
    const e = await rejection(client.runCode(params));
    assert.ok(e instanceof InvalidArgument, `${field}: ${e.message}`);
    assert.ok(e.message.includes(field), `${field} not named in: ${e.message}`);
    assert.equal(e.fromServer, true);
    assert.equal(e.mayHaveRun, false);
    assert.equal(e.attempts, 1, "never retried");
  }
  assert.equal(runLines(), before, "nothing ran");
});

test("language and version pick the runtime as Piston does; runtimeInfo lists them; refusals are the server's", { timeout: 90000 }, async () => {
  let r = await client.runCode({ code: 'echo "bash $BASH_VERSION"', language: "sh", version: ">=5 <6" });
  assert.match(r.stdoutText, /^bash 5\./);
  assert.equal(r.exitCode, 0);
  assert.equal(r.compile, undefined, "bash has no compile stage");
  r = await client.runCode({ code: "import sys; print(sys.version_info[0])", language: "py", version: "3.x" });
  assert.equal(r.stdoutText, "3\n");
  r = await client.runCode({ code: 'echo "$0"', runtime: "bash" });
  assert.equal(r.exitCode, 0);
  const before = runLines();
  for (const [params, said] of [
    [{ code: "x", language: "cobol" }, /cobol.* runtime is unknown; available: python, bash/],
    [{ code: "x", language: "bash", version: "^99" }, /bash/],
    [{ code: "x", language: "bash", runtime: "bash" }, /runtime and language/],
  ] as Array<[Parameters<Client["runCode"]>[0], RegExp]>) {
    const e = await rejection(client.runCode(params));
    assert.ok(e instanceof InvalidArgument, e.message);
    assert.match(e.message, said);
  }
  assert.equal(runLines(), before, "nothing ran");
  const info = await client.info();
  for (const name of ["python", "bash", "c", "cpp"]) {
    assert.ok(info.runtimeInfo.some((x) => x.name === name), name);
  }
  const bash = info.runtimeInfo.find((x) => x.name === "bash");
  assert.ok(bash);
  assert.equal(bash.language, "bash");
  assert.ok(bash.aliases.includes("sh"), String(bash.aliases));
  assert.match(bash.version, /^5\.\d+\.\d+$/);
  assert.deepEqual([bash.available, bash.unavailableReason, bash.compiled, bash.file], [true, "", false, "main.sh"]);
  assert.equal(info.runtimeInfo.find((x) => x.name === "python")?.file, "main.py");
  assert.equal(info.runtimeInfo.find((x) => x.name === "cpp")?.compiled, true);
});

test("compile: a compiled runtime's compile stage beside the run; a failed one runs nothing; compileLimits reach it", { timeout: 90000 }, async () => {
  let r = await client.runCode({ code: '#include <stdio.h>\nint main(void) { puts("hi c"); return 0; }\n', language: "c" });
  assert.equal(r.stdoutText, "hi c\n");
  assert.ok(r.compile);
  assert.deepEqual([r.compile.failed, r.compile.exitCode, r.compile.killedBy], [false, 0, "none"]);
  r = await client.runCode({ code: "int main(void) { return nope; }\n", language: "c++" });
  assert.ok(r.compile?.failed);
  assert.match(new TextDecoder().decode(r.compile.stderr), /nope/);
  assert.equal(r.stdout.length + r.stderr.length, 0);
  assert.equal(r.exitCode, r.compile.exitCode);
  // gcc needs tens of ms of CPU: 1 ms kills the compile, nothing runs.
  r = await client.runCode({ code: "int main(void) { return 0; }\n", language: "c", compileLimits: { cpuTimeMs: 1 } });
  assert.deepEqual([r.compile?.failed, r.compile?.killedBy], [true, "timeout"]);
  const e = await rejection(client.runCode({ code: "echo x", language: "bash", compileLimits: { timeoutMs: 1000 } }));
  assert.ok(e instanceof InvalidArgument, e.message);
  assert.match(e.message, /compile/);
});

test("a request over the server's --max-message-bytes is refused here, nothing sent", { timeout: 90000 }, async () => {
  // 10 KB: over 4 KiB, so the client asks GetInfo once, and sends it.
  const ok = await client.runCode({ code: "print(len(open('mounts/f').read()))", files: [{ path: "f", content: "y".repeat(10000) }] });
  assert.equal(ok.stdoutText, "10000\n");
  const before = (await client.info()).requestsTotal;
  const e = await rejection(client.runCode({ code: "print(1)", files: [{ path: "f", content: "y".repeat(100000) }] }));
  assert.ok(e instanceof InvalidArgument);
  assert.match(e.message, /more than the 65536 the server accepts.*nothing was sent/);
  assert.equal(e.fromServer, false);
  assert.equal(e.mayHaveRun, false);
  const afterTotal = (await client.info()).requestsTotal;
  assert.equal(afterTotal - before, 1, "only the second GetInfo reached the server");
  assert.equal(await client.health(), "SERVING", "and the connection still serves");
});

test("sessions: files persist, listFiles, readFile, closeSession, NOT_FOUND", { timeout: 90000 }, async () => {
  const first = await client.runCode({ sessionId: "ts-s1", code: "import os\nos.makedirs('output', exist_ok=True)\nopen('output/data.txt', 'w').write('0123456789')\nopen('keep.txt', 'w').write('kept')" });
  assert.equal(first.sessionId, "ts-s1");
  assert.equal(first.sessionCreated, true);
  assert.ok(first.feedback.some((f) => f.includes("is new")), String(first.feedback));
  const second = await client.runCode({ sessionId: "ts-s1", code: "print(open('keep.txt').read())" });
  assert.equal(second.stdoutText, "kept\n");
  assert.equal(second.sessionCreated, false);

  const top = await client.listFiles("ts-s1");
  const names = top.entries.map((e) => `${e.name}:${e.type}`);
  assert.ok(names.includes("keep.txt:file") && names.includes("output:directory"), String(names));
  const out = await client.listFiles("ts-s1", "output");
  assert.deepEqual(out.entries.map((e) => [e.relativePath, e.size]), [["output/data.txt", 10]]);
  assert.equal(out.truncated, false);

  const part = await client.readFile("ts-s1", "output/data.txt", { offset: 2, length: 3 });
  assert.equal(Buffer.from(part.content).toString(), "234");
  assert.equal(part.size, 10);
  assert.equal(part.eof, false);
  const rest = await client.readFile("ts-s1", "output/data.txt", { offset: 7 });
  assert.equal(Buffer.from(rest.content).toString(), "789");
  assert.equal(rest.eof, true);

  const missing = await rejection(client.readFile("ts-s1", "nope.txt"));
  assert.ok(missing instanceof NotFound, missing.message);
  await client.closeSession("ts-s1");
  // One call at a time: a promise made before its turn could reject with
  // nobody awaiting it yet (an unhandled rejection fails the test).
  for (const call of [() => client.closeSession("ts-s1"), () => client.listFiles("ts-s1"), () => client.readFile("ts-s1", "keep.txt")]) {
    const e = await rejection(call());
    assert.ok(e instanceof NotFound, e.message);
    assert.equal(e.fromServer, true);
  }
});

test("FAILED_PRECONDITION: a second run of a busy session, a symlink read; not retried", { timeout: 90000 }, async () => {
  const slow = client.runCode({ sessionId: "ts-busy", code: "import os, time\nos.symlink('/etc/passwd', 'link')\nprint('started', flush=True)\ntime.sleep(1.5)" });
  assert.ok(await waitFor(async () => (await client.info()).running >= 1), "the first run is running");
  const before = runLines();
  const e = await rejection(client.runCode({ sessionId: "ts-busy", code: "print('second')" }));
  assert.ok(e instanceof FailedPrecondition, e.message);
  assert.equal(e.fromServer, true);
  assert.equal(e.attempts, 1);
  const done = await slow;
  assert.equal(done.stdoutText, "started\n");
  assert.equal(runLines(), before + 1, "only the first run ran");
  const link = await rejection(client.readFile("ts-busy", "link"));
  assert.ok(link instanceof FailedPrecondition, link.message);
  await client.closeSession("ts-busy");
});

test("artifacts: contents, MIME types, saved below the directory and never outside", { timeout: 90000 }, async () => {
  const r = await client.runCode({
    code: `
      import os
      os.makedirs("output/sub", exist_ok=True)
      open("output/a.txt", "w").write("alpha")
      open("output/sub/b.bin", "wb").write(bytes(range(256)))
      os.symlink("/etc/passwd", "output/leak")
    `,
  });
  assert.deepEqual(r.artifacts.map((a) => [a.relativePath, a.size, a.contentOmitted]), [
    ["a.txt", 5, false],
    ["sub/b.bin", 256, false],
  ]);
  assert.equal(r.artifacts[0]!.mime, "text/plain");
  assert.equal(r.artifacts[0]!.text, "alpha");

  const dir = tempDir("sbx-ts-save-");
  const report = await r.saveArtifacts(dir);
  assert.deepEqual(report.skipped, []);
  assert.equal(readFileSync(path.join(dir, "a.txt"), "utf8"), "alpha");
  assert.deepEqual([...readFileSync(path.join(dir, "sub/b.bin"))], [...Array(256).keys()]);

  // A directory that already holds a symlink where "sub" would go: the
  // artifact below it is skipped, nothing lands in the symlink's target.
  const hostile = tempDir("sbx-ts-save-");
  const outside = tempDir("sbx-ts-outside-");
  symlinkSync(outside, path.join(hostile, "sub"));
  const r2 = await r.saveArtifacts(hostile);
  assert.deepEqual(r2.saved, [path.join(hostile, "a.txt")]);
  assert.equal(r2.skipped.length, 1);
  assert.match(r2.skipped[0]!.reason, /not a plain directory/);
  assert.deepEqual(readdirSync(outside), []);
  assert.ok(!existsSync(path.join(outside, "b.bin")));
});

test("the example SandboxProvider runs against the server", { timeout: 90000 }, async () => {
  const example = path.join(repoRoot, "client/typescript/dist/examples/sandbox_provider.js");
  const { stdout } = await promisify(execFile)(process.execPath, [example, s.tcp], { timeout: 60000 });
  const lines = stdout.trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
  assert.deepEqual(lines[0], { stdout: "hello from the sandbox\n", stderr: "", exitCode: 0, killedBy: "none", durationMs: lines[0]!.durationMs });
  assert.equal(lines[1]!.killedBy, "timeout");
  assert.equal(lines[2]!.stdout, "olleh\n");
});
