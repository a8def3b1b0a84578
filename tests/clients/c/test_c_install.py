"""The C client as a user installs it (issue 29): `cmake --install BUILD
--prefix P` into a fresh temporary prefix, then a small program
(installed_hello.c) compiled from a directory outside the repository with
only `pkg-config --cflags --libs sandbox-client` (PKG_CONFIG_PATH=P's
pkgconfig) and run with LD_LIBRARY_PATH=P's libdir against a real sandboxd:
a hello world, and a request the server refuses (INVALID_ARGUMENT with its
message). The program reports the file it loaded libsandbox-client from,
which must be under P and never the build tree. The installed pkg-config
version is the server's --version (one version: the top CMakeLists.txt).
SANDBOXD_BUILD_DIR (ctest's environment) names the build to install;
SANDBOXD_SANITIZE=ON (a scripts/test-sanitize build) compiles the program
with the sanitizers too, as a library built with ASan needs its runtime
loaded first."""
import os
import shutil
import subprocess

from conftest import BIN_DIR, REPO
from lib.harness import Server

BUILD_DIR = os.environ.get("SANDBOXD_BUILD_DIR", os.path.join(REPO, "build"))
SANITIZE = ["-fsanitize=address,undefined"] if os.environ.get("SANDBOXD_SANITIZE") == "ON" else []
HELLO_C = os.path.join(os.path.dirname(os.path.abspath(__file__)), "installed_hello.c")


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)
    assert p.returncode == 0, f"{cmd}: rc={p.returncode}\n{p.stdout[-2000:]}{p.stderr[-2000:]}"
    return p.stdout


def test_installed_library_headers_pkgconfig_and_clis(tmp_path):
    prefix = tmp_path / "prefix"
    run(["cmake", "--install", BUILD_DIR, "--prefix", str(prefix)])
    pcs = sorted(prefix.rglob("pkgconfig/sandbox-client.pc"))
    assert len(pcs) == 1, f"one sandbox-client.pc below the prefix: {pcs}"
    assert (prefix / "include" / "sandbox_client.h").is_file()
    for cli in ("sandbox-run", "sandbox-bench", "sandbox-mcp"):
        assert os.access(prefix / "bin" / cli, os.X_OK), f"{cli} not installed"
    assert os.access(prefix / "sbin" / "sandboxd", os.X_OK), "sandboxd not installed"

    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "CPATH",
                                                             "LIBRARY_PATH", "PKG_CONFIG_PATH")}
    env["PKG_CONFIG_PATH"] = str(pcs[0].parent)
    pkg = ["pkg-config", "sandbox-client"]
    libdir = run([*pkg, "--variable=libdir"], env=env).strip()
    assert os.path.realpath(libdir).startswith(str(prefix)), f"libdir {libdir} is not under P"
    assert (os.path.isfile(os.path.join(libdir, "libsandbox-client.so.0")))
    flags = run([*pkg, "--cflags", "--libs"], env=env).split()
    assert not any(BUILD_DIR in f or REPO in f for f in flags), f"flags name the tree: {flags}"
    version = run([*pkg, "--modversion"], env=env).strip()
    server_version = run([os.path.join(BIN_DIR, "sandboxd"), "--version"]).split()[-1]
    assert version == server_version, f"pkg-config {version}, sandboxd --version {server_version}"
    installed_server = run([str(prefix / "sbin" / "sandboxd"), "--version"]).split()[-1]
    assert installed_server == version

    work = tmp_path / "user"  # the user's own directory, outside the repository
    work.mkdir()
    shutil.copy(HELLO_C, work / "hello.c")
    run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", *SANITIZE, "-o", "hello", "hello.c",
         *flags],
        cwd=work, env=env)

    s = Server(BIN_DIR, "--workers", "1")
    try:
        out = run([str(work / "hello"), s.tcp], cwd=work,
                  env=dict(env, LD_LIBRARY_PATH=libdir)).splitlines()
    finally:
        s.stop()
    loaded = out[0].removeprefix("library ")
    assert os.path.realpath(loaded) == os.path.realpath(os.path.join(libdir,
                                                                     "libsandbox-client.so.0")), out
    assert out[1] == "hello OK none hello from the installed library", out
    assert out[2].startswith("refused INVALID_ARGUMENT runtime: \"no-such-runtime\" is not "
                             "supported"), out
