"""Runtimes beyond Python on the wire (docs/RUNTIMES.md): a real sandboxd per
test with the build's manifests (build/share/sandboxd/runtimes, from
deploy/runtimes/) or a runtimes directory of the test's own, raw REQ
connections with the build's generated messages.

Tests (test_<name>, ctest service_<name>):
  runtimes_info       GetInfo's runtime_info: python and every shipped
                      manifest at its binary's version, available, compiled
                      or not, its file; runtimes lists the available ones;
                      the log's event=runtime lines; the start's checks are
                      not runs (runs_total 0, no event=run)
  runtimes_choose     runtime by name, language + version range (aliases,
                      ranges), both or a version alone refused, an unknown
                      language refused naming what there is; the default
                      is python
  runtimes_bash       bash: args, stdin, env, files, output/ as artifacts,
                      exit codes and signals, the timeout; a FILES session
                      mixing bash, python and bash on one workspace;
                      INTERPRETER refused for bash
  runtimes_compile    c and cpp: a compile error (compile.failed, the
                      compiler's exit and stderr, nothing run, the
                      feedback), compile_limits (a compiler past 1 s is
                      killed_by timeout; a bad one, disk_bytes, or any for
                      a runtime without a compile stage: INVALID_ARGUMENT),
                      a segfault (signal), a malloc bomb (memory), a spin
                      (timeout), a.out kept in a session
  runtimes_manifests  adding a runtime is a manifest: lua5.4 from a runtimes
                      directory of this test's own, listed at its version,
                      run by name and by language; a runtime whose
                      self-test fails (or whose program does not exist) is
                      listed unavailable with the reason and its runs are
                      FAILED_PRECONDITION while the others serve; a
                      manifest with an unknown key, a clash of names, or a
                      --runtimes-dir that does not exist stops the start
                      (exit 2) naming the file
"""
import json
import os
import re
import shutil
import subprocess
import tempfile

from lib.harness import RunCaller, Server, allocate_uids, check, load_pb2

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
OK, INVALID_ARGUMENT, FAILED_PRECONDITION = 0, 3, 9
NONE, TIMEOUT, MEMORY, SIGNAL = 0, 1, 2, 4


def binary_version(cmd, pattern):
    out = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(pattern, out.stdout + out.stderr)
    return m.group(1) if m else None


SHIPPED = {  # name: (language, version asked here, compiled, file)
    "bash": ("bash", binary_version(["/usr/bin/bash", "--version"], r"version (\d+\.\d+\.\d+)"),
             False, "main.sh"),
    "c": ("c", binary_version(["/usr/bin/gcc", "-dumpfullversion"], r"(\d+\.\d+\.\d+)"), True,
          "main.c"),
    "cpp": ("c++", binary_version(["/usr/bin/g++", "-dumpfullversion"], r"(\d+\.\d+\.\d+)"), True,
            "main.cpp"),
    "node": ("javascript", binary_version(["/usr/bin/node", "--version"], r"v(\d+\.\d+\.\d+)"),
             False, "main.js"),
}


def shipped_manifests():
    return sorted(f[:-5] for f in os.listdir(os.path.join(REPO, "deploy", "runtimes"))
                  if f.endswith(".json"))


