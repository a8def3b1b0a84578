"""End-to-end tests of sandboxd's Piston front (--http-fronts piston,
server/fronts/piston.c): the Piston API v2 as Piston's users reach it.

- piston_client: the real npm client, piston-client (pinned in
  package-lock.json beside this file; `npm ci` is run here when
  node_modules does not match the lock), against the front; it labels its
  JSON text/plain (node-fetch's type for a string), and reads every answer,
  the listener's refusals too, as JSON.
- piston_languages: every language the server lists (python, bash,
  javascript, c, c++) through piston-client: hello world, stdin, a spin
  past the timeout, a memory bomb, and a program that does not compile
  (c, c++: compile's status and stderr, no run) or parse (RE).
- piston_platform: requests shaped as a learning platform's provider sends
  them (5 s run_timeout, 128 MB run_memory_limit, a server whose output cap
  is 64 KiB): hello, a spin past the timeout, a 512 MiB allocation, an
  output flood, a segfault; each answer classified the way the provider
  does (tests/lib/piston.py: classify) as ok, timeout, memory,
  output-limit, signal.
- piston_requests: the rest of the API: runtimes, aliases and version
  ranges, files beside the program, encodings, stdin and args, limits onto
  RunCode's (over the maximum: refused as RunCode refuses it), concurrent
  runs, a drain with a run in flight.
- piston_bad_input: invalid JSON, wrong types, unknown fields, bad file
  names, a body over the cap, an unknown language, a version that does not
  match, a non-JSON content type, an Origin, a Host that is not the
  server's, an unknown path, a method not taken, a connection that sends a
  byte a second: each a 4xx naming the problem in Piston's {"message"},
  nothing run, HTTP and the nng RPC still serving.

- piston_https: over https:// with --tls-client-auth required, the front
  runs code only for a client with a certificate from --tls-ca (403 and
  nothing run without one).

Each test (ctest's fronts_<name>, pytest's test_<name>) starts its own
sandboxd (uids from the harness) with the front on a free loopback port;
a failed check lets the test go on and fails it at its end. Needs root
(the engine does); without it the test skips (exit 77), or fails when
CI=true.
"""
import concurrent.futures
import json
import os
import shutil
import signal
import socket
import subprocess
import time

from lib import origin, piston
from lib.harness import Server, check, closed_by_peer, free_port
from lib.piston import classify, execute, program

HERE = os.path.dirname(os.path.abspath(__file__))

HELLO = 'print("hello")\n'
RUNTIME_VERSION = subprocess.run(["/usr/bin/python3", "-c",
                                  "import platform; print(platform.python_version())"],
                                 capture_output=True, text=True).stdout.strip()


class PistonServer(Server):
    """A sandboxd serving the Piston front on a free loopback port."""
    tmp_prefix = "sbx-piston-"

    def __init__(self, bin_dir, *extra, **kw):
        self.http_port = free_port()
        super().__init__(bin_dir, "--http-listen", f"http://127.0.0.1:{self.http_port}",
                         "--http-fronts", "piston", *extra, **kw)

    def execute(self, body, timeout=120):
        return execute(self.http_port, body, timeout)

    def request(self, method, path, body=None, headers=None, timeout=30):
        return piston.request(self.http_port, method, path, body, headers, timeout)

    def runs_total(self):
        p = subprocess.run([f"{self.bin_dir}/sandbox-run", "-e", self.tcp, "--info"],
                           capture_output=True, text=True, timeout=30)
        return json.loads(p.stdout).get("runs_total")


def still_serving(s, what):
    st, reply = s.execute(program(HELLO))
    check(st == 200 and reply.get("run", {}).get("stdout") == "hello\n",
          f"{what}: the front still runs a program", (st, reply))
    rc, out = s.run(HELLO)
    check(out.get("stdout") == "hello\n", f"{what}: the nng RPC still answers", out)


# ---- the real npm client ----

def npm_ci():
    """node_modules as package-lock.json pins it (scripts/npm-ci: npm ci when
    it differs)."""
    p = subprocess.run([os.path.join(HERE, "..", "..", "..", "scripts", "npm-ci"), HERE],
                       capture_output=True, text=True, timeout=300)
    return check(p.returncode == 0, "npm ci installs piston-client from the lockfile",
                 p.stderr[-2000:])


