"""pip install ./client/python works offline into a venv that sees Debian's
python3-protobuf, and the installed package talks to a real server. The
checkout's client/python and proto/ are copied to a temporary tree first,
so the build's files (build/, *.egg-info) never land in the source tree."""
import importlib.util
import os
import shutil
import subprocess
import textwrap

import sandboxd
from conftest import REPO


def test_pip_install_offline_into_a_venv(servers, tmp_path):
    s = servers.start("--workers", "1")
    tree = tmp_path / "checkout"
    shutil.copytree(os.path.join(REPO, "client", "python"), tree / "client" / "python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    shutil.copytree(os.path.join(REPO, "proto"), tree / "proto")
    shutil.copy(os.path.join(REPO, "CMakeLists.txt"), tree)  # the version's one source
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_INDEX_URL")}
    p = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-build-isolation",
                        "--no-index", "./client/python"], cwd=tree, env=env,
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    script = textwrap.dedent(f'''
        import importlib.metadata, os, sandboxd, sandboxd.sandbox_pb2 as pb
        assert "/venv/" in sandboxd.__file__, sandboxd.__file__
        assert sandboxd.__version__ == "{sandboxd.__version__}", sandboxd.__version__
        assert importlib.metadata.version("sandboxd") == sandboxd.__version__
        assert os.path.isfile(os.path.join(os.path.dirname(sandboxd.__file__), "py.typed"))
        with sandboxd.Client("{s.tcp}") as c:
            r = c.run_code('print("installed")')
        print(pb.__file__)
        print(r.stdout.decode(), end="")
    ''')
    p = subprocess.run([str(venv / "bin" / "python"), "-c", script], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    pb_path, out = p.stdout.splitlines()
    assert out == "installed"
    spec = importlib.util.spec_from_file_location(
        "generate_proto", os.path.join(REPO, "client", "python", "generate_proto.py"))
    generate_proto = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate_proto)
    fresh = generate_proto.generate(os.path.join(REPO, "proto", "sandbox.proto"),
                                    str(tmp_path / "fresh"))
    with open(fresh, "rb") as a, open(pb_path, "rb") as b:
        assert a.read() == b.read(), "the installed sandbox_pb2.py is not protoc's output"
    assert not os.path.exists(tree / "client" / "python" / "sandboxd" / "sandbox_pb2.py")
