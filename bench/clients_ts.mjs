#!/usr/bin/env node
// clients_ts.mjs: the TypeScript column of the client benchmark. Hello-world
// latency through @sandboxd/client from a running node process, as a ratio
// to the C library (libsandbox-client, driven from a running process through
// ctypes: the call is timed inside it, around sbxc_run_code) in the same run,
// calls interleaved in random order so that a shared machine's noise hits
// both alike. Goal: ratio <= 1.05.
//
//   node bench/clients_ts.mjs [--bin-dir build/bin] [--lib-dir build/lib]
//        [--url tcp://HOST:PORT] [--samples 80] [--warmup 10] [--json]
//
// --json prints the figures as one JSON object instead of text.
// Without --url it starts its own sandboxd (root; uid base 54500, state in a
// temp dir). Needs ./scripts/build first (client/typescript/dist).
import { spawn } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const { Client } = await import(path.join(repo, "client/typescript/dist/src/index.js"));

function args() {
  const a = { binDir: path.join(repo, "build/bin"), libDir: path.join(repo, "build/lib"), url: "", samples: 80, warmup: 10, json: false };
  const v = process.argv.slice(2);
  for (let i = 0; i < v.length; i += 2) {
    if (v[i] === "--json") {
      a.json = true;
      i -= 1;
      continue;
    }
    const key = v[i].replace(/^--/, "").replace(/-(\w)/g, (_, c) => c.toUpperCase());
    if (!(key in a) || v[i + 1] === undefined) {
      console.error(`usage: clients_ts.mjs [--bin-dir D] [--lib-dir D] [--url U] [--samples N] [--warmup N] [--json]`);
      process.exit(2);
    }
    a[key] = typeof a[key] === "number" ? Number(v[i + 1]) : v[i + 1];
  }
  return a;
}

// The C side: one process, one sbxc_client, one call per "run" line, the
// call's own duration back in ms.
const C_DRIVER = String.raw`
import ctypes, sys, time
lib = ctypes.CDLL(sys.argv[1])
lib.sbxc_request_new.restype = ctypes.c_void_p
lib.sbxc_client_open.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
lib.sbxc_request_set_code.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
lib.sbxc_run_code.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
lib.sbxc_result_free.argtypes = [ctypes.c_void_p]
client = ctypes.c_void_p()
err = ctypes.create_string_buffer(256)
if lib.sbxc_client_open(ctypes.byref(client), sys.argv[2].encode(), err, 256) != 0:
    sys.exit("sbxc_client_open: " + err.value.decode())
req = lib.sbxc_request_new()
code = b'print("hello")\n'
lib.sbxc_request_set_code(req, code, len(code))
result = ctypes.create_string_buffer(1024)  # larger than struct sbxc_result
print("ready", flush=True)
for line in sys.stdin:
    t0 = time.perf_counter_ns()
    c0 = time.process_time_ns()
    lib.sbxc_run_code(client, req, result)
    cpu = (time.process_time_ns() - c0) / 1e6
    ms = (time.perf_counter_ns() - t0) / 1e6
    status = ctypes.c_int.from_buffer(result).value
    lib.sbxc_result_free(result)
    print(f"{ms:.3f} {status} {cpu:.3f}", flush=True)
`;

const cCpu = [];
const tsCpu = [];

function startCDriver(lib, url) {
  const p = spawn("/usr/bin/python3", ["-c", C_DRIVER, lib, url], { stdio: ["pipe", "pipe", "inherit"] });
  const lines = createInterface({ input: p.stdout })[Symbol.asyncIterator]();
  const next = async () => (await lines.next()).value;
  return {
    ready: next,
    async call() {
      p.stdin.write("run\n");
      const [ms, status, cpu] = (await next()).split(" ");
      if (status !== "0") throw new Error(`C client: status ${status}`);
      cCpu.push(Number(cpu));
      return Number(ms);
    },
    close: () => p.stdin.end(),
  };
}

async function startServer(binDir) {
  const tmp = mkdtempSync(path.join(tmpdir(), "sbx-ts-bench-"));
  const port = await new Promise((r) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const p = s.address().port;
      s.close(() => r(p));
    });
  });
  const log = path.join(tmp, "sandboxd.log");
  const fd = openSync(log, "a");
  const proc = spawn(path.join(binDir, "sandboxd"), ["--listen", `tcp://127.0.0.1:${port}`, "--state-dir", path.join(tmp, "state"), "--uid-base", "54500"], { stdio: ["ignore", fd, fd] });
  for (let i = 0; i < 300 && !readFileSync(log, "utf8").includes("event=ready"); i++) {
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url: `tcp://127.0.0.1:${port}`,
    async stop() {
      proc.kill("SIGTERM");
      await new Promise((r) => proc.once("exit", r));
      rmSync(tmp, { recursive: true, force: true });
    },
  };
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

async function main() {
  const a = args();
  const server = a.url ? null : await startServer(a.binDir);
  const url = a.url || server.url;
  const c = startCDriver(path.join(a.libDir, "libsandbox-client.so"), url);
  if ((await c.ready()) !== "ready") throw new Error("C driver did not start");
  const ts = new Client(url);
  const tsCall = async () => {
    const t0 = performance.now();
    const c0 = process.cpuUsage();
    const r = await ts.runCode({ code: 'print("hello")\n' });
    const cpu = process.cpuUsage(c0);
    const ms = performance.now() - t0;
    tsCpu.push((cpu.user + cpu.system) / 1000);
    if (r.stdoutText !== "hello\n") throw new Error(`TS client: ${JSON.stringify(r.stdoutText)} (killed by ${r.killedBy}, exit ${r.exitCode}, stderr ${JSON.stringify(r.stderrText?.slice(-300))})`);
    return ms;
  };
  try {
    for (let i = 0; i < a.warmup; i++) {
      await c.call();
      await tsCall();
    }
    const cMs = [];
    const tMs = [];
    for (let i = 0; i < a.samples; i++) {
      if (Math.random() < 0.5) {
        cMs.push(await c.call());
        tMs.push(await tsCall());
      } else {
        tMs.push(await tsCall());
        cMs.push(await c.call());
      }
    }
    const pairs = tMs.map((t, i) => t / cMs[i]);
    const mean = (xs) => xs.reduce((x, y) => x + y, 0) / xs.length;
    const measured = (xs) => xs.slice(a.warmup);
    if (a.json) {
      console.log(JSON.stringify({ samples: a.samples, node: process.version, c_ms: median(cMs), ts_ms: median(tMs), ratio: median(tMs) / median(cMs), paired: median(pairs), c_cpu_ms: mean(measured(cCpu)), ts_cpu_ms: mean(measured(tsCpu)) }));
      return;
    }
    console.log(`clients_ts: ${a.samples} interleaved hello-world calls each, one server (${url}), node ${process.version}`);
    console.log(`latency median: C library ${median(cMs).toFixed(2)} ms, TypeScript client ${median(tMs).toFixed(2)} ms`);
    console.log(`ratio TypeScript/C: ${(median(tMs) / median(cMs)).toFixed(3)} (medians), ${median(pairs).toFixed(3)} (median of pairs) (goal <= 1.05)`);
    console.log(`client CPU per call (the client process, all threads): C library ${mean(measured(cCpu)).toFixed(3)} ms, TypeScript ${mean(measured(tsCpu)).toFixed(3)} ms`);
  } finally {
    ts.close();
    c.close();
    await server?.stop();
  }
}

await main();