def node_client(s, calls):
    p = subprocess.run(["node", os.path.join(HERE, "client.mjs"),
                        f"http://127.0.0.1:{s.http_port}", json.dumps(calls)],
                       capture_output=True, text=True, timeout=300)
    try:
        return json.loads(p.stdout)
    except ValueError:
        return [{"raw": p.stdout[-2000:], "stderr": p.stderr[-2000:]}] * len(calls)


def test_piston_client(bin_dir):
    if not check(shutil.which("node") and shutil.which("npm"), "node and npm are installed "
                 "(scripts/install-deps)") or not npm_ci():
        return
    s = PistonServer(bin_dir, "--workers", "2", "--http-max-body-bytes", "65536")
    try:
        answers = node_client(s, [
            {"op": "runtimes"},
            {"op": "execute", "language": "python", "code": "import sys\nprint('hi', sys.argv[1:])"},
            {"op": "execute", "language": "python", "code": "print(input()[::-1])",
             "config": {"stdin": "olleh", "args": [], "runTimeout": 5000,
                        "runMemoryLimit": 128 * 1000 * 1000}},
            {"op": "execute", "language": "python", "code": "while True: pass",
             "config": {"runTimeout": 1000}},
            {"op": "execute", "language": "python", "code": "import sys\nsys.exit(4)"},
            {"op": "execute", "language": "python", "code": "print(1)",
             "config": {"version": "2.7"}},
            {"op": "execute", "language": "python", "code": "#" * 70000},
        ])
        runtimes, hello, stdin, spin, exit4, old, big = answers
        check(isinstance(runtimes, list) and
              {"language": "python", "version": RUNTIME_VERSION,
               "aliases": ["py", "py3", "python3",
                           "python" + ".".join(RUNTIME_VERSION.split(".")[:2])]} in runtimes,
              "piston-client: runtimes() lists python at the interpreter's version", runtimes)
        check(hello.get("language") == "python" and hello.get("version") == RUNTIME_VERSION
              and hello.get("run", {}).get("stdout") == "hi ['1', '2', '3']\n"
              and hello["run"].get("code") == 0 and hello["run"].get("signal") is None
              and hello["run"].get("status") is None,
              "piston-client: execute('python', code) runs it, with the client's default args",
              hello)
        check(stdin.get("run", {}).get("stdout") == "hello\n",
              "piston-client: stdin, args and limits in the config", stdin)
        check(spin.get("run", {}).get("status") == "TO"
              and spin["run"].get("signal") == "SIGKILL" and classify(spin["run"]) == "timeout",
              "piston-client: runTimeout 1000 on a spin: TO, SIGKILL", spin)
        check(exit4.get("run", {}).get("code") == 4 and exit4["run"].get("status") == "RE",
              "piston-client: a non-zero exit: RE with its code", exit4)
        check(old == {"message": "python-2.7 runtime is unknown"},
              "piston-client: a version that does not match: Piston's message", old)
        # The listener's own refusal, before the body is read, is Piston's
        # JSON too: the client reads every answer with res.json().
        check(list(big) == ["message"] and "--http-max-body-bytes" in big["message"],
              "piston-client: a body over the cap: Piston's {message} (413), not a FetchError",
              big)
        still_serving(s, "piston-client")
    finally:
        check(s.stop() == 0, "sandboxd exits 0")


# ---- every language, through the real client ----

# Per language (as /api/v2/runtimes names it): hello world, stdin, a spin,
# a memory bomb and a program that does not compile (or parse), each with
# how piston-client's answer must read. The versions are asked of the
# binaries here, as the server asks them.
def _version(cmd, pattern):
    import re
    out = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(pattern, out.stdout + out.stderr)
    return m.group(1) if m else "?"


