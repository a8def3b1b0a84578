/* package.test.ts (group "package", ctest client_ts_package): the release
 * tarball as a TypeScript programmer installs it. The tarball the build made,
 * $SANDBOXD_DIST_DIR/sandboxd-client-$SANDBOXD_VERSION.tgz (./scripts/package:
 * target client_ts_tarball, scripts/pack.sh; ctest sets both variables from
 * CMake), is checked against the build's dist/src and the server's --version,
 * then installed with `npm install /abs/path.tgz` into a fresh project in a
 * temp dir outside the repository, exactly as README.md says: an ESM script
 * importing "@sandboxd/client" runs hello world against a real sandboxd
 * (uid base 54700), and `npx tsc --strict --noEmit` checks a .mts file
 * against the package's types. Network: npm's registry for the tarball's
 * dependencies and for typescript and @types/node at this client's own
 * pins, --prefer-offline (npm's cache holds them after the build's npm ci).
 * Must never write into the repository or the build's tarball. */
import assert from "node:assert/strict";
import { type SpawnSyncReturns, spawnSync } from "node:child_process";
import { existsSync, lstatSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { after, before, test } from "node:test";

import { binDir, repoRoot, Sandboxd, tempDir } from "./helpers/sandboxd.js";

const version = process.env.SANDBOXD_VERSION ?? "";
const distDir = process.env.SANDBOXD_DIST_DIR ?? "";
const tarball = path.join(distDir, `sandboxd-client-${version}.tgz`);
const clientDir = path.join(repoRoot, "client/typescript");
const clientPkg = JSON.parse(readFileSync(path.join(clientDir, "package.json"), "utf8")) as {
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
};

/* npm as a user runs it: no npm_* variables of an npm that started us, no
 * NODE_PATH pointing back into the repository. */
const userEnv: NodeJS.ProcessEnv = Object.fromEntries(
  Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k) && k !== "NODE_PATH"),
);
const NPM_FLAGS = ["--prefer-offline", "--no-audit", "--no-fund"];

function run(cmd: string, args: string[], cwd: string, timeoutMs = 180000): SpawnSyncReturns<string> {
  const r = spawnSync(cmd, args, { cwd, env: userEnv, encoding: "utf8", timeout: timeoutMs });
  if (r.error !== undefined) {
    throw new Error(`${cmd} ${args.join(" ")}: ${r.error.message}`);
  }
  return r;
}

