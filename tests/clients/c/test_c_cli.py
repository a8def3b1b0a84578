"""sandbox-run and sandbox-mcp as a user meets them (issue 24, "what a new
user tripped over"): the connect timeout's default is the one
docs/CLIENTS.md gives every client, and the error names it; request ids of
separate processes differ. One server for the module."""
import json
import os
import re
import socket
import subprocess

import pytest

from conftest import BIN_DIR, REPO
from lib.harness import Server

RUN = f"{BIN_DIR}/sandbox-run"
MCP = f"{BIN_DIR}/sandbox-mcp"


def closed_port():
    """A port of 127.0.0.1 nothing listens on: every dial is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def documented_connect_timeout_ms(client):
    """The default of the docs' connect timeout table for client's row."""
    with open(os.path.join(REPO, "docs", "CLIENTS.md")) as f:
        doc = f.read()
    m = re.search(rf"^\| {re.escape(client)} \| [^|]+ \| (\d+) (ms|s)\b", doc, re.M)
    assert m, f"docs/CLIENTS.md has no connect timeout row for {client}"
    return int(m.group(1)) * (1000 if m.group(2) == "s" else 1)


def test_sandbox_run_connect_timeout_default_is_documented(tmp_path):
    ms = documented_connect_timeout_ms("`sandbox-run`, `sandbox-bench`, `sandbox-mcp`")
    script = tmp_path / "a.py"
    script.write_text("print(1)\n")
    p = subprocess.run([RUN, "-e", f"tcp://127.0.0.1:{closed_port()}", str(script)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 125, p
    assert f"UNAVAILABLE: no endpoint connected within {ms} ms" in p.stderr, p.stderr
    assert "nothing was sent" in p.stderr
    assert "(default %d)" % ms in subprocess.run([RUN, "--help"], capture_output=True,
                                                 text=True).stdout


def test_sandbox_mcp_connect_timeout_default_is_documented():
    ms = documented_connect_timeout_ms("`sandbox-run`, `sandbox-bench`, `sandbox-mcp`")
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "run_code", "arguments": {"code": "print(1)"}}}
    p = subprocess.run([MCP, "--endpoint", f"tcp://127.0.0.1:{closed_port()}"],
                       input=json.dumps(call) + "\n", capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p
    result = json.loads(p.stdout)["result"]
    assert result["isError"] is True
    assert f"no endpoint connected within {ms} ms" in result["content"][0]["text"], result
    assert "(default %d)" % ms in subprocess.run([MCP, "--help"], capture_output=True,
                                                 text=True).stdout


@pytest.fixture(scope="module")
def server():
    s = Server(BIN_DIR, "--workers", "2")
    try:
        yield s
    finally:
        s.stop()


def test_request_ids_differ_between_processes(server, tmp_path):
    """Each process numbers its calls from 1; started in the same second,
    they once all sent '<time in hex>-1' (6b0863fc-1 on three runs)."""
    script = tmp_path / "a.py"
    script.write_text("print(1)\n")
    procs = [subprocess.Popen([RUN, "-e", server.tcp, "--run-id", f"rid-{i}", str(script)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(4)]
    for p in procs:
        assert p.wait(timeout=60) == 0, p.stderr.read()
    ids = dict(re.findall(r'event=run run_id=(rid-\d) tenant=\S+ request_id="([^"]*)"', server.log_text()))
    assert len(ids) == 4, server.log_text()[-2000:]
    assert len(set(ids.values())) == 4, ids
    for rid in ids.values():
        assert re.fullmatch(r"[0-9a-f]{16}-1", rid), rid


def run_plain(server, tmp_path, code, *flags, **kw):
    script = tmp_path / f"s{abs(hash(code))}.py"
    script.write_text(code)
    return subprocess.run([RUN, "-e", server.tcp, *flags, str(script)], capture_output=True,
                          timeout=60, **kw)


def test_plain_mode_prints_the_servers_hints_on_stderr(server, tmp_path):
    """The response's feedback ("add 'requests' to requirements") is on
    stderr after the program's own, as --json has it in "feedback"."""
    p = run_plain(server, tmp_path, "import requests\n")
    assert p.returncode == 1, p
    err = p.stderr.decode()
    assert "ModuleNotFoundError" in err, err
    hint = "sandbox-run: add 'requests' to requirements"
    assert hint in err and err.index(hint) > err.index("ModuleNotFoundError"), err
    p = run_plain(server, tmp_path, "import requests\n", "--json")
    assert any(f.startswith("add 'requests' to requirements")
               for f in json.loads(p.stdout)["feedback"]), p.stdout
    p = run_plain(server, tmp_path, "print('hi')\n")
    assert (p.returncode, p.stdout, p.stderr) == (0, b"hi\n", b""), p
    p = run_plain(server, tmp_path, "import time\ntime.sleep(10)\n", "--timeout-ms", "300")
    assert p.returncode == 124
    assert p.stderr.decode().startswith("sandbox-run: killed (timeout): "), p.stderr