LANGUAGES = {
    "python": (RUNTIME_VERSION, {
        "hello": 'print("hello")', "stdin": "print(input()[::-1])",
        "spin": "while True: pass", "bomb": "x = bytearray(512 << 20)",
        "broken": "def (:"}),
    "bash": (_version(["/usr/bin/bash", "--version"], r"version (\d+\.\d+\.\d+)"), {
        "hello": "echo hello", "stdin": 'read -r x; echo "$x" | rev',
        "spin": "while :; do :; done", "bomb": "a=x; while :; do a=$a$a; done",
        "broken": "if then fi"}),
    "javascript": (_version(["/usr/bin/node", "--version"], r"v(\d+\.\d+\.\d+)"), {
        "hello": 'console.log("hello")',
        "stdin": "const s = require('fs').readFileSync(0, 'utf8').trim();\n"
                 "console.log([...s].reverse().join(''))",
        "spin": "for (;;) {}",
        "bomb": "const a = []; for (;;) a.push(Buffer.alloc(1 << 20, 1));",
        "broken": "function ( {"}),
    "c": (_version(["/usr/bin/gcc", "-dumpfullversion"], r"(\d+\.\d+\.\d+)"), {
        "hello": '#include <stdio.h>\nint main(void) { puts("hello"); }',
        "stdin": '#include <stdio.h>\n#include <string.h>\nint main(void) { char b[64];\n'
                 '  if (!fgets(b, sizeof b, stdin)) return 1; size_t n = strcspn(b, "\\n");\n'
                 '  while (n--) putchar(b[n]); putchar(10); }',
        "spin": "int main(void) { for (;;); }",
        "bomb": "#include <stdlib.h>\n#include <string.h>\n"
                "int main(void) { for (;;) memset(malloc(1 << 20), 1, 1 << 20); }",
        "broken": "int main(void) { return x; }"}),
    "c++": (_version(["/usr/bin/g++", "-dumpfullversion"], r"(\d+\.\d+\.\d+)"), {
        "hello": '#include <iostream>\nint main() { std::cout << "hello" << std::endl; }',
        "stdin": "#include <iostream>\n#include <string>\n#include <algorithm>\n"
                 "int main() { std::string s; std::getline(std::cin, s);\n"
                 "  std::reverse(s.begin(), s.end()); std::cout << s << std::endl; }",
        "spin": "int main() { for (;;); }",
        "bomb": "#include <vector>\nint main() { std::vector<std::vector<char>> v;\n"
                "  for (;;) v.emplace_back(1 << 20, 1); }",
        "broken": "int main() { std::cout << 1; }"}),
}
COMPILED = ("c", "c++")


def test_piston_languages(bin_dir):
    if not check(shutil.which("node") and shutil.which("npm"), "node and npm are installed "
                 "(scripts/install-deps)") or not npm_ci():
        return
    s = PistonServer(bin_dir, "--workers", "2")
    try:
        calls = [{"op": "runtimes"}]
        for lang, (_, code) in LANGUAGES.items():
            calls += [
                {"op": "execute", "language": lang, "code": code["hello"]},
                {"op": "execute", "language": lang, "code": code["stdin"],
                 "config": {"stdin": "olleh"}},
                {"op": "execute", "language": lang, "code": code["spin"],
                 "config": {"runTimeout": 1000}},
                {"op": "execute", "language": lang, "code": code["bomb"],
                 "config": {"runMemoryLimit": 64 * 1024 * 1024, "runTimeout": 10000}},
                {"op": "execute", "language": lang, "code": code["broken"]},
            ]
        answers = node_client(s, calls)
        listed = {r.get("language"): r.get("version") for r in answers[0]
                  if isinstance(answers[0], list)} if isinstance(answers[0], list) else {}
        for i, (lang, (version, _)) in enumerate(LANGUAGES.items()):
            check(listed.get(lang) == version,
                  f"{lang}: runtimes() lists it at the binary's version {version}", answers[0])
            hello, stdin, spin, bomb, broken = answers[1 + 5 * i:6 + 5 * i]
            run = lambda a: a.get("run", {}) if isinstance(a, dict) else {}
            check(hello.get("language") == lang and hello.get("version") == version
                  and run(hello).get("stdout") == "hello\n" and classify(run(hello)) == "ok",
                  f"{lang}: hello world", hello)
            check(run(stdin).get("stdout") == "hello\n", f"{lang}: stdin", stdin)
            check(classify(run(spin)) == "timeout" and run(spin).get("status") == "TO",
                  f"{lang}: a spin past runTimeout 1000 is TO", spin)
            check(classify(run(bomb)) == "memory",
                  f"{lang}: a memory bomb past runMemoryLimit 64 MiB is memory (SG, SIGKILL)",
                  bomb)
            if lang in COMPILED:
                comp = broken.get("compile", {})
                check("run" not in broken and comp.get("code") not in (0, None)
                      and comp.get("status") == "RE" and "error" in comp.get("stderr", ""),
                      f"{lang}: a compile error: compile's code and stderr, no run", broken)
                check(hello.get("compile", {}).get("code") == 0,
                      f"{lang}: a program that compiles has compile.code 0", hello)
            else:
                check("compile" not in broken and classify(run(broken)) == "error"
                      and run(broken).get("stderr"),
                      f"{lang}: a syntax error: RE with stderr", broken)
        still_serving(s, "piston-client, every language")
    finally:
        check(s.stop() == 0, "sandboxd exits 0")