def test_runtimes_info(bin_dir):
    pb = load_pb2(bin_dir)
    s = Server(bin_dir, "--workers", "1")
    c = RunCaller(s, pb)
    try:
        i = c.info()
        infos = {r.name: r for r in i.runtime_info}
        names = shipped_manifests()
        check(list(infos)[0] == "python" and infos["python"].available
              and infos["python"].version == i.python_version
              and infos["python"].file == "main.py" and not infos["python"].compiled,
              "runtime_info: python first, at the interpreter's version", infos.get("python"))
        check(sorted(n for n in infos if n != "python") == names,
              "runtime_info: one entry per manifest in deploy/runtimes", list(infos))
        for name in names:
            r = infos.get(name)
            lang, version, compiled, file = SHIPPED[name]
            check(r is not None and r.available and not r.unavailable_reason
                  and r.language == lang and r.version == version and r.compiled == compiled
                  and r.file == file,
                  f"runtime_info: {name} available, language {lang}, version {version} (the "
                  f"binary's), compiled {compiled}, file {file}", r)
            check(re.search(rf" event=runtime name={re.escape(name)} language=\S+ "
                            rf"version={re.escape(version or '?')} manifest=\S+{name}\.json ms=\d+",
                            s.log_text()), f"the log says {name} was checked", name)
        check(list(i.runtimes) == ["python"] + names, "runtimes: the available ones' names",
              list(i.runtimes))
        check(i.runs_total == 0 and " event=run " not in s.log_text(),
              "the checks at start are not runs: runs_total 0, no event=run",
              (i.runs_total, s.log_text()[-2000:]))
        # Before any run, no thread of the server is in a slot's cgroup: the
        # checks ran on a thread of their own (on cgroup v1 a run moves the
        # thread that starts it into its slot, and the main thread and all
        # it started after stayed in slot 0, counted against its pids).
        in_slots = []
        for tid in os.listdir(f"/proc/{s.proc.pid}/task"):
            try:
                with open(f"/proc/{s.proc.pid}/task/{tid}/cgroup") as f:
                    in_slots += [(tid, line.strip()) for line in f if "/slot-" in line]
            except OSError:
                pass
        check(not in_slots, "no thread of the server sits in a slot's cgroup after the checks",
              in_slots)
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")


def test_runtimes_choose(bin_dir):
    pb = load_pb2(bin_dir)
    s = Server(bin_dir, "--workers", "1")
    c = RunCaller(s, pb, runtime="")
    try:
        r = c.ok("import sys; print(sys.version_info[0])")
        check(r.stdout == b"3\n", "no runtime, no language: python", r.stdout)
        cases = [  # (fields, what prints, what)
            ({"runtime": "bash"}, "echo $BASH_VERSION", "runtime bash by name"),
            ({"language": "bash"}, "echo $BASH_VERSION", "language bash, any version"),
            ({"language": "sh", "version": "5.x"}, "echo $BASH_VERSION", "an alias and 5.x"),
            ({"language": "c++", "version": ">=12 <13"},
             "#include <cstdio>\nint main() { std::puts(\"cpp\"); }", "c++ and a range"),
            ({"language": "py", "version": "3"}, "print('py')", "py and 3"),
        ]
        for fields, code, what in cases:
            st, msg, r = c.run(code, **fields)
            check(st == OK and r.exit_code == 0 and r.stdout, f"{what}: it runs", (st, msg, r))
        refused = [
            ({"runtime": "bash", "language": "bash"}, INVALID_ARGUMENT, "set one of them"),
            ({"version": "5"}, INVALID_ARGUMENT, "version: goes with language"),
            ({"language": "ruby"}, INVALID_ARGUMENT, "ruby-* runtime is unknown; available: "
                                                     "python, bash"),
            ({"language": "bash", "version": "4"}, INVALID_ARGUMENT, "bash-4 runtime is unknown"),
            ({"language": "python", "version": "2.7"}, INVALID_ARGUMENT,
             "python-2.7 runtime is unknown"),
            ({"runtime": "Bash"}, INVALID_ARGUMENT, 'runtime: "Bash" is not supported; '
                                                    "supported: python, bash"),
            ({"runtime": "sh"}, INVALID_ARGUMENT, 'runtime: "sh" is not supported'),
        ]
        for fields, status, needle in refused:
            st, msg, _ = c.run("echo x", **fields)
            check(st == status and needle in msg, f"{fields}: refused, saying {needle!r}",
                  (st, msg))
        check(c.info().runs_total == len(cases) + 1, "the refused calls ran nothing")
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")