# A program's terminal escape sequences: a window title (OSC 0), a screen
# clear, a C1 CSI (U+009B), a byte that is not UTF-8, a carriage return;
# then text that must pass as it is (a tab, UTF-8). Its stderr: a colour.
ESCAPES = r"""
import sys
out = sys.stdout.buffer
out.write(b"\x1b]0;pwned\x07title\n\x1b[2Jtab\there\n\xc3\xa9 \xe2\x9c\x93\n\xc2\x9b\xff\r\n")
out.flush()
sys.stderr.buffer.write(b"\x1b[31mred\x1b[0m\n")
"""
RAW_OUT = (b"\x1b]0;pwned\x07title\n\x1b[2Jtab\there\n\xc3\xa9 \xe2\x9c\x93\n"
           b"\xc2\x9b\xff\r\n")
RAW_ERR = b"\x1b[31mred\x1b[0m\n"
# As cat -v shows them; \n and \t, and valid UTF-8 text, as they are.
VISIBLE_OUT = "^[]0;pwned^Gtitle\n^[[2Jtab\there\né ✓\nM-^[M-^?^M\n".encode()
VISIBLE_ERR = b"^[[31mred^[[0m\n"


def run_on_ptys(server, tmp_path, code, *flags):
    """sandbox-run with stdout and stderr each on a pty of its own (raw: no
    \\n to \\r\\n); what each terminal received."""
    import pty
    import select
    import tty
    script = tmp_path / "esc.py"
    script.write_text(code)
    masters, slaves = zip(*(pty.openpty() for _ in range(2)))
    for s in slaves:
        tty.setraw(s)
    p = subprocess.Popen([RUN, "-e", server.tcp, *flags, str(script)], stdin=subprocess.DEVNULL,
                         stdout=slaves[0], stderr=slaves[1])
    for s in slaves:
        os.close(s)
    got = {m: b"" for m in masters}
    open_fds = set(masters)
    while open_fds:
        ready, _, _ = select.select(list(open_fds), [], [], 60)
        assert ready, "sandbox-run wrote nothing for 60 s"
        for m in ready:
            try:
                chunk = os.read(m, 65536)
            except OSError:  # EIO: the other side is closed
                chunk = b""
            if chunk:
                got[m] += chunk
            else:
                open_fds.discard(m)
                os.close(m)
    assert p.wait(timeout=60) == 0
    return got[masters[0]], got[masters[1]]


@pytest.mark.parametrize("mode", [[], ["--stream"]], ids=["plain", "stream"])
def test_terminal_gets_control_characters_visible(server, tmp_path, mode):
    out, err = run_on_ptys(server, tmp_path, ESCAPES, *mode)
    assert out == VISIBLE_OUT, out
    assert err == VISIBLE_ERR, err
    out, err = run_on_ptys(server, tmp_path, ESCAPES, *mode, "--raw")
    assert (out, err) == (RAW_OUT, RAW_ERR)


@pytest.mark.parametrize("mode", [[], ["--stream"]], ids=["plain", "stream"])
def test_pipe_gets_the_bytes_unchanged(server, tmp_path, mode):
    p = run_plain(server, tmp_path, ESCAPES, *mode)
    assert (p.returncode, p.stdout, p.stderr) == (0, RAW_OUT, RAW_ERR), p


def run_script(server, tmp_path, name, code, *flags):
    script = tmp_path / name
    script.write_text(code)
    return subprocess.run([RUN, "-e", server.tcp, *flags, str(script)], capture_output=True,
                          text=True, timeout=60)