# ---- a learning platform's provider ----

PLATFORM_LIMITS = {"run_timeout": 5000, "compile_timeout": 10000,
                   "run_memory_limit": 128 * 1024 * 1024, "compile_memory_limit": -1}

PLATFORM_CASES = [  # (what, code, classification, status, signal)
    ("hello", HELLO, "ok", None, None),
    ("a spin past the timeout", "while True:\n    pass\n", "timeout", "TO", "SIGKILL"),
    ("a 512 MiB allocation", "x = bytearray(512 << 20)\nprint(len(x))\n", "memory", "SG",
     "SIGKILL"),
    ("an output flood", 'while True:\n    print("x" * 1000)\n', "output-limit", "OL", "SIGKILL"),
    ("a segfault", "import ctypes\nctypes.string_at(0)\n", "signal", "SG", "SIGSEGV"),
]


def test_piston_platform(bin_dir):
    s = PistonServer(bin_dir, "--workers", "2", "--default-output-bytes", "65536")
    try:
        for what, code, want, status, sig in PLATFORM_CASES:
            body = {"language": "python", "version": "*",
                    "files": [{"name": "main.py", "content": code}], "stdin": "", "args": [],
                    **PLATFORM_LIMITS}
            st, reply = s.execute(body)
            run = reply.get("run", {})
            check(st == 200 and run.get("status") == status and run.get("signal") == sig
                  and classify(run) == want,
                  f"platform: {what}: status {status}, signal {sig}: classified {want}",
                  (st, {k: run.get(k) for k in ("status", "signal", "code", "message",
                                                "wall_time", "memory")}))
            if want == "ok":
                check(run.get("stdout") == "hello\n" and run.get("code") == 0
                      and run.get("message") is None, "platform: hello's output and code", run)
            if want == "output-limit":
                check(len(run.get("stdout", "")) <= 65536 and run.get("code") is None,
                      "platform: the flood's stdout stops at the 64 KiB cap",
                      len(run.get("stdout", "")))
            if want == "memory":
                check(run.get("memory", 0) <= 128 * 1024 * 1024 and run.get("code") is None
                      and "out of memory" in run.get("message", ""),
                      "platform: the memory kill: peak within the limit, message says why", run)
            if want == "timeout":
                check(run.get("wall_time", 0) >= 5000, "platform: the spin ran its 5 s",
                      run.get("wall_time"))
        # stderr past the cap alone is EL.
        st, reply = s.execute(program('import sys\nwhile True:\n    sys.stderr.write("e" * 999)\n',
                                      **PLATFORM_LIMITS))
        run = reply.get("run", {})
        check(run.get("status") == "EL" and classify(run) == "output-limit",
              "platform: a flood on stderr: EL, classified output-limit",
              {k: run.get(k) for k in ("status", "signal", "message")})
        still_serving(s, "the platform's cases")
    finally:
        check(s.stop() == 0, "sandboxd exits 0")


# ---- the rest of the API ----

def test_piston_requests(bin_dir):
    s = PistonServer(bin_dir, "--workers", "2", "--max-memory-bytes", str(256 << 20))
    try:
        check_runtimes_and_versions(s)
        check_files(s)
        check_stdin_args_limits(s)
        check_concurrent_and_drain(s)
    finally:
        s.stop()


def check_runtimes_and_versions(s):
    st, h, body = s.request("GET", "/api/v2/runtimes")
    check(st == 200 and h.get("content-type", "").startswith("application/json")
          and json.loads(body)[0]["version"] == RUNTIME_VERSION, "GET /api/v2/runtimes",
          (st, h, body))
    st, h, body = s.request("HEAD", "/api/v2/runtimes")
    check(st == 200 and body == b"", "HEAD /api/v2/runtimes: no body", (st, body))
    major, minor, patch = RUNTIME_VERSION.split(".")
    for language in ("python", "py", "py3", "python3", f"python{major}.{minor}"):
        for version in ("*", RUNTIME_VERSION, f"{major}.x", f"{major}.{minor}", f"^{major}.0",
                        f"~{major}.{minor}.0", f">={major}.0.0 <{int(major) + 1}",
                        f"2.7 || {major}.{minor}"):
            st, reply = s.execute({"language": language, "version": version,
                                   "files": [{"content": "print(7)"}]})
            if not (st == 200 and reply.get("run", {}).get("stdout") == "7\n"):
                check(False, f"language {language!r} version {version!r} runs", (st, reply))
                return
    check(True, "every alias with every matching version range runs")
    for language, version in (("python", f"{int(major) + 1}.x"), ("python", f"<{major}"),
                              ("python", "latest"), ("Python", "*"), ("python2", "*"),
                              ("cobol", "*")):
        st, reply = s.execute({"language": language, "version": version,
                               "files": [{"content": "print(7)"}]})
        check(st == 400 and reply == {"message": f"{language}-{version} runtime is unknown"},
              f"language {language!r} version {version!r}: 400, Piston's message", (st, reply))


