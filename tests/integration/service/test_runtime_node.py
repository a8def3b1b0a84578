"""The node runtime (deploy/runtimes/node.json; docs/RUNTIMES.md, "node")
end to end: a real sandboxd with the build's manifests, driven by
sandbox-run and, for RunCodeRequest.language/version and GetInfo's
runtime_info, by the generated sandbox_pb2 over a raw REQ connection
(tests/lib/harness.py WireCaller). Needs root and /usr/bin/node; without
root the test skips loudly (exit 77), or fails when CI=true.
"""
import os

from lib.harness import Server, WireCaller, load_pb2

OK, INVALID_ARGUMENT = 0, 3
TIB = 1 << 40  # the largest memory_bytes any server accepts (--max-memory-bytes)


def node(s, code, *flags, **kw):
    """sandbox-run --runtime node; (exit status, parsed json)."""
    return s.run(code, "--runtime", "node", *flags, **kw)


def test_node_runs(bin_dir, check):
    s = Server(bin_dir, "--workers", "2")
    try:
        rc, out = node(s, 'console.log("hello from", process.release.name)\n')
        check(rc == 0 and out.get("status") == "OK" and out.get("stdout") == "hello from node\n",
              "hello world", out)
        # stdin, args and a file of the request reach the program; the code
        # is /workspace/main.js, the working directory.
        data = os.path.join(s.tmp, "data.txt")
        with open(data, "w") as f:
            f.write("file-content")
        rc, out = node(s, 'const fs = require("fs");\n'
                       'console.log(JSON.stringify([fs.readFileSync(0, "utf8"), '
                       'process.argv.slice(2), fs.readFileSync("mounts/sub/d.txt", "utf8"), '
                       'process.cwd(), require("path").basename(process.argv[1])]));\n',
                       "--stdin", "-", "--arg", "a b", "--arg", "c", "--file",
                       f"{data}:sub/d.txt", stdin=b"in-data")
        check(out.get("stdout") == '["in-data",["a b","c"],"file-content","/workspace",'
              '"main.js"]\n', "stdin, args and a request's file reach node; main.js in "
              "/workspace", out)
        # The manifest's NODE_OPTIONS, and a request's own in its place.
        rc, out = node(s, "console.log(JSON.stringify(process.env.NODE_OPTIONS))\n")
        check(out.get("stdout") == '"--max-old-space-size=4194304"\n',
              "the manifest's NODE_OPTIONS reaches node", out)
        rc, out = node(s, 'console.log(JSON.stringify(process.env.NODE_OPTIONS),\n'
                       '  require("fs").readFileSync("/proc/self/environ", "latin1")\n'
                       '    .split("\\0").filter(v => v.startsWith("NODE_OPTIONS=")).length)\n',
                       "--env", "NODE_OPTIONS=--max-old-space-size=100")
        check(out.get("stdout") == '"--max-old-space-size=100" 1\n',
              "a request's NODE_OPTIONS overrides the manifest's: one variable, the request's",
              out)
        # An artifact written by node under output/.
        adir = os.path.join(s.tmp, "arts")
        rc, out = node(s, 'const fs = require("fs");\nfs.mkdirSync("output/sub");\n'
                       'fs.writeFileSync("output/sub/result.json", JSON.stringify({n: 42}));\n',
                       "--artifacts-dir", adir)
        arts = {a["relative_path"]: a for a in out.get("artifacts", [])}
        check(out.get("exit_code") == 0 and set(arts) == {"sub/result.json"}
              and arts["sub/result.json"].get("mime") == "application/json"
              and arts["sub/result.json"].get("size") == 8,
              "output/sub/result.json written by node comes back as an artifact", out)
        try:
            with open(os.path.join(adir, "sub", "result.json")) as f:
                saved = f.read()
        except OSError as e:
            saved = repr(e)
        check(saved == '{"n":42}', "the artifact's content", saved)
        # A FILES session mixing runtimes on one workspace: node writes,
        # python reads and adds, node reads what python wrote.
        steps = [
            ("node", 'require("fs").writeFileSync("data.csv", "a,b\\n1,2\\n3,4\\n");\n'
             'console.log("node wrote");\n'),
            ("python", 'rows = open("data.csv").read().splitlines()\n'
             'open("sum.txt", "w").write(str(sum(int(r.split(",")[1]) for r in rows[1:])))\n'
             'print(len(rows))\n'),
            ("node", 'const fs = require("fs");\n'
             'console.log(fs.readFileSync("sum.txt", "utf8"), '
             'fs.readdirSync(".").filter((n) => !n.startsWith("main.")).sort().join(","));\n'),
        ]
        outs = [s.run(code, "--runtime", rt, "--session", "mix")[1] for rt, code in steps]
        check([o.get("stdout") for o in outs] == ["node wrote\n", "3\n",
                                                  "6 data.csv,output,sum.txt\n"]
              and outs[0].get("session_created") is True
              and not any(o.get("session_created") for o in outs[1:]),
              "a session: node, then python, then node on one workspace", outs)

        # language/version (RunCodeRequest 13, 14) and GetInfo, by the
        # generated messages.
        pb = load_pb2(bin_dir)
        c = WireCaller(s.port, pb, timeout=60)
        try:
            st, msg, pl = c.call("GetInfo", pb.GetInfoRequest())
            info = pb.GetInfoResponse.FromString(pl) if st == OK else None
            ri = {r.name: r for r in info.runtime_info} if info else {}
            n = ri.get("node")
            version = os.popen("/usr/bin/node --version").read().strip().lstrip("v")
            check(n is not None and n.available and n.language == "javascript"
                  and list(n.aliases) == ["node-javascript", "node-js", "js"]
                  and n.file == "main.js" and not n.compiled and n.version == version
                  and "node" in info.runtimes,
                  f"GetInfo lists node {version}, available, language javascript, its aliases",
                  n or (st, msg))
            code = 'console.log(process.versions.node.split(".")[0] >= 18 ? "ok" : "old")\n'
            for lang, ver in (("js", ">=18"), ("javascript", "*"), ("node-js", "^" + version),
                              ("node", "")):
                st, msg, pl = c.call("RunCode", pb.RunCodeRequest(code=code, language=lang,
                                                                  version=ver))
                r = pb.RunCodeResponse.FromString(pl) if st == OK else None
                check(r is not None and r.stdout == b"ok\n" and r.exit_code == 0,
                      f"language {lang!r} version {ver!r} runs node", (st, msg, r))
            st, msg, pl = c.call("RunCode", pb.RunCodeRequest(code=code, language="js",
                                                              version=">=99 <100"))
            # Piston's words for it ("LANGUAGE-VERSION runtime is unknown"),
            # then what the server has.
            check(st == INVALID_ARGUMENT and msg.startswith("language: js->=99 <100 runtime is "
                                                            "unknown; available: ")
                  and "node" in msg and "nothing ran" in msg,
                  "language js with a version range no runtime satisfies: INVALID_ARGUMENT "
                  "naming the language and the range, nothing ran", (st, msg))
        finally:
            c.close()
    finally:
        check(s.stop() == 0, "server exits 0 on SIGTERM")