def test_language_and_version_pick_the_runtime(server, tmp_path):
    """--language (a language, name or alias) and --version (a node-semver
    range) as Piston takes them; the runtime "python" the request starts
    with is cleared, else the server refuses both."""
    code = 'echo "bash $BASH_VERSION"\n'
    p = run_script(server, tmp_path, "a.sh", code, "--language", "sh")
    assert (p.returncode, p.stderr) == (0, ""), p
    assert p.stdout.startswith("bash 5."), p
    p = run_script(server, tmp_path, "a.sh", code, "--language", "bash", "--version", ">=5 <6",
                   "--json")
    assert p.returncode == 0, p
    assert json.loads(p.stdout)["stdout"].startswith("bash 5."), p.stdout
    assert "compile" not in json.loads(p.stdout)  # bash has no compile stage
    p = run_script(server, tmp_path, "a.sh", code, "--language", "bash", "--version", "^99")
    assert p.returncode == 125, p
    assert "INVALID_ARGUMENT" in p.stderr and "bash" in p.stderr, p.stderr
    p = run_script(server, tmp_path, "a.sh", code, "--language", "cobol", "--json")
    assert p.returncode == 125, p
    out = json.loads(p.stdout)
    assert out["status"] == "INVALID_ARGUMENT", out
    assert "cobol" in out["error"] and "available: python, bash" in out["error"], out
    p = run_script(server, tmp_path, "b.py", "import sys; print(sys.version_info[0])\n",
                   "--language", "py", "--version", "3.x")
    assert (p.returncode, p.stdout) == (0, "3\n"), p
    p = run_script(server, tmp_path, "a.sh", code, "--runtime", "bash")
    assert p.returncode == 0 and p.stdout.startswith("bash 5."), p


def test_runtime_with_language_or_version_alone_is_a_usage_error(server, tmp_path):
    for flags, said in ((["--runtime", "bash", "--language", "bash"],
                         "--runtime and --language: give one of them"),
                        (["--language", "bash", "--runtime", "bash"],
                         "--runtime and --language: give one of them"),
                        (["--version", "5"], "--version needs --language")):
        p = run_script(server, tmp_path, "a.sh", "echo hi\n", *flags)
        assert p.returncode == 2, (flags, p)
        assert p.stderr.startswith(f"sandbox-run: {said}\n"), (flags, p.stderr)
        assert p.stdout == "", p
    assert "--runtime with --language, or --version alone, is a usage" in subprocess.run(
        [RUN, "--help"], capture_output=True, text=True).stdout


def test_info_lists_runtime_info(server):
    p = subprocess.run([RUN, "-e", server.tcp, "--info", "--json"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p
    info = {r["name"]: r for r in json.loads(p.stdout)["runtime_info"]}
    assert info["bash"]["language"] == "bash" and "sh" in info["bash"]["aliases"], info
    assert info["bash"]["available"] is True and info["bash"]["file"] == "main.sh", info
    assert re.fullmatch(r"\d+\.\d+\.\d+", info["bash"]["version"]), info
    assert info["python"]["language"] == "python" and info["python"]["compiled"] is False, info


def test_compile_stage_in_json_and_a_failed_compile_on_stderr(server, tmp_path):
    """c and c++: --json has "compile" beside the run; a failed compile ran
    nothing, and plain mode shows the compiler's output then the hint."""
    p = run_script(server, tmp_path, "a.c",
                   '#include <stdio.h>\nint main(void) { puts("hi c"); return 0; }\n',
                   "--language", "c", "--json")
    assert p.returncode == 0, p
    out = json.loads(p.stdout)
    assert out["stdout"] == "hi c\n", out
    k = out["compile"]
    assert (k["failed"], k["exit_code"], k["killed_by"], k["stderr"]) == (False, 0, "none", ""), k
    assert set(k) == {"stdout", "stderr", "stdout_truncated", "stderr_truncated", "killed_by",
                      "exit_code", "signal", "wall_time_ms", "cpu_time_ms", "peak_memory_bytes",
                      "failed"}, k
    bad = "int main(void) { return nope; }\n"
    p = run_script(server, tmp_path, "b.cpp", bad, "--language", "c++", "--json")
    out = json.loads(p.stdout)
    assert p.returncode == out["exit_code"] == out["compile"]["exit_code"] != 0, p
    assert out["compile"]["failed"] is True and "nope" in out["compile"]["stderr"], out
    assert out["stdout"] == out["stderr"] == "", out
    p = run_script(server, tmp_path, "b.c", bad, "--language", "c")
    assert p.returncode != 0 and p.stdout == "", p
    assert "error:" in p.stderr and "nope" in p.stderr, p.stderr
    assert p.stderr.index("nope") < p.stderr.index("sandbox-run: the compile stage failed"), p.stderr