def check_files(s):
    import base64
    files = [{"name": "prog.py", "content": "import helper, sys\nprint(helper.X, "
              "open('data.bin', 'rb').read(), open('sub/t.txt').read(), sys.argv)\n"},
             {"name": "helper.py", "content": "X = 42\n"},
             {"name": "data.bin", "content": base64.b64encode(b"\x00\xff").decode(),
              "encoding": "base64"},
             {"name": "sub/t.txt", "content": b"hex!".hex(), "encoding": "hex"}]
    st, reply = s.execute({"language": "python", "version": "*", "files": files, "args": ["a"]})
    check(st == 200 and reply["run"]["stdout"] == "42 b'\\x00\\xff' hex! ['prog.py', 'a']\n",
          "files: the first runs with the others beside it (imports, reads, base64, hex)",
          (st, reply))
    st, reply = s.execute({"language": "python", "version": "*",
                           "files": [{"content": "import os\nprint(sorted(os.listdir('.')))"}]})
    check(st == 200 and reply["run"]["stdout"] == "['main.py', 'output']\n",
          "files: one file is the run's main.py, nothing else written", (st, reply))
    st, reply = s.execute({"language": "python", "version": "*",
                           "files": [{"content": base64.b64encode(b"print('b64')").decode(),
                                      "encoding": "base64"}, {"content": "x"}]})
    check(st == 200 and reply["run"]["stdout"] == "b64\n",
          "files: a base64 program runs (from file0.code)", (st, reply))


def check_stdin_args_limits(s):
    st, reply = s.execute(program("import sys\nprint(repr(sys.stdin.read()), sys.argv[1:])",
                                  stdin="no newline", args=["x y", "é"]))
    check(reply.get("run", {}).get("stdout") == "'no newline\\n' ['x y', 'é']\n",
          "stdin gets Piston's final newline; args arrive as given", reply)
    st, reply = s.execute(program("import resource\nprint(1)", run_timeout=-1, run_cpu_time=-1,
                                  run_memory_limit=-1, compile_timeout=0, compile_cpu_time=None,
                                  compile_memory_limit=-1))
    check(st == 200 and reply["run"]["stdout"] == "1\n",
          "-1 and 0 are the server's defaults; compile_* are accepted and ignored", (st, reply))
    st, reply = s.execute(program("while True: pass", run_cpu_time=300, run_timeout=5000))
    run = reply.get("run", {})
    check(run.get("status") == "TO" and run.get("cpu_time", 0) < 3000,
          "run_cpu_time (ms) ends a spin as TO", run)
    st, reply = s.execute(program("x = bytearray(100 << 20)", run_memory_limit=64 << 20))
    check(classify(reply.get("run", {})) == "memory", "run_memory_limit (bytes) is the run's",
          reply)
    st, reply = s.execute(program(HELLO, run_memory_limit=512 << 20))
    check(st == 400 and reply.get("message", "").startswith("run_memory_limit: ")
          and "allowed: 8388608 to 268435456" in reply["message"],
          "run_memory_limit above --max-memory-bytes: refused as RunCode refuses it, named",
          (st, reply))
    st, reply = s.execute(program(HELLO, run_timeout=10 ** 12))
    check(st == 400 and reply.get("message", "").startswith("run_timeout: "),
          "run_timeout above --max-timeout-ms: refused, named", (st, reply))


