"""Every method of the Python client against a real sandboxd, through the
blocking Client and the AsyncClient, over tcp and ipc."""
import asyncio
import os

import pytest

import sandboxd
from conftest import runs_of


@pytest.fixture(scope="module")
def srv(module_servers):
    return module_servers.start("--workers", "2")


@pytest.fixture(scope="module")
def client(srv):
    with sandboxd.Client(srv.tcp) as c:
        yield c


def test_run_code_passes_everything_through(srv, client):
    code = ("import sys, os\n"
            "print(sys.stdin.read(), sys.argv[1:], open('mounts/sub/d.txt').read(),\n"
            "      open('mounts/t.txt').read(), os.environ['GREETING'])\n"
            "sys.stderr.buffer.write(b'\\xff err')\n"
            "sys.exit(3)\n")
    r = client.run_code(code, stdin=b"in-data", args=["a b", "c"],
                        files={"sub/d.txt": b"file-content", "t.txt": "text"},
                        env={"GREETING": "hi"}, limits=sandboxd.Limits(timeout_ms=10000),
                        run_id="py-methods-1")
    assert r.stdout == b"in-data ['a b', 'c'] file-content text hi\n"
    assert r.stderr == b"\xff err" and r.stderr_text == "\ufffd err"
    assert (r.exit_code, r.signal, r.killed_by, r.ok) == (3, 0, "none", False)
    assert r.run_id == "py-methods-1" and r.endpoint == srv.tcp and r.attempts == 1
    assert r.wall_time_ms > 0 and r.peak_memory_bytes > 0 and r.session_id == ""
    assert runs_of(srv, "py-methods-1") == 1


def test_run_code_makes_a_run_id_when_none_is_given(srv, client):
    r = client.run_code('print("hello")')
    assert r.ok and r.stdout_text == "hello\n" and len(r.run_id) == 36
    assert runs_of(srv, r.run_id) == 1


@pytest.mark.parametrize("name,code,limits", [
    ("timeout", "while True: pass\n", {"timeout_ms": 1000}),
    ("memory", "x = bytearray(512 << 20)\n", {"memory_bytes": 64 << 20}),
    ("output_limit", "import sys\nwhile True: sys.stdout.write('x' * 65536)\n",
     {"output_bytes": 16384}),
    ("signal", "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", None),
])
def test_killed_by(client, name, code, limits):
    r = client.run_code(code, limits=limits)
    assert r.killed_by == name, r
    if name == "signal":
        assert r.signal == 11
    if name == "output_limit":
        assert r.stdout_truncated and len(r.stdout) <= 16384


def test_artifacts_come_back_and_are_saved(client, tmp_path):
    r = client.run_code("import os\nos.makedirs('output/sub/deeper')\n"
                        "open('output/top.txt', 'w').write('top')\n"
                        "open('output/sub/deeper/data.json', 'w').write('{}')\n"
                        "open('output/big.bin', 'wb').write(b'B' * (2 << 20))\n"
                        "os.symlink('/etc/passwd', 'output/passwd')\n")
    arts = {a.relative_path: a for a in r.artifacts}
    assert set(arts) == {"top.txt", "sub/deeper/data.json", "big.bin"}
    assert arts["sub/deeper/data.json"].mime == "application/json"
    assert arts["big.bin"].content_omitted and arts["big.bin"].size == 2 << 20
    saved = r.save_artifacts(tmp_path / "arts")
    assert sorted(os.path.relpath(p, tmp_path / "arts") for p in saved) == [
        "sub/deeper/data.json", "top.txt"]
    assert (tmp_path / "arts" / "top.txt").read_bytes() == b"top"


def test_sessions_files_and_close(srv, client):
    r = client.run_code("open('notes.txt', 'w').write('kept')\nos = __import__('os')\n"
                        "os.makedirs('output', exist_ok=True)\n", session_id="py-s1")
    assert r.session_created and r.session_id == "py-s1"
    assert any("is new" in f for f in r.feedback)
    r = client.run_code("print(open('notes.txt').read())\n", session_id="py-s1")
    assert r.stdout == b"kept\n" and not r.session_created
    listing = client.list_files("py-s1")
    entries = {e.name: e for e in listing}
    assert entries["notes.txt"].type == "file" and entries["notes.txt"].size == 4
    assert entries["output"].type == "directory" and not listing.truncated
    assert client.list_files("py-s1", "output").entries == ()
    part = client.read_file("py-s1", "notes.txt", offset=1, length=2)
    assert (part.content, part.size, part.eof) == (b"ep", 4, False)
    whole = client.read_file("py-s1", "notes.txt")
    assert (whole.content, whole.eof) == (b"kept", True)
    assert client.close_session("py-s1") is None
    with pytest.raises(sandboxd.NotFound):
        client.read_file("py-s1", "notes.txt")


