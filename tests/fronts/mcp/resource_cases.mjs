/* resource_cases.mjs: the resource cases every transport of the MCP front
 * must pass, through the official SDK's Client: the resources capability,
 * resources/templates/list, resources/list (the files of the sessions
 * run_code ran in, every page by nextCursor), resources/read of a text file,
 * a matplotlib PNG (a blob of image/png, the bytes run_code's result
 * carried) and other binary data, and the refusals: a file over the 4 MiB
 * cap (-32003 naming it), a missing file, an unknown, a closed and a run's
 * (session-less) workspace (-32002 with the URI in data), malformed URIs,
 * "..", absolute paths and a symlink (-32602). Another tenant's session is
 * tests/fronts/tenants (test_tenants_mcp). The limits: 256 files of a
 * session listed, directories 8 deep. ctx() gives {client, server}. */
import assert from "node:assert/strict";
import { test } from "node:test";

import { PLOT, texts } from "./lib.mjs";

const CAP = 4 << 20;

/* A session with: output/notes.txt (UTF-8 text), output/plot.png (PLOT),
 * output/data.bin (the 256 byte values), s.svg, big.txt (one byte over the cap),
 * sub/many/f000..f119 (a page's worth), sub/deep/er/a.txt, and link.txt (a
 * symlink to /etc/passwd). */
const SETUP = [
  PLOT,
  "import os",
  "open('output/notes.txt', 'w', encoding='utf-8').write('h\u00e9llo\\n')",
  "open('output/data.bin', 'wb').write(bytes(range(256)))",
  "open('s.svg', 'w').write('<svg xmlns=\"http://www.w3.org/2000/svg\"/>')",
  `open('big.txt', 'w').write('x' * ${CAP + 1})`,
  "os.makedirs('sub/many'); os.makedirs('sub/deep/er')",
  "[open(f'sub/many/f{i:03d}', 'w').write(str(i)) for i in range(120)]",
  "open('sub/deep/er/a.txt', 'w').write('deep')",
  "os.symlink('/etc/passwd', 'link.txt')",
  "",
].join("\n");

async function rpcError(promise) {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  assert.fail("the request succeeded; an error was expected");
}

async function listAll(client) {
  const resources = [];
  let pages = 0;
  let cursor;
  do {
    const page = await client.listResources(cursor !== undefined ? { cursor } : {});
    resources.push(...page.resources);
    cursor = page.nextCursor;
    pages++;
  } while (cursor !== undefined && pages < 100);
  return { resources, pages };
}