def test_runtimes_bash(bin_dir):
    pb = load_pb2(bin_dir)
    s = Server(bin_dir, "--workers", "1")
    c = RunCaller(s, pb, runtime="bash")
    try:
        r = c.ok('echo "args: $*"; read -r line; echo "stdin: $line"; echo "env: $GREETING"\n'
                 'cat mounts/data.csv | wc -l\nls\nid -u\necho "to stderr" >&2\nexit 3\n',
                 args=["a b", "c"], stdin=b"hello\n", env={"GREETING": "hi"},
                 files=[pb.File(path="data.csv", content=b"x,y\n1,2\n3,4\n")])
        out = r.stdout.decode()
        check(out.startswith("args: a b c\nstdin: hello\nenv: hi\n3\nmain.sh\nmounts\noutput\n")
              and r.stderr == b"to stderr\n" and r.exit_code == 3 and r.killed_by == NONE,
              "bash: args, stdin, env, a file, the workspace, stderr, the exit code", r)
        uid = int(out.split("\n")[7])
        check(s.uid_base <= uid < s.uid_base + s.uid_count, "bash runs as the slot's uid", uid)
        r = c.ok("printf 'a,b\\n' > output/table.csv; mkdir -p output/d; echo x > output/d/y.txt")
        check(sorted(a.relative_path for a in r.artifacts) == ["d/y.txt", "table.csv"]
              and any(a.content == b"a,b\n" for a in r.artifacts),
              "bash: files in output/ come back as artifacts", r.artifacts)
        r = c.ok("kill -SEGV $$")
        check(r.killed_by == SIGNAL and r.signal == 11, "bash: a signal is killed_by signal", r)
        r = c.ok("while :; do :; done", limits=pb.Limits(timeout_ms=1000))
        check(r.killed_by == TIMEOUT, "bash: a spin is killed_by timeout", r)
        r = c.ok("a=x; while :; do a=$a$a; done", limits=pb.Limits(memory_bytes=64 << 20))
        check(r.killed_by == MEMORY, "bash: a string doubling past 64 MiB is killed_by memory", r)
        # One FILES session, three runtimes on its workspace.
        r = c.ok("seq 1 5 > nums.txt; echo made", session_id="mix")
        check(r.stdout == b"made\n" and r.session_created, "session: bash writes a file", r)
        r = c.ok("total = sum(int(x) for x in open('nums.txt'))\n"
                 "open('total.txt', 'w').write(str(total))\nprint(total)",
                 runtime="python", session_id="mix")
        check(r.stdout == b"15\n", "session: python reads what bash wrote", r)
        r = c.ok("cat total.txt; echo; ls", session_id="mix")
        check(r.stdout == b"15\nmain.py\nmain.sh\nnums.txt\noutput\ntotal.txt\n"
              and not r.session_created, "session: bash reads what python wrote, both "
              "programs' files are there", r.stdout)
        st, msg, _ = c.run("echo x", session_id="interp", session_mode=2)
        check(st == INVALID_ARGUMENT and "INTERPRETER sessions are Python's" in msg,
              "bash: an INTERPRETER session is refused", (st, msg))
        r = c.ok("python3 -c 'print(6 * 7)'")
        check(r.stdout == b"42\n", "bash runs the tools under /usr/bin (python3)", r)
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")


HELLO_C = '#include <stdio.h>\nint main(int argc, char **argv) { printf("hi %s\\n", argv[1]); }\n'