function mustRun(cmd: string, args: string[], cwd: string): string {
  const r = run(cmd, args, cwd);
  assert.equal(r.status, 0, `${cmd} ${args.join(" ")} in ${cwd} exited ${r.status}:\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

/** Every file under dir, as paths relative to it, sorted. */
function filesUnder(dir: string, rel = ""): string[] {
  const out: string[] = [];
  for (const e of readdirSync(path.join(dir, rel), { withFileTypes: true })) {
    const p = path.join(rel, e.name);
    if (e.isDirectory()) {
      out.push(...filesUnder(dir, p));
    } else {
      out.push(p);
    }
  }
  return out.sort();
}

let server: Sandboxd;
let project: string;

before(async () => {
  assert.match(version, /^\d+\.\d+\.\d+$/, "SANDBOXD_VERSION (CMake's PROJECT_VERSION) is not set: run this test through ctest");
  assert.ok(distDir !== "", "SANDBOXD_DIST_DIR is not set: run this test through ctest");
  assert.ok(existsSync(tarball), `${tarball} is missing: ./scripts/build makes it (./scripts/package alone, after a build)`);
  server = await Sandboxd.start({ uidBase: 54700, args: ["--workers", "1"] });
  project = tempDir("sbx-ts-project-");
  assert.ok(path.relative(repoRoot, project).startsWith(".."), `${project} is inside the repository`);
});

after(async () => {
  await server?.cleanup();
});

test("the tarball holds the build's dist/src at the project's version, with its dependencies", () => {
  const unpacked = tempDir("sbx-ts-unpacked-");
  mustRun("tar", ["-xzf", tarball, "-C", unpacked], unpacked);
  const pkg = JSON.parse(readFileSync(path.join(unpacked, "package/package.json"), "utf8")) as Record<string, unknown>;
  assert.equal(pkg.name, "@sandboxd/client");
  assert.equal(pkg.version, version, "the tarball's version is not CMake's PROJECT_VERSION");
  assert.equal(mustRun(path.join(binDir, "sandboxd"), ["--version"], unpacked).trim(), `sandboxd ${version}`);
  assert.deepEqual(pkg.dependencies, clientPkg.dependencies, "the tarball does not declare the client's dependencies");
  assert.ok(Object.keys(clientPkg.dependencies).includes("@bufbuild/protobuf"));
  assert.equal(pkg.devDependencies, undefined);
  assert.equal(pkg.scripts, undefined);
  const built = path.join(clientDir, "dist/src");
  const packed = path.join(unpacked, "package/dist/src");
  const stale = "the tarball is not the build's dist/src: run ./scripts/package after client/typescript/scripts/build.sh";
  assert.deepEqual(filesUnder(packed), filesUnder(built), stale);
  for (const f of filesUnder(built)) {
    assert.ok(readFileSync(path.join(packed, f)).equals(readFileSync(path.join(built, f))), `${f}: ${stale}`);
  }
  assert.deepEqual(filesUnder(path.join(unpacked, "package")).filter((f) => !f.startsWith("dist/src/")),
    ["README.md", "package.json"]);
});

test("npm install of the tarball in a fresh project: an ESM script runs hello world, tsc --strict checks its types", () => {
  mustRun("npm", ["init", "-y"], project);
  mustRun("npm", ["install", ...NPM_FLAGS, tarball], project);
  const installed = path.join(project, "node_modules/@sandboxd/client");
  assert.ok(lstatSync(installed).isDirectory(), `${installed} is not a directory of its own (a link into the build?)`);
  const manifest = JSON.parse(readFileSync(path.join(project, "package.json"), "utf8")) as { dependencies: Record<string, string> };
  const spec = manifest.dependencies["@sandboxd/client"] ?? "";
  assert.ok(spec.startsWith("file:") && path.resolve(project, spec.slice(5)) === tarball,
    `package.json's dependency is ${spec}, not the tarball`);

  // README.md's hello world, the server's address as its argument, run
  // from the project (node resolves the package from its node_modules).
  writeFileSync(path.join(project, "hello.mjs"), `import { Client } from "@sandboxd/client";

const client = new Client(process.argv[2] ?? "tcp://127.0.0.1:7878");
const r = await client.runCode({ code: 'print("hello")', limits: { timeoutMs: 5000 } });
console.log(r.stdoutText, r.killedBy, r.exitCode);
client.close();
`);
  assert.equal(mustRun("node", ["hello.mjs", server.tcp], project), "hello\n none 0\n");

  // TypeScript's own packages, at the pins this client builds with; this
  // second npm install must keep the tarball's package installed.
  const dev = clientPkg.devDependencies;
  mustRun("npm", ["install", "--save-dev", ...NPM_FLAGS,
    `typescript@${dev.typescript}`, `@types/node@${dev["@types/node"]}`], project);
  assert.ok(lstatSync(installed).isDirectory(), "the second npm install removed @sandboxd/client");

  // The package's types, strictly: what the README shows typechecks, and
  // misuse is an error (it would not be if the types resolved to any).
  writeFileSync(path.join(project, "check.mts"), `import { Client, type KilledBy, RunResult, SandboxError } from "@sandboxd/client";

const client = new Client(["tcp://127.0.0.1:7878"], { retries: 1, connectTimeoutMs: 1000 });
try {
  const r: RunResult = await client.runCode({ code: 'print("hello")', limits: { timeoutMs: 5000 } });
  const out: string = r.stdoutText;
  const killed: KilledBy = r.killedBy;
  const code: number = r.exitCode;
  console.log(out, killed, code);
  // @ts-expect-error: RunResult has no such field
  console.log(r.noSuchField);
} catch (e: unknown) {
  if (e instanceof SandboxError) {
    const mayHaveRun: boolean = e.mayHaveRun;
    console.log(e.codeName, mayHaveRun);
  }
}
// @ts-expect-error: code is a string
await client.runCode({ code: 42 });
client.close();
`);
  mustRun("npx", ["tsc", "--strict", "--noEmit", "--module", "nodenext", "check.mts"], project);
  // The checker is really on: a type error in the user's code fails it.
  writeFileSync(path.join(project, "wrong.mts"), `import { Client } from "@sandboxd/client";

const n: number = new Client("tcp://127.0.0.1:7878").endpoints();
console.log(n);
`);
  const wrong = run("npx", ["tsc", "--strict", "--noEmit", "--module", "nodenext", "wrong.mts"], project);
  assert.notEqual(wrong.status, 0, "tsc accepted a type error");
  assert.match(wrong.stdout, /wrong\.mts.*error TS2322/);
});