export function resourceCases(ctx, label) {
  let sid;
  let run;
  const uri = (path, id = sid) => `sandbox://sessions/${id}/${path}`;

  test(`${label}: resources: the capability and the sandbox:// template`, async () => {
    const { client } = ctx();
    assert.ok(client.getServerCapabilities().resources, "the resources capability is announced");
    const { resourceTemplates } = await client.listResourceTemplates();
    assert.equal(resourceTemplates.length, 1);
    assert.equal(resourceTemplates[0].uriTemplate, "sandbox://sessions/{session_id}/{+path}");
    assert.ok(resourceTemplates[0].name && resourceTemplates[0].description);
  });

  test(`${label}: resources/list has the files of the sessions run_code ran in, by pages`, async () => {
    const { client } = ctx();
    run = await client.callTool({ name: "run_code", arguments: { code: SETUP, session_mode: "files" } });
    assert.equal(run.isError, false, texts(run));
    sid = run.structuredContent.session_id;
    // A second session after the first: the first fills a page (120 files).
    const second = await client.callTool({ name: "run_code", arguments: { code: "open('b.txt', 'w').write('b')", session_mode: "files" } });
    assert.equal(second.isError, false, texts(second));
    const { resources, pages } = await listAll(client);
    assert.ok(pages >= 2, `more than one page (nextCursor): ${pages}`);
    const uris = resources.map((r) => r.uri);
    for (const p of ["main.py", "output/notes.txt", "output/plot.png", "output/data.bin", "big.txt", "sub/many/f000", "sub/many/f119", "sub/deep/er/a.txt"]) {
      assert.ok(uris.includes(uri(p)), `${p} is listed`);
    }
    assert.ok(uris.includes(uri("b.txt", second.structuredContent.session_id)), "the second session's file");
    assert.ok(!uris.includes(uri("link.txt")), "symlinks are not listed");
    assert.equal(new Set(uris).size, uris.length, "no URI twice across pages");
    const notes = resources.find((r) => r.uri === uri("output/notes.txt"));
    assert.equal(notes.name, "output/notes.txt");
    assert.equal(notes.size, 7);
    // The URI run_code's result gave for the same file.
    const embedded = run.content.find((c) => c.type === "resource" && c.resource.uri.endsWith("/output/notes.txt"));
    assert.equal(embedded.resource.uri, uri("output/notes.txt"));
    const bad = await rpcError(client.listResources({ cursor: "not-a-cursor" }));
    assert.equal(bad.code, -32602);
    assert.match(bad.message, /cursor/);
  });

  test(`${label}: resources/list: at most 256 files of a session, directories 8 deep`, async () => {
    const { client } = ctx();
    const run = async (code) => {
      const r = await client.callTool({ name: "run_code", arguments: { code, session_mode: "files" } });
      assert.equal(r.isError, false, texts(r));
      return r.structuredContent.session_id;
    };
    const many = await run("import os\nos.makedirs('many')\nfor i in range(300): open(f'many/f{i:03d}', 'w').write('')\n");
    const deep = await run([
      "import os",
      "os.makedirs('1/2/3/4/5/6/7/8')",
      "open('1/2/3/4/5/6/7/seven.txt', 'w').write('7')",
      "open('1/2/3/4/5/6/7/8/eight.txt', 'w').write('8')",
      "",
    ].join("\n"));
    const { resources } = await listAll(client);
    const of = (id) => resources.filter((x) => x.uri.startsWith(`sandbox://sessions/${id}/`)).map((x) => x.uri);
    assert.equal(of(many).length, 256, "a session's files are cut at 256");
    assert.ok(of(deep).includes(uri("1/2/3/4/5/6/7/seven.txt", deep)), "a file 7 directories deep is listed");
    assert.ok(!of(deep).includes(uri("1/2/3/4/5/6/7/8/eight.txt", deep)), "8 directories deep is not");
    const r = await client.readResource({ uri: uri("1/2/3/4/5/6/7/8/eight.txt", deep) });
    assert.equal(r.contents[0].text, "8", "but it is read by its URI");
    for (const id of [many, deep]) await client.callTool({ name: "close_session", arguments: { session_id: id } });
  });

  test(`${label}: resources/read: text as text, a PNG and binary as blobs, an SVG as text`, async () => {
    const { client } = ctx();
    let r = await client.readResource({ uri: uri("output/notes.txt") });
    assert.deepEqual(r.contents, [{ uri: uri("output/notes.txt"), mimeType: "text/plain", text: "h\u00e9llo\n" }]);
    r = await client.readResource({ uri: uri("sub/deep/er/a.txt") });
    assert.equal(r.contents[0].text, "deep");
    r = await client.readResource({ uri: uri("output/plot.png") });
    assert.equal(r.contents[0].mimeType, "image/png");
    assert.equal(r.contents[0].text, undefined);
    const image = run.content.find((c) => c.type === "image");
    assert.equal(r.contents[0].blob, image.data, "the bytes run_code's result carried");
    r = await client.readResource({ uri: uri("output/data.bin") });
    assert.equal(r.contents[0].mimeType, "application/octet-stream");
    assert.deepEqual([...Buffer.from(r.contents[0].blob, "base64")], [...Array(256).keys()]);
    r = await client.readResource({ uri: uri("s.svg") });
    assert.deepEqual(r.contents[0], { uri: uri("s.svg"), mimeType: "image/svg+xml", text: '<svg xmlns="http://www.w3.org/2000/svg"/>' });
  });

  test(`${label}: resources/read: a file over the cap is refused naming the cap`, async () => {
    const { client } = ctx();
    const e = await rpcError(client.readResource({ uri: uri("big.txt") }));
    assert.equal(e.code, -32003);
    assert.match(e.message, new RegExp(`${CAP + 1} bytes, over this server's cap of ${CAP} bytes \\(4 MiB\\)`));
    assert.match(e.message, /preview_file/);
    assert.deepEqual(e.data, { uri: uri("big.txt"), size: CAP + 1, max_bytes: CAP });
  });

  test(`${label}: resources/read: not found (file, session, closed session, a run's files) is -32002`, async () => {
    const { client } = ctx();
    const gone = await client.callTool({ name: "run_code", arguments: { code: "open('x.txt', 'w').write('x')", session_mode: "files" } });
    const goneId = gone.structuredContent.session_id;
    assert.equal((await client.readResource({ uri: uri("x.txt", goneId) })).contents[0].text, "x");
    const closed = await client.callTool({ name: "close_session", arguments: { session_id: goneId } });
    assert.equal(closed.isError, false, texts(closed));
    for (const u of [uri("output/missing.txt"), uri("a.txt", "00000000-0000-4000-8000-000000000000"), uri("x.txt", goneId), "sandbox://runs/abc/output/a.txt"]) {
      const e = await rpcError(client.readResource({ uri: u }));
      assert.equal(e.code, -32002, u);
      assert.match(e.message, /Resource not found/);
      assert.equal(e.data.uri, u);
    }
    const { resources } = await listAll(client);
    assert.ok(!resources.some((r) => r.uri.includes(goneId)), "a closed session is not listed");
  });

  test(`${label}: resources/read: malformed URIs, '..', absolute paths and symlinks are refused`, async () => {
    const { client } = ctx();
    const cases = [
      ["https://example.com/a", /not a URI of this server/],
      ["sandbox://sessions/" + sid, /not a URI of this server/],
      ["sandbox://other/" + sid + "/a", /not a URI of this server/],
      [uri("output/%ZZ"), /malformed/],
      [uri("output/a?b"), /malformed/],
      [uri("../etc/passwd"), /"\.\." component/],
      [uri("output/%2E%2E/%2E%2E/etc/passwd"), /"\.\." component/],
      [uri("/etc/passwd"), /absolute/],
      [uri("a%00b"), /NUL/],
      [uri("a", "bad id"), /malformed/],
      [uri("a", "..%2F.."), /not a session id/],
      [uri("link.txt"), /symlink|link/i],
      [uri("sub"), /regular file|directory|not a file/i],
    ];
    for (const [u, why] of cases) {
      const e = await rpcError(client.readResource({ uri: u }));
      assert.equal(e.code, -32602, `${u}: ${e.message}`);
      assert.match(e.message, why, u);
    }
  });
}