def test_health_and_info(srv, client):
    h = client.health()
    assert h.serving and h.status == "SERVING" and h.endpoint == srv.tcp
    info = client.info()
    assert info.workers == 2 and info.runtimes[0] == "python"
    assert info.isolation.backend and info.isolation.namespaces and info.isolation.uid_base == srv.uid_base
    assert info.default_limits.timeout_ms == 5000 and info.max_limits.timeout_ms == 60000
    assert info.max_message_bytes == 8 << 20 and info.runs_total >= 1
    # A server without --zygote: GetInfo's zygote fields, as the client gives them.
    assert info.zygote_enabled is False and info.zygotes == 0 and info.zygote_forks_total == 0
    assert isinstance(info.zygote_preload, tuple) and info.zygote_max_forks == 1000
    # The runtime reaches the server, which refuses python-zygote without --zygote.
    with pytest.raises(sandboxd.InvalidArgument, match="python-zygote needs a server started"):
        client.run_code('print("x")', runtime="python-zygote")


def test_language_and_version_pick_the_runtime(srv, client):
    """language= and version= as Piston takes them (runtime sent as "");
    the server picks the runtime and names what it refuses."""
    r = client.run_code('echo "bash $BASH_VERSION"', language="sh", version=">=5 <6")
    assert r.ok and r.stdout.startswith(b"bash 5."), r
    assert r.compile is None  # bash has no compile stage
    r = client.run_code("import sys; print(sys.version_info[0])", language="py", version="3.x")
    assert r.stdout == b"3\n"
    assert client.run_code('echo "$0"', runtime="bash").ok
    with pytest.raises(sandboxd.InvalidArgument, match="cobol.* runtime is unknown; available: python, bash"):
        client.run_code("x", language="cobol")
    with pytest.raises(sandboxd.InvalidArgument, match="bash"):
        client.run_code("x", language="bash", version="^99")
    with pytest.raises(sandboxd.InvalidArgument, match="runtime and language"):
        client.run_code("x", runtime="bash", language="bash")
    with pytest.raises(TypeError, match="language: a str"):
        client.run_code("x", language=3)


def test_info_lists_runtime_info(client):
    info = {r.name: r for r in client.info().runtime_info}
    assert {"python", "bash", "c", "cpp"} <= set(info), info
    bash = info["bash"]
    assert isinstance(bash, sandboxd.RuntimeInfo)
    assert (bash.language, bash.available, bash.unavailable_reason, bash.compiled, bash.file) == \
        ("bash", True, "", False, "main.sh"), bash
    assert "sh" in bash.aliases and bash.version.startswith("5."), bash
    assert info["python"].aliases[0] == "py" and info["python"].file == "main.py", info
    assert info["cpp"].language == "c++" and info["cpp"].compiled is True, info


def test_compile_stage_of_a_compiled_runtime(client):
    """c: the compile stage comes back beside the run; a failed compile runs
    nothing and its output is in compile; compile_limits reach it."""
    r = client.run_code('#include <stdio.h>\nint main(void) { puts("hi c"); return 0; }\n',
                        language="c")
    assert r.ok and r.stdout == b"hi c\n", r
    assert isinstance(r.compile, sandboxd.CompileResult)
    assert (r.compile.failed, r.compile.exit_code, r.compile.killed_by) == (False, 0, "none")
    assert r.compile.wall_time_ms > 0
    r = client.run_code("int main(void) { return nope; }\n", language="c++", version="*")
    assert r.compile.failed and r.compile.exit_code != 0, r.compile
    assert b"nope" in r.compile.stderr and r.stdout == b"" and r.stderr == b"", r
    assert r.exit_code == r.compile.exit_code and not r.ok
    # gcc needs tens of ms of CPU: 1 ms kills the compile, nothing runs.
    r = client.run_code("int main(void) { return 0; }\n", language="c",
                        compile_limits={"cpu_time_ms": 1})
    assert (r.compile.failed, r.compile.killed_by, r.ok) == (True, "timeout", False), r.compile
    with pytest.raises(sandboxd.InvalidArgument, match="compile"):
        client.run_code('echo x', language="bash", compile_limits={"timeout_ms": 1000})


def test_ipc_endpoint(srv):
    with sandboxd.Client(srv.ipc) as c:
        r = c.run_code('print("over ipc")')
        assert r.stdout == b"over ipc\n" and r.endpoint == srv.ipc


def test_async_client_has_every_method(srv):
    async def main():
        async with sandboxd.AsyncClient(srv.tcp) as c:
            r = await c.run_code("import sys\nprint(sys.argv[1], sys.stdin.read())\n",
                                 args=["x"], stdin="in", session_id="py-as1",
                                 run_id="py-async-1", limits={"timeout_ms": 5000})
            assert r.stdout == b"x in\n" and r.session_created and r.run_id == "py-async-1"
            assert (await c.health()).serving
            assert (await c.info()).workers == 2
            r = await c.run_code("echo async", language="bash")
            assert r.stdout == b"async\n"
            assert [e.name for e in await c.list_files("py-as1")] == ["main.py", "output"]
            content = await c.read_file("py-as1", "main.py", length=6)
            assert content.content == b"import" and not content.eof
            await c.close_session("py-as1")
            with pytest.raises(sandboxd.NotFound):
                await c.close_session("py-as1")
    asyncio.run(main())
    assert runs_of(srv, "py-async-1") == 1