def test_runtimes_compile(bin_dir):
    pb = load_pb2(bin_dir)
    s = Server(bin_dir, "--workers", "1")
    c = RunCaller(s, pb, runtime="c")
    try:
        r = c.ok(HELLO_C, args=["there"])
        check(r.stdout == b"hi there\n" and r.exit_code == 0 and r.HasField("compile")
              and not r.compile.failed and r.compile.exit_code == 0
              and r.compile.wall_time_ms > 0, "c: compiled, then run with its args", r)
        r = c.ok("int main(void) { return undefined_name; }\n")
        check(r.HasField("compile") and r.compile.failed and r.compile.exit_code == 1
              and b"undefined_name" in r.compile.stderr and r.exit_code == 1
              and r.killed_by == NONE and r.stdout == b"" and r.stderr == b""
              and any("compile stage failed" in f and "compile.stderr" in f for f in r.feedback),
              "c: a compile error: compile.failed, the compiler's exit and stderr, the run's "
              "exit is the compiler's, nothing ran", r)
        # Constant evaluation that takes g++ minutes in little memory.
        r = c.ok("constexpr long f() { long s = 0; for (int j = 0; j < 200000; j++)\n"
                 "  for (int i = 0; i < 200000; i++) s += i; return s; }\n"
                 "static_assert(f() > 0);\nint main() {}\n", runtime="cpp",
                 compile_limits=pb.Limits(timeout_ms=1000))
        check(r.compile.failed and r.compile.killed_by == TIMEOUT and r.killed_by == TIMEOUT
              and r.compile.wall_time_ms < 5000
              and any("compile stage was killed" in f for f in r.feedback)
              and any("the compiler was killed (compile_limits.timeout_ms)" in f
                      for f in r.feedback),
              "cpp: a compiler past compile_limits.timeout_ms 1000 is killed_by timeout", r)
        r = c.ok('#include "/dev/zero"\n', compile_limits=pb.Limits(memory_bytes=64 << 20))
        check(r.compile.failed and r.compile.killed_by == MEMORY and r.killed_by == MEMORY,
              "c: a compiler past compile_limits.memory_bytes 64 MiB is killed_by memory", r)
        for fields, needle in [
            ({"compile_limits": pb.Limits(timeout_ms=10 ** 9)}, "compile_limits.timeout_ms"),
            ({"compile_limits": pb.Limits(disk_bytes=1 << 20)}, "compile_limits.disk_bytes"),
            ({"runtime": "bash", "compile_limits": pb.Limits(timeout_ms=1000)},
             "compile_limits: runtime bash has no compile stage"),
        ]:
            st, msg, _ = c.run(HELLO_C, **fields)
            check(st == INVALID_ARGUMENT and needle in msg, f"refused: {needle}", (st, msg))
        r = c.ok("int main(void) { int *p = 0; return *p; }")
        check(r.killed_by == SIGNAL and r.signal == 11, "c: a null dereference is signal", r)
        r = c.ok("#include <stdlib.h>\n#include <string.h>\n"
                 "int main(void) { for (;;) memset(malloc(1 << 20), 1, 1 << 20); }")
        check(r.killed_by == MEMORY and not r.compile.failed,
              "c: a malloc bomb is memory, the compile stage's larger cap not the program's", r)
        r = c.ok("int main(void) { for (;;); }", limits=pb.Limits(timeout_ms=1000))
        check(r.killed_by == TIMEOUT, "c: a spin is timeout", r)
        r = c.ok(HELLO_C, args=["session"], session_id="build")
        r2 = c.ok("./a.out again", runtime="bash", session_id="build")
        check(r.stdout == b"hi session\n" and r2.stdout == b"hi again\n",
              "c: a.out stays in the session's workspace for the next run", (r, r2))
        r = c.ok("#include <iostream>\n#include <map>\nint main() { std::map<int, int> m{{6, 7}};"
                 " std::cout << m[6] * 6 << std::endl; }", runtime="cpp")
        check(r.stdout == b"42\n" and not r.compile.failed, "cpp: compiled and run", r)
        r = c.ok("int main() { std::cout << 1; }", runtime="cpp")
        check(r.compile.failed and b"cout" in r.compile.stderr, "cpp: a compile error", r)
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")


LUA = {
    "name": "lua", "language": "lua", "aliases": ["lua5.4"],
    "version": {"command": ["/usr/bin/lua5.4", "-v"], "pattern": r"Lua ([0-9]+\.[0-9]+\.[0-9]+)"},
    "file": "main.lua", "run": ["/usr/bin/lua5.4", "main.lua"],
    "self_test": {"code": "print('OK ' .. 6 * 7)", "stdout": "OK 42\n"},
}


