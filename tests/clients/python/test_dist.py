"""The Python client's release artifacts as a user installs them (issue 29):
the wheel and, separately, the sdist that the build puts in build/dist/
(client/python/make_dist.py) are each pip-installed, offline, into a fresh
venv that sees Debian's python3-protobuf (PyPI is not reachable), and used
from a clean temporary directory outside the repository: the package is the
venv's, carries py.typed, its __version__ and metadata version are the
server's --version (one version: the top CMakeLists.txt), and a hello world
runs on a real sandboxd. SANDBOXD_DIST_DIR (ctest's environment) names
build/dist."""
import os
import subprocess
import textwrap

import pytest

from conftest import BIN_DIR, REPO

DIST_DIR = os.environ.get("SANDBOXD_DIST_DIR", os.path.join(REPO, "build", "dist"))


@pytest.fixture(scope="module")
def server(module_servers):
    return module_servers.start("--workers", "1")


def server_version():
    p = subprocess.run([os.path.join(BIN_DIR, "sandboxd"), "--version"], capture_output=True,
                       text=True, timeout=30, check=True)
    return p.stdout.split()[-1]


def artifact(kind):
    version = server_version()
    name = {"wheel": f"sandboxd-{version}-py3-none-any.whl",
            "sdist": f"sandboxd-{version}.tar.gz"}[kind]
    path = os.path.join(DIST_DIR, name)
    assert os.path.isfile(path), f"{path} missing: scripts/package (run by scripts/build) makes it"
    return path


@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_pip_install_artifact_into_a_fresh_venv(server, tmp_path, kind):
    path = artifact(kind)
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, timeout=120)
    user = tmp_path / "user"  # the user's own directory: no checkout, no build tree near
    user.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_INDEX_URL")}
    # The sdist builds sandbox_pb2.py with protoc and Debian's setuptools
    # (no build isolation: that would download them); the wheel needs neither.
    extra = ["--no-build-isolation"] if kind == "sdist" else []
    p = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-index", *extra, path],
                       cwd=user, env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    script = textwrap.dedent(f'''
        import importlib.metadata, os, sandboxd
        print(sandboxd.__file__)
        print(sandboxd.__version__, importlib.metadata.version("sandboxd"))
        print(os.path.isfile(os.path.join(os.path.dirname(sandboxd.__file__), "py.typed")))
        with sandboxd.Client("{server.tcp}") as c:
            r = c.run_code('print("hello from the {kind}")', limits={{"timeout_ms": 10000}})
        print(r.stdout_text, end="")
    ''')
    p = subprocess.run([str(venv / "bin" / "python"), "-c", script], cwd=user, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    where, versions, typed, hello = p.stdout.splitlines()
    assert where.startswith(str(venv) + "/"), f"imported {where}, not the venv's"
    want = server_version()
    assert versions == f"{want} {want}", f"__version__ and metadata {versions}, server {want}"
    assert typed == "True", "py.typed is not installed"
    assert hello == f"hello from the {kind}"