def check_concurrent_and_drain(s):
    with concurrent.futures.ThreadPoolExecutor(6) as ex:
        futs = [ex.submit(s.execute, program(f"import time\ntime.sleep(0.3)\nprint({i})"))
                for i in range(6)]
        outs = [f.result()[1].get("run", {}).get("stdout") for f in futs]
    check(outs == [f"{i}\n" for i in range(6)], "six concurrent runs through the front (two "
          "workers): each gets its own answer", outs)
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        fut = ex.submit(s.execute, program("import time\ntime.sleep(2)\nprint('last')"))
        time.sleep(0.8)
        s.proc.send_signal(signal.SIGTERM)
        st, reply = fut.result()
    check(st == 200 and reply.get("run", {}).get("stdout") == "last\n",
          "SIGTERM: a run in flight through the front finishes and is answered", (st, reply))
    check(s.proc.wait(60) == 0, "sandboxd exits 0 after the drain")


# ---- bad input ----

def check_bad_settings(b):
    """--http-fronts names a front we have, and needs --http-listen."""
    for args, want in ((["--http-fronts", "piston"], '"piston" needs --http-listen'),
                       (["--http-listen", f"http://127.0.0.1:{free_port()}", "--http-fronts",
                         "piston,nope"], '"nope" is not a front (known: piston, mcp)')):
        p = subprocess.run([f"{b}/sandboxd", "--state-dir", "/nonexistent/sbx", *args],
                           capture_output=True, text=True, timeout=30)
        check(p.returncode == 2 and want in p.stderr, f"settings {args[-1]!r}: exit 2, {want}",
              (p.returncode, p.stderr))


def test_piston_bad_input(bin_dir):
    check_bad_settings(bin_dir)
    s = PistonServer(bin_dir, "--workers", "1", "--http-max-body-bytes", "100000",
                     "--http-request-timeout-s", "3")
    try:
        before = s.runs_total()
        check_refusals(s)
        check_slow_and_big(s)
        check(s.runs_total() == before, "nothing ran for any refused request",
              (before, s.runs_total()))
        still_serving(s, "bad input")
    finally:
        check(s.stop() == 0, "sandboxd exits 0")


def refusal_cases():
    hello = [{"content": HELLO}]
    ok = {"language": "python", "version": "*", "files": hello}
    return [
        ("not an object", [1, 2], 400, "the request body is an array, not a JSON object"),
        ("no language", {"version": "*", "files": hello}, 400, "language is required as a string"),
        ("language a number", {**ok, "language": 3}, 400, "language is required as a string"),
        ("version a number", {**ok, "version": 3.11}, 400, "version is required as a string"),
        ("files an object", {**ok, "files": {"content": HELLO}}, 400,
         "files is required as an array"),
        ("no files", {**ok, "files": []}, 400, "files must include at least one utf8 encoded file"),
        ("a file a string", {**ok, "files": [HELLO]}, 400,
         "files[0] must be an object (it is a string)"),
        ("content missing", {**ok, "files": [{"name": "a.py"}]}, 400,
         "files[0].content is required as a string"),
        ("content a number", {**ok, "files": [{"content": 1}]}, 400,
         "files[0].content is required as a string"),
        ("name a number", {**ok, "files": [{"content": HELLO, "name": 5}]}, 400,
         "files[0].name must be a string (it is a number)"),
        ("unknown file field", {**ok, "files": [{"content": HELLO, "mode": "0755"}]}, 400,
         'files[0]: unknown field "mode" (known: name, content, encoding)'),
        ("bad encoding", {**ok, "files": [{"content": HELLO, "encoding": "rot13"}]}, 400,
         "files[0].encoding must be one of utf8, base64, hex"),
        ("bad base64", {**ok, "files": [{"content": "!!!", "encoding": "base64"},
                                        {"content": "x"}]}, 400,
         "files[0].content is not valid base64"),
        ("stdin a list", {**ok, "stdin": ["a"]}, 400, "stdin must be a string (it is an array)"),
        ("args a string", {**ok, "args": "a b"}, 400,
         "args must be an array of strings (it is a string)"),
        ("args[1] a number", {**ok, "args": ["a", 2]}, 400,
         "args[1] must be a string (it is a number)"),
        ("run_timeout a string", {**ok, "run_timeout": "5000"}, 400,
         "If specified, run_timeout must be a number (it is a string)"),
        ("run_memory_limit negative", {**ok, "run_memory_limit": -5}, 400,
         "run_memory_limit must be non-negative, or -1 for the server's default"),
        ("compile_timeout a boolean", {**ok, "compile_timeout": True}, 400,
         "If specified, compile_timeout must be a number (it is a boolean)"),
        ("unknown field", {**ok, "run_timout": 5000}, 400, 'unknown field "run_timout"'),
        ("unknown language", {**ok, "language": "cobol"}, 400, "cobol-* runtime is unknown"),
        ("version that does not match", {**ok, "version": "2.7.18"}, 400,
         "python-2.7.18 runtime is unknown"),
    ] + [
        (f"file name {name!r}", {**ok, "files": [{"name": name, "content": HELLO}]}, 400,
         "files[0].name: must be a relative path") for name in
        ("../x", "/etc/passwd", "a/../../x", "./x", "x/", "..", "a//b", "n" * 256)
    ] + [
        (f"file name {name!r} beside the program",
         {**ok, "files": [{"content": HELLO}, {"name": name, "content": "x"}]}, 400,
         "files[1].name: must be a relative path") for name in ("../x", "/tmp/x")
    ] + [
        ("two files of one name", {**ok, "files": [{"name": "a", "content": HELLO},
                                                   {"name": "a", "content": "x"}]}, 400,
         "files[1].name: duplicate of files[0]"),
    ]