def test_node_limits(bin_dir, check):
    # --max-memory-bytes at its largest (2^40): whatever memory_bytes a
    # request may ask for, V8's heap limit is above it, so the cgroup's
    # memory cap ends a heap bomb (killed_by memory), never V8's own abort
    # (SIGABRT, killed_by signal).
    s = Server(bin_dir, "--workers", "2", "--max-memory-bytes", str(TIB))
    try:
        rc, out = node(s, 'console.log(require("v8").getHeapStatistics().heap_size_limit)\n')
        limit = int(out.get("stdout", "0").strip() or 0)
        check(limit > TIB, f"V8's heap limit ({limit >> 20} MiB) is above the largest "
              f"memory_bytes a server accepts ({TIB >> 20} MiB)", out)
        cases = [
            ("memory", "V8 heap bomb",
             'const a = [];\nfor (;;) a.push(new Array(1e6).fill(1.5));\n', []),
            ("memory", "Buffer bomb (outside V8's heap)",
             'const a = [];\nfor (;;) a.push(Buffer.alloc(16 << 20, 1));\n', []),
            ("memory", "V8 heap bomb under 256 MiB",
             'const a = [];\nfor (;;) a.push(new Array(1e6).fill(1.5));\n',
             ["--memory-mb", "256"]),
            ("timeout", "infinite loop", "for (;;) {}\n", ["--timeout-ms", "1000"]),
            ("signal", "SIGSEGV", 'process.kill(process.pid, "SIGSEGV");\n', []),
            ("output_limit", "huge output",
             'const s = "x".repeat(1 << 20);\nfor (;;) process.stdout.write(s);\n',
             ["--output-kb", "16"]),
        ]
        for want, what, code, flags in cases:
            rc, out = node(s, code, *flags)
            check(out.get("status") == "OK" and out.get("killed_by") == want,
                  f"{what}: killed_by {want}",
                  {k: out.get(k) for k in ("status", "killed_by", "signal", "exit_code",
                                           "peak_memory_bytes", "stderr", "error")})
            if want == "signal":
                check(out.get("signal") == 11 and rc == 139, "SIGSEGV: signal 11, exit 139",
                      (rc, out.get("signal")))
            if want == "memory":
                check(out.get("stderr") == "", f"{what}: no V8 abort on stderr",
                      out.get("stderr"))
        # The default limits suit node: V8's and libuv's threads, 4 worker
        # threads and their descriptors under max_processes 64 and 1024 files.
        rc, out = node(s, 'const fs = require("fs"), crypto = require("crypto");\n'
                       'const {Worker} = require("worker_threads");\n'
                       'const threads = () => fs.readdirSync("/proc/self/task").length;\n'
                       'crypto.pbkdf2("a", "b", 1000, 32, "sha256", () => {\n'
                       '  const ws = [];\n'
                       '  for (let i = 0; i < 4; i++) ws.push(new Worker('
                       '"require(\\"worker_threads\\").parentPort.postMessage(1)", {eval: true}));\n'
                       '  let n = 0;\n'
                       '  for (const w of ws) w.on("message", () => {\n'
                       '    if (++n === 4) { console.log(threads() > 8 ? "threads ok" : "few");'
                       ' for (const x of ws) x.terminate(); }\n'
                       '  });\n'
                       '});\n')
        check(out.get("stdout") == "threads ok\n" and out.get("killed_by") == "none"
              and out.get("exit_code") == 0,
              "worker threads and libuv's pool run under the default limits", out)
    finally:
        check(s.stop() == 0, "server exits 0 on SIGTERM")
