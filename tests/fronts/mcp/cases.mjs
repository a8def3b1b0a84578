/* cases.mjs: the tool cases every transport of the MCP front must pass,
 * through the official SDK's Client (@modelcontextprotocol/sdk): the
 * handshake, the tool list, every tool, a plot as an image, a timeout as a
 * tool error, bad arguments as tool errors, a session's files listed and
 * previewed and closed, an interpreter session (state kept between calls,
 * the last expression's value, a figure shown, a timeout's
 * KeyboardInterrupt, the state lost). ctx() gives {client, server} once
 * the transport's before() hook has connected. */
import assert from "node:assert/strict";
import { test } from "node:test";

import { PLOT, texts } from "./lib.mjs";

export function toolCases(ctx, label) {
  test(`${label}: initialize negotiated the current revision`, () => {
    const { client } = ctx();
    const info = client.getServerVersion();
    assert.equal(info.name, "sandboxd");
    assert.ok(client.getServerCapabilities().tools, "the tools capability is announced");
    assert.match(client.getInstructions() ?? "", /run_code/);
  });

  test(`${label}: tools/list has the four tools with schemas and descriptions`, async () => {
    const { client } = ctx();
    const { tools } = await client.listTools();
    const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
    assert.deepEqual(Object.keys(byName).sort(), ["close_session", "list_session_files", "preview_file", "run_code"]);
    for (const t of tools) {
      assert.equal(t.inputSchema.type, "object", t.name);
      assert.ok(t.description.length > 60, `${t.name} has a description a model can act on`);
    }
    const rc = byName.run_code.inputSchema;
    assert.deepEqual(rc.required, ["code"]);
    for (const p of ["code", "language", "version", "requirements", "files", "session_id", "stdin", "limits"]) assert.ok(rc.properties[p], p);
    assert.ok(rc.properties.files.items.properties.url && rc.properties.files.items.properties.content);
    assert.deepEqual(rc.properties.session_mode.enum, ["files", "interpreter"]);
    assert.match(byName.run_code.description, /session_mode 'interpreter'/);
    assert.match(byName.run_code.description, /KeyboardInterrupt/);
    assert.match(byName.run_code.description, /plt\.show\(\)/);
    // How to start a session and what says its interpreter was lost: said once, here.
    assert.match(byName.run_code.description, /Give session_mode and no session_id to start a session/);
    assert.match(byName.run_code.description, /state_lost/);
    assert.equal(byName.run_code.outputSchema.type, "object");
    for (const p of ["result", "result_truncated", "state_lost", "interpreter_ended", "session_mode"]) {
      assert.ok(byName.run_code.outputSchema.properties[p], `outputSchema has ${p}`);
    }
    assert.equal(byName.preview_file.annotations.readOnlyHint, true);
    assert.equal(byName.close_session.annotations.destructiveHint, true);
  });

  test(`${label}: run_code hello, with stdin and a file by content`, async () => {
    const { client, server } = ctx();
    const before = server.runs();
    const r = await client.callTool({
      name: "run_code",
      arguments: {
        code: "import sys\nprint('hello', sys.stdin.read(), open('mounts/d/in.txt').read())\nprint('warn', file=sys.stderr)",
        stdin: "from-stdin",
        files: [{ path: "d/in.txt", content: "from-file" }],
        limits: { timeout_ms: 10000, memory_mb: 256 },
      },
    });
    assert.equal(r.isError, false, texts(r));
    assert.equal(r.structuredContent.stdout, "hello from-stdin from-file\n");
    assert.equal(r.structuredContent.stderr, "warn\n");
    assert.equal(r.structuredContent.status, "ok");
    assert.equal(r.structuredContent.exit_code, 0);
    assert.match(texts(r), /status: ok \(exit code 0\)/);
    assert.match(texts(r), /stdout:\nhello from-stdin from-file\n/);
    assert.match(texts(r), /stderr:\nwarn\n/);
    assert.equal(server.runs(), before + 1, "one run in the server's log");
  });

  test(`${label}: a matplotlib plot saved to output/ comes back as an image`, async () => {
    const { client } = ctx();
    const r = await client.callTool({ name: "run_code", arguments: { code: PLOT } });
    assert.equal(r.isError, false, texts(r));
    const images = r.content.filter((c) => c.type === "image");
    assert.equal(images.length, 1, JSON.stringify(r.content.map((c) => c.type)));
    assert.equal(images[0].mimeType, "image/png");
    const png = Buffer.from(images[0].data, "base64");
    assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    assert.ok(png.length > 1000, `a real plot: ${png.length} bytes`);
    assert.deepEqual(r.structuredContent.artifacts.map((a) => [a.path, a.attached]), [["output/plot.png", "image"]]);
  });

  test(`${label}: other artifacts come back as embedded resources`, async () => {
    const { client } = ctx();
    const r = await client.callTool({
      name: "run_code",
      arguments: { code: "open('output/r.csv','w').write('a,b\\n1,2\\n')\nopen('output/b.bin','wb').write(bytes([0,1,2,255]))" },
    });
    assert.equal(r.isError, false, texts(r));
    const res = r.content.filter((c) => c.type === "resource").map((c) => c.resource);
    const csv = res.find((x) => x.uri.endsWith("/output/r.csv"));
    const bin = res.find((x) => x.uri.endsWith("/output/b.bin"));
    assert.equal(csv.text, "a,b\n1,2\n");
    assert.match(csv.uri, /^sandbox:\/\/runs\//);
    assert.deepEqual([...Buffer.from(bin.blob, "base64")], [0, 1, 2, 255]);
  });

  test(`${label}: a timeout is a tool error that says so`, async () => {
    const { client } = ctx();
    const r = await client.callTool({ name: "run_code", arguments: { code: "import time\ntime.sleep(30)", limits: { timeout_ms: 500 } } });
    assert.equal(r.isError, true);
    assert.equal(r.structuredContent.killed_by, "timeout");
    assert.match(texts(r), /status: killed \(timeout/);
    assert.match(texts(r), /timed out after 500 ms/);
  });

  test(`${label}: a failing program and a segfault are tool errors with the reason`, async () => {
    const { client } = ctx();
    let r = await client.callTool({ name: "run_code", arguments: { code: "import numpy_not_there" } });
    assert.equal(r.isError, true);
    assert.match(texts(r), /status: error \(exit code 1\)/);
    assert.match(texts(r), /ModuleNotFoundError/);
    r = await client.callTool({ name: "run_code", arguments: { code: "import ctypes\nctypes.string_at(0)" } });
    assert.equal(r.isError, true);
    assert.match(texts(r), /SIGSEGV/);
  });

  test(`${label}: run_code with language (and a version range) runs that runtime; an unknown one is the server's error`, async () => {
    const { client, server } = ctx();
    let r = await client.callTool({ name: "run_code", arguments: { code: 'echo "hi from bash $BASH_VERSION"', language: "bash" } });
    assert.equal(r.isError, false, texts(r));
    assert.match(r.structuredContent.stdout, /^hi from bash 5\./);
    r = await client.callTool({ name: "run_code", arguments: { code: "echo $0", language: "sh", version: ">=5" } });
    assert.equal(r.isError, false, texts(r));
    // A failed compile ran nothing: the compiler's errors are in the result.
    r = await client.callTool({ name: "run_code", arguments: { code: "int main(void) { return nope; }\n", language: "c" } });
    assert.equal(r.isError, true);
    assert.match(texts(r), /compiler: \d+ bytes \(in the compiler block below\)/);
    assert.match(texts(r), /compiler:\n(.|\n)*error: .nope. undeclared/);
    assert.match(r.structuredContent.compiler, /nope/);
    r = await client.callTool({ name: "run_code", arguments: { code: '#include <stdio.h>\nint main(void) { puts("hi c"); }\n', language: "c" } });
    assert.equal(r.isError, false, texts(r));
    assert.equal(r.structuredContent.stdout, "hi c\n");
    assert.doesNotMatch(texts(r), /compiler/);
    const before = server.runs();
    r = await client.callTool({ name: "run_code", arguments: { code: "1", language: "cobol" } });
    assert.equal(r.isError, true);
    assert.match(texts(r), /INVALID_ARGUMENT: language: cobol-\* runtime is unknown; available: python, bash/);
    r = await client.callTool({ name: "run_code", arguments: { code: "1", version: "3.x" } });
    assert.equal(r.isError, true);
    assert.match(texts(r), /arguments\.version: only with language/);
    assert.equal(server.runs(), before, "nothing ran");
  });

  test(`${label}: bad arguments are tool errors naming the argument, and nothing runs`, async () => {
    const { client, server } = ctx();
    const before = server.runs();
    const cases = [
      [{}, /arguments\.code is required/],
      [{ code: 5 }, /arguments\.code: expected a string, got integer/],
      [{ code: "1", files: [{ path: "../x", content: "" }] }, /arguments\.files\[0\]\.path: "\.\.\/x" has a "\.\." component/],
      [{ code: "1", files: [{ path: "x", content: "a", url: "http://x/" }] }, /give exactly one of content/],
      [{ code: "1", session_id: "../s" }, /not a session id/],
      [{ code: "1", limits: { timeout_ms: "5" } }, /limits\.timeout_ms: expected an integer/],
      [{ code: "1", colour: "red" }, /unknown property "colour"/],
      [{ code: "1", session_id: "s", session_mode: "notebook" },
        /arguments\.session_mode: "notebook" is not one of the allowed values: "files", "interpreter"/],
      [{ code: "1", session_mode: 2 }, /arguments\.session_mode: expected a string, got integer/],
    ];
    for (const [args, want] of cases) {
      const r = await client.callTool({ name: "run_code", arguments: args });
      assert.equal(r.isError, true, JSON.stringify(args));
      assert.match(texts(r), want);
    }
    // The server's own validation (a limit over its maximum) comes back too.
    const r = await client.callTool({ name: "run_code", arguments: { code: "1", limits: { timeout_ms: 99999999 } } });
    assert.equal(r.isError, true);
    assert.match(texts(r), /INVALID_ARGUMENT.*limits\.timeout_ms/);
    assert.equal(server.runs(), before, "nothing ran");
  });

  test(`${label}: session_mode without session_id starts a session under an id made for it`, async () => {
    const { client } = ctx();
    const ids = new Set();
    for (const mode of ["interpreter", "files"]) {
      const r = await client.callTool({ name: "run_code", arguments: { code: "x = 6 * 7\nx", session_mode: mode } });
      assert.equal(r.isError, false, texts(r));
      const sid = r.structuredContent.session_id;
      // A UUID version 4 from getrandom: nothing a model (or another caller) guesses.
      assert.match(sid, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      assert.equal(r.structuredContent.session_created, true);
      assert.equal(r.structuredContent.session_mode, mode);
      assert.match(texts(r), new RegExp(`session_id: ${sid} \\(new: created by this run\\)`));
      ids.add(sid);
      const again = await client.callTool({ name: "run_code", arguments: { code: "print('again')", session_id: sid } });
      assert.equal(again.structuredContent.session_created, false, texts(again));
      await client.callTool({ name: "close_session", arguments: { session_id: sid } });
    }
    assert.equal(ids.size, 2);
    const byName = Object.fromEntries((await client.listTools()).tools.map((t) => [t.name, t]));
    assert.doesNotMatch(JSON.stringify(byName), /a name you choose/);
    assert.match(byName.run_code.inputSchema.properties.session_id.description, /do not make one up/);
  });

  test(`${label}: every run returns the value of its last expression as result`, async () => {
    const { client } = ctx();
    let r = await client.callTool({ name: "run_code", arguments: { code: "print('side')\n2 + 3" } });
    assert.equal(r.isError, false, texts(r));
    assert.equal(r.structuredContent.result, "5");
    assert.equal(r.structuredContent.result_truncated, false);
    assert.equal(r.structuredContent.stdout, "side\n");
    assert.match(texts(r), /result: the value of the last expression, 1 bytes/);
    assert.equal(r.content.filter((c) => c.type === "text" && c.text === "result:\n5").length, 1, JSON.stringify(r.content));
    assert.equal(r.structuredContent.session_mode, undefined, "no session, no mode");
    r = await client.callTool({ name: "run_code", arguments: { code: "x = 5\nprint(x)" } });
    assert.equal(r.structuredContent.result, "", "a statement has no value");
    assert.doesNotMatch(texts(r), /result:/);
  });

  test(`${label}: an interpreter session keeps variables between calls, each call a cell`, async () => {
    const { client } = ctx();
    const sid = `i-${label}-${process.pid}`;
    try {
      let r = await client.callTool({ name: "run_code", arguments: { session_id: sid, session_mode: "interpreter", code: "x = 41" } });
      assert.equal(r.isError, false, texts(r));
      assert.equal(r.structuredContent.session_mode, "interpreter");
      assert.equal(r.structuredContent.session_created, true);
      assert.equal(r.structuredContent.result, "");
      assert.match(texts(r), /session_mode: interpreter/);
      // Later calls may leave session_mode out: the session has its mode.
      r = await client.callTool({ name: "run_code", arguments: { session_id: sid, code: "x + 1" } });
      assert.equal(r.isError, false, texts(r));
      assert.equal(r.structuredContent.result, "42");
      assert.equal(r.structuredContent.state_lost, false);
      assert.equal(r.structuredContent.interpreter_ended, false);
      assert.match(texts(r), /result:\n42/);
      assert.doesNotMatch(texts(r), /state lost|interpreter ended/);
      // A FILES call in an interpreter session is refused by the server.
      r = await client.callTool({ name: "run_code", arguments: { session_id: sid, session_mode: "files", code: "1" } });
      assert.equal(r.isError, true);
      assert.match(texts(r), /FAILED_PRECONDITION: session_mode: .*INTERPRETER session/);
    } finally {
      await client.callTool({ name: "close_session", arguments: { session_id: sid } });
    }
  });

  test(`${label}: a figure shown with plt.show() in an interpreter session is an image`, async () => {
    const { client } = ctx();
    const sid = `f-${label}-${process.pid}`;
    try {
      const code = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()";
      const r = await client.callTool({ name: "run_code", arguments: { session_id: sid, session_mode: "interpreter", code } });
      assert.equal(r.isError, false, texts(r));
      assert.equal(r.structuredContent.session_mode, "interpreter");
      const images = r.content.filter((c) => c.type === "image");
      assert.equal(images.length, 1, JSON.stringify(r.content.map((c) => c.type)));
      assert.equal(images[0].mimeType, "image/png");
      const png = Buffer.from(images[0].data, "base64");
      assert.deepEqual([...png.subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47]);
      assert.ok(png.length > 1000, `a real plot: ${png.length} bytes`);
      assert.deepEqual(r.structuredContent.artifacts.map((a) => [a.path, a.mime, a.attached]), [["output/figure-1.png", "image/png", "image"]]);
    } finally {
      await client.callTool({ name: "close_session", arguments: { session_id: sid } });
    }
  });

  test(`${label}: an interpreter cell at its timeout: KeyboardInterrupt keeps the state; ignored, the state is lost`, async () => {
    const { client } = ctx();
    const sid = `t-${label}-${process.pid}`;
    const call = (code, limits) => client.callTool({ name: "run_code", arguments: { session_id: sid, code, ...(limits ? { limits } : {}) } });
    try {
      let r = await client.callTool({ name: "run_code", arguments: { session_id: sid, session_mode: "interpreter", code: "x = 1" } });
      assert.equal(r.isError, false, texts(r));
      r = await call("import time\ntime.sleep(30)", { timeout_ms: 500 });
      assert.equal(r.isError, true);
      assert.equal(r.structuredContent.killed_by, "timeout");
      assert.equal(r.structuredContent.interpreter_ended, false);
      assert.match(texts(r), /KeyboardInterrupt/);
      assert.match(texts(r), /status: killed \(timeout: the cell was stopped with KeyboardInterrupt at its limit; the interpreter and its state are kept\)/);
      r = await call("x + 1");
      assert.equal(r.structuredContent.result, "2", texts(r));
      assert.equal(r.structuredContent.state_lost, false);

      r = await call("import time\nwhile True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        pass", { timeout_ms: 500 });
      assert.equal(r.isError, true);
      assert.equal(r.structuredContent.interpreter_ended, true, texts(r));
      assert.match(texts(r), /interpreter ended: this call ended the session's interpreter/);
      r = await call("x");
      assert.equal(r.structuredContent.state_lost, true, texts(r));
      assert.equal(r.structuredContent.interpreter_ended, false);
      assert.match(texts(r), /state lost: this call ran in a fresh interpreter/);
      assert.match(r.structuredContent.stderr, /NameError/);
    } finally {
      await client.callTool({ name: "close_session", arguments: { session_id: sid } });
    }
  });

  test(`${label}: an unknown tool is a JSON-RPC error (-32602)`, async () => {
    const { client } = ctx();
    await assert.rejects(client.callTool({ name: "no_such_tool", arguments: {} }), (e) => {
      assert.equal(e.code, -32602);
      assert.match(e.message, /Unknown tool: "no_such_tool"/);
      return true;
    });
  });

  test(`${label}: a session: files kept between runs, listed, previewed, closed`, async () => {
    const { client } = ctx();
    const sid = `s-${label}-${process.pid}`;
    let r = await client.callTool({ name: "run_code", arguments: { session_id: sid, code: "open('notes.txt','w').write('line one\\n' * 3)\n" + PLOT } });
    assert.equal(r.isError, false, texts(r));
    assert.equal(r.structuredContent.session_id, sid);
    assert.equal(r.structuredContent.session_created, true);
    r = await client.callTool({ name: "run_code", arguments: { session_id: sid, code: "print(open('notes.txt').read().count('one'))" } });
    assert.equal(r.structuredContent.stdout, "3\n");
    assert.equal(r.structuredContent.session_created, false);

    r = await client.callTool({ name: "list_session_files", arguments: { session_id: sid } });
    assert.equal(r.isError, false, texts(r));
    assert.match(texts(r), /- "notes\.txt" file, 27 bytes/);
    assert.match(texts(r), /- "output" directory/);
    r = await client.callTool({ name: "list_session_files", arguments: { session_id: sid, path: "output" } });
    assert.match(texts(r), /- "output\/plot\.png" file/);

    r = await client.callTool({ name: "preview_file", arguments: { session_id: sid, path: "notes.txt", max_bytes: 9 } });
    assert.equal(r.isError, false, texts(r));
    assert.equal(r.content[1].text, "line one\n");
    assert.match(r.content[0].text, /27 bytes in all; bytes 0 to 9/);
    r = await client.callTool({ name: "preview_file", arguments: { session_id: sid, path: "output/plot.png" } });
    assert.equal(r.content[1].type, "image");
    assert.equal(r.content[1].mimeType, "image/png");
    r = await client.callTool({ name: "preview_file", arguments: { session_id: sid, path: "missing.txt" } });
    assert.equal(r.isError, true);
    assert.match(texts(r), /NOT_FOUND/);

    r = await client.callTool({ name: "close_session", arguments: { session_id: sid } });
    assert.equal(r.isError, false, texts(r));
    r = await client.callTool({ name: "list_session_files", arguments: { session_id: sid } });
    assert.equal(r.isError, true);
    assert.match(texts(r), /NOT_FOUND/);
    r = await client.callTool({ name: "close_session", arguments: { session_id: sid } });
    assert.equal(r.isError, true);
  });

  test(`${label}: ping`, async () => {
    const { client } = ctx();
    assert.deepEqual(await client.ping(), {});
  });
}