def check_refusals(s):
    for what, body, status, message in refusal_cases():
        st, reply = s.execute(body)
        check(st == status and reply.get("message", "").startswith(message) and len(reply) == 1,
              f"{what}: {status} {{message}}", (st, reply))
    for raw, message in ((b"", "the request body is empty"), (b"{", "invalid JSON at line 1"),
                         (b'{"language": "python",}', "invalid JSON at line 1"),
                         (b'{"a": 1, "a": 2}', "invalid JSON at line 1"),
                         (b"\xff\xfe{}", "invalid JSON"), (b"null", "the request body is null")):
        st, h, body = s.request("POST", "/api/v2/execute", raw,
                                {"Content-Type": "application/json"})
        try:
            got = json.loads(body)
        except ValueError:
            got = {"raw": body}
        check(st == 400 and got.get("message", "").startswith(message),
              f"body {raw[:24]!r}: 400 {message!r}", (st, got))
    st, h, body = s.request("POST", "/api/v2/execute", b"language=python",
                            {"Content-Type": "application/x-www-form-urlencoded"})
    check(st == 415 and piston_message(h, body) == "requests must be of type application/json",
          "a form body: 415, Piston's message", (st, body))
    st, h, body = s.request("POST", "/api/v2/execute", json.dumps(program(HELLO)).encode(),
                            {"Content-Type": "application/json", "Origin": "http://a.example"})
    check(st == 403 and "Origin" in piston_message(h, body),
          "a POST with an Origin header: 403 {message}", (st, body))
    st, h, body = s.request("PUT", "/api/v2/execute", b"{}")
    check(st == 405 and "allowed: POST" in piston_message(h, body),
          "PUT /api/v2/execute: 405 {message}", (st, body))
    st, h, body = s.request("GET", "/api/v2/packages")
    check(st == 404 and piston_message(h, body) == "no such path",
          "the package routes are not served: 404 {message}", (st, body))
    st, h, body = s.request("POST", "/api/v2/execute", json.dumps(program(HELLO)).encode(),
                            {"Content-Type": "application/json", "Host": "rebound.example"})
    check(st == 421 and "DNS rebinding" in piston_message(h, body),
          "a Host not the server's: 421 {message}", (st, body))


def piston_message(headers, body):
    """The message of an answer in Piston's error shape, exactly
    {"message": "..."} as application/json; "" for anything else."""
    if not headers.get("content-type", "").startswith("application/json"):
        return ""
    try:
        j = json.loads(body)
    except ValueError:
        return ""
    return j["message"] if isinstance(j, dict) and list(j) == ["message"] else ""


def check_slow_and_big(s):
    big = json.dumps(program("x = '" + "a" * 200000 + "'\n")).encode()
    st, h, body = s.request("POST", "/api/v2/execute", big, {"Content-Type": "application/json"})
    check(st == 413 and b"--http-max-body-bytes" in body, "a body over the cap: 413", (st, body))
    request = (b"POST /api/v2/execute HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               b"Content-Type: application/json\r\n"
               b"Content-Length: 200\r\n\r\n{\"language\": \"python\"")
    c = socket.create_connection(("127.0.0.1", s.http_port), timeout=30)
    t0, sent, closed = time.monotonic(), 0, False
    try:
        while sent < len(request) and time.monotonic() - t0 < 20 and not closed:
            c.sendall(request[sent:sent + 1])
            sent += 1
            closed = closed_by_peer(c, 1.0)
    except OSError:
        closed = True
    c.close()
    check(closed and sent < len(request), "a connection sending one byte a second is cut off",
          (closed, sent, round(time.monotonic() - t0, 1)))


