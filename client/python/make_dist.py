#!/usr/bin/python3
"""Makes the Python client's release artifacts: build/dist/sandboxd-VERSION.tar.gz
(an sdist) and build/dist/sandboxd-VERSION-py3-none-any.whl (a wheel built
from that sdist, so the sdist is known to build on its own), offline, with
Debian's python3-build, setuptools and wheel (`python3 -m build
--no-isolation`). The CMake build runs it (target python_dist).

It builds from a copy of the checkout's client/python, proto/ and top
CMakeLists.txt (the version's one source) in a temporary directory, so
setuptools' egg-info and build/ never land in the source tree and two build
directories never race on it. It must never write a version of its own: the
version is read from CMakeLists.txt (generate_proto.project_version).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import generate_proto  # noqa: E402 (beside this file)


def artifacts(version: str) -> list:
    """The file names make_dist writes for version."""
    return [f"sandboxd-{version}.tar.gz", f"sandboxd-{version}-py3-none-any.whl"]


def make_dist(out_dir: str, python: str) -> list:
    """Builds the sdist and the wheel into out_dir; returns their paths."""
    version = generate_proto.project_version(os.path.join(REPO, "CMakeLists.txt"))
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sandboxd-dist-") as stage:
        tree = os.path.join(stage, "client", "python")
        shutil.copytree(HERE, tree, ignore=shutil.ignore_patterns(
            "build", "dist", "*.egg-info", "__pycache__", "_version.py", "sandbox_pb2.py"))
        os.mkdir(os.path.join(stage, "proto"))
        shutil.copy(os.path.join(REPO, "proto", "sandbox.proto"), os.path.join(stage, "proto"))
        shutil.copy(os.path.join(REPO, "CMakeLists.txt"), stage)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        p = subprocess.run([python, "-m", "build", "--no-isolation", "--outdir", out_dir, tree],
                           env=env, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"{python} -m build --no-isolation {tree} failed "
                               f"(rc {p.returncode}; Debian: apt-get install python3-build):\n"
                               f"{p.stdout[-3000:]}{p.stderr[-3000:]}")
    paths = [os.path.join(out_dir, name) for name in artifacts(version)]
    missing = [x for x in paths if not os.path.isfile(x)]
    if missing:
        raise RuntimeError(f"python3 -m build made no {', '.join(missing)}")
    return paths


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory for the sdist and the wheel")
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter that runs python3 -m build (Debian's)")
    a = ap.parse_args()
    try:
        for path in make_dist(a.out, a.python):
            print(path)
    except RuntimeError as e:
        print(f"make_dist: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