def runtimes_dir(manifests):
    d = tempfile.mkdtemp(prefix="sbx-runtimes-")
    for name, m in manifests.items():
        with open(os.path.join(d, name + ".json"), "w") as f:
            f.write(m if isinstance(m, str) else json.dumps(m))
    return d


def start_fails(bin_dir, *flags):
    """(exit status, stderr) of a start that must fail."""
    tmp = tempfile.mkdtemp(prefix="sbx-rt-")
    try:
        p = subprocess.run([f"{bin_dir}/sandboxd", "--listen", "ipc://" + tmp + "/s",
                            "--state-dir", tmp + "/state", "--uid-base", str(allocate_uids()),
                            *flags], capture_output=True, text=True, timeout=30)
        return p.returncode, p.stderr
    except subprocess.TimeoutExpired:
        return None, "it started (killed after 30 s)"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_runtimes_manifests(bin_dir):
    pb = load_pb2(bin_dir)
    lua_version = binary_version(["/usr/bin/lua5.4", "-v"], r"Lua (\d+\.\d+\.\d+)")
    if not check(lua_version, "lua5.4 is installed (scripts/install-deps)"):
        return
    broken = dict(LUA, name="lua-broken", aliases=[], self_test={"code": "print('no')",
                                                                 "stdout": "OK\n"})
    missing = dict(LUA, name="ruby", language="ruby", aliases=[],
                   version={"command": ["/usr/bin/ruby-none", "-v"], "pattern": "ruby ([0-9.]+)"})
    short = dict(LUA, name="lua-short", aliases=[],
                 version={"command": ["/usr/bin/lua5.4", "-v"], "pattern": r"Lua ([0-9]+\.[0-9]+)"})
    wordy = dict(LUA, name="lua-wordy", aliases=[],
                 version={"command": ["/usr/bin/lua5.4", "-v"], "pattern": r"(Lua) "})
    # A runtime whose library is outside /usr: a directory of /opt bound
    # read-only at the same path (mounts).
    opt = tempfile.mkdtemp(prefix="sbx-rt-", dir="/opt")
    os.chmod(opt, 0o755)
    with open(os.path.join(opt, "greet.lua"), "w") as f:
        f.write("return function(who) return 'OK ' .. who end\n")
    os.chmod(os.path.join(opt, "greet.lua"), 0o644)
    with_lib = dict(LUA, name="lua-lib", aliases=[], mounts=[opt],
                    run=["/usr/bin/lua5.4", "-e", f"package.path = '{opt}/?.lua;' .. package.path",
                         "main.lua"],
                    self_test={"code": "print(require('greet')('42'))", "stdout": "OK 42\n"})
    d = runtimes_dir({"lua": LUA, "lua-broken": broken, "ruby": missing, "lua-short": short,
                      "lua-wordy": wordy, "lua-lib": with_lib})
    s = Server(bin_dir, "--workers", "1", "--runtimes-dir", d)
    c = RunCaller(s, pb, runtime="lua")
    try:
        infos = {r.name: r for r in c.info().runtime_info}
        check(sorted(infos) == ["lua", "lua-broken", "lua-lib", "lua-short", "lua-wordy", "python",
                                "ruby"],
              "--runtimes-dir: its manifests only (not the shipped ones)", list(infos))
        lua = infos.get("lua")
        check(lua is not None and lua.available and lua.version == lua_version
              and list(lua.aliases) == ["lua5.4"] and lua.file == "main.lua",
              f"lua: listed at {lua_version}, its alias and file", lua)
        r = c.ok("local t = {}\nfor w in io.read('a'):gmatch('%S+') do t[#t + 1] = w end\n"
                 "print(#t, arg[1])", stdin=b"one two three", args=["x"])
        check(r.stdout == b"3\tx\n", "lua: a program with stdin and args", r)
        st, msg, r = c.run("print(_VERSION)", runtime="", language="lua5.4", version="5.4.x")
        check(st == OK and r.stdout == b"Lua 5.4\n", "lua by its alias and a range", (st, msg, r))
        b = infos.get("lua-broken")
        check(b is not None and not b.available and "self-test" in b.unavailable_reason
              and "no" in b.unavailable_reason,
              "a failing self-test: listed unavailable, with what it printed", b)
        st, msg, _ = c.run("print(1)", runtime="lua-broken")
        check(st == FAILED_PRECONDITION and "runtime lua-broken is unavailable" in msg
              and "self-test" in msg, "its runs: FAILED_PRECONDITION with the reason", (st, msg))
        r = c.ok(f"print(require('greet')('from /opt'))\n"
                 f"print(io.open('{opt}/new', 'w'))", runtime="lua-lib")
        check(infos["lua-lib"].available and r.stdout.startswith(b"OK from /opt\nnil\t")
              and b"Read-only file system" in r.stdout,
              "mounts: a directory of /opt is there, read-only (its self-test passed)", r)
        major_minor = ".".join(lua_version.split(".")[:2]) + ".0"
        check(infos.get("lua-short") and infos["lua-short"].version == major_minor
              and infos["lua-short"].available,
              f"a version of two numbers is made MAJOR.MINOR.0 ({major_minor})",
              infos.get("lua-short"))
        w = infos.get("lua-wordy")
        check(w is not None and not w.available
              and "printed no MAJOR[.MINOR[.PATCH]] that version.pattern finds" in
              w.unavailable_reason, "a version that is not numbers: unavailable, saying so", w)
        ruby = infos.get("ruby")
        check(ruby is not None and not ruby.available and "ruby-none" in ruby.unavailable_reason,
              "a program that does not exist: unavailable, naming it", ruby)
        check("event=runtime_unavailable name=lua-broken" in s.log_text()
              and "event=runtime_unavailable name=ruby" in s.log_text(),
              "the log says which runtimes are unavailable")
        r = c.ok("print('still')", runtime="python")
        check(r.stdout == b"still\n", "the other runtimes serve", r)
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")
        shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(opt, ignore_errors=True)
    bad = [
        ({"x.json": dict(LUA, shell=True)}, 'unknown key "shell" in the manifest'),
        ({"a.json": LUA, "b.json": dict(LUA, name="lua2")},
         "runtime lua2: its name or an alias is taken by runtime lua of "),
        ({"a.json": LUA, "b.json": dict(LUA, name="lua", language="moon", aliases=[])},
         "runtime lua: its name or an alias is taken by runtime lua of "),
        ({"p.json": dict(LUA, name="py", aliases=[])}, "taken by runtime python (built in)"),
        ({"r.json": dict(LUA, run=["lua5.4", "main.lua"])}, "run[0] (\"lua5.4\") must be an "
                                                          "absolute"),
        ({"m.json": dict(LUA, mounts=["/etc/alternatives"])},
         "mounts[0] must be a normalised absolute path below /opt"),
        ({"l.json": dict(LUA, limits={"memory_bytes": 1 << 30})}, "says why (limits.why)"),
        ({"j.json": "{not json"}, "line 1"),
    ]
    for files, needle in bad:
        d = runtimes_dir({k[:-5]: v for k, v in files.items()})
        try:
            rc, err = start_fails(bin_dir, "--runtimes-dir", d)
            check(rc == 2 and needle in err and d in err,
                  f"a bad manifest stops the start (exit 2) naming the file: {needle}", (rc, err))
        finally:
            shutil.rmtree(d, ignore_errors=True)
    rc, err = start_fails(bin_dir, "--runtimes-dir", "/nonexistent/runtimes")
    check(rc == 2 and "runtimes directory /nonexistent/runtimes" in err,
          "--runtimes-dir that does not exist stops the start", (rc, err))