# ---- over https:// with client certificates required ----

def https_execute(port, certs, body, cert=None, key=None):
    """POST /api/v2/execute over TLS: (status, parsed answer or raw)."""
    from lib.tls_certs import https_post_json
    return https_post_json(port, "/api/v2/execute", body, certs["ca_crt"], cert, key)


def test_piston_https(bin_dir):
    """--http-listen https:// with --tls-client-auth required: the front, like
    /metrics, runs code only for a client with a certificate from --tls-ca."""
    import tempfile
    from lib.tls_certs import make_certs
    d = tempfile.mkdtemp(prefix="sbx-piston-certs-")
    c = make_certs(d)
    port = free_port()
    s = Server(bin_dir, "--http-listen", f"https://127.0.0.1:{port}", "--http-fronts", "piston",
               "--tls-cert", c["server_crt"], "--tls-key", c["server_enc_key"],
               "--tls-key-password-file", c["key_password_txt"], "--tls-ca", c["ca_crt"])
    try:
        before = PistonServer.runs_total(s)
        st, reply = https_execute(port, c, program(HELLO), c["client_crt"], c["client_key"])
        check(st == 200 and reply.get("run", {}).get("stdout") == "hello\n",
              "https: a client with a certificate from --tls-ca runs code", (st, reply))
        for what, kw in (("no client certificate", {}),
                         ("a certificate from another CA",
                          dict(cert=c["other_client_crt"], key=c["other_client_key"]))):
            st, reply = https_execute(port, c, program(HELLO), **kw)
            # A certificate shown that does not verify ends the handshake.
            check(st == (403 if not kw else None),
                  f"https: {what}: {'403' if not kw else 'the handshake fails'}, nothing run",
                  (st, reply))
        check(PistonServer.runs_total(s) == before + 1, "https: only the admitted call ran",
              (before, PistonServer.runs_total(s)))
    finally:
        check(s.stop() == 0, "sandboxd exits 0")
        shutil.rmtree(d, ignore_errors=True)


# ---- network (--piston-allow-net) ----

FETCH = """import urllib.request, urllib.error
for port in ({ok}, {other}):
    try:
        print(urllib.request.urlopen(f"http://127.0.0.1:{{port}}/", timeout=10).read().decode(), end="")
    except urllib.error.HTTPError as e:
        print("refused", e.code, e.reason)
"""


def test_piston_network(bin_dir):
    """Piston's API has no allow list: --piston-allow-net gives every run of
    the front the server's default, within --egress-allow (checked at
    start), and nothing else."""
    with origin.serving(b"from the origin\n") as ok:
        other = free_port()
        p = subprocess.run([f"{bin_dir}/sandboxd", "--state-dir", "/nonexistent/sbx",
                            "--egress-allow", f"127.0.0.0/8:{ok}",
                            "--piston-allow-net", f"127.0.0.1:{other}"],
                           capture_output=True, text=True, timeout=30)
        check(p.returncode == 2 and f'piston-allow-net: "127.0.0.1:{other}" is not within '
              "egress-allow" in p.stderr, "a --piston-allow-net beyond --egress-allow: exit 2",
              (p.returncode, p.stderr))
        s = PistonServer(bin_dir, "--workers", "1", "--egress-allow", f"127.0.0.0/8:{ok}",
                         "--piston-allow-net", f"127.0.0.1:{ok}")
        try:
            st, reply = s.execute(program(FETCH.format(ok=ok, other=other)))
            out = reply.get("run", {}).get("stdout", "")
            check(st == 200 and out.startswith("from the origin\n"),
                  "a Piston run reaches the host --piston-allow-net allows", (st, reply))
            check("refused 403 sandboxd egress: connection to 127.0.0.1:%d refused: not in the "
                  "run's allow list" % other in out, "and is refused any other", out)
        finally:
            check(s.stop() == 0, "sandboxd exits 0")
        s = PistonServer(bin_dir, "--workers", "1")
        try:
            st, reply = s.execute(program(FETCH.format(ok=ok, other=other)))
            check(st == 200 and "from the origin" not in reply.get("run", {}).get("stdout", ""),
                  "without --piston-allow-net a Piston run has no network", (st, reply))
        finally:
            check(s.stop() == 0, "sandboxd exits 0")
