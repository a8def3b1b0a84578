#!/usr/bin/python3
"""Generates sandboxd/sandbox_pb2.py from proto/sandbox.proto with protoc.

The one place the Python message classes are made: the CMake build (into
build/python/), the package's own build (setup.py, for pip install) and the
staleness test (into a temporary directory, compared with what is imported)
all run this. The generated file is never committed or edited by hand.

The proto is staged as sandboxd/sandbox.proto, so protobuf's descriptor pool
registers it under that name and not a bare "sandbox.proto" that another
package could also use.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_PROTO = os.path.join(HERE, "..", "..", "proto", "sandbox.proto")


def find_protoc() -> str:
    protoc = os.environ.get("PROTOC") or shutil.which("protoc")
    if not protoc:
        raise RuntimeError("protoc not found (Debian: apt-get install protobuf-compiler)")
    return protoc


def generate(proto: str, out_dir: str) -> str:
    """Writes out_dir/sandboxd/sandbox_pb2.py; returns its path."""
    with tempfile.TemporaryDirectory(prefix="sandboxd-proto-") as stage:
        os.mkdir(os.path.join(stage, "sandboxd"))
        shutil.copyfile(proto, os.path.join(stage, "sandboxd", "sandbox.proto"))
        os.makedirs(os.path.join(out_dir, "sandboxd"), exist_ok=True)
        subprocess.run([find_protoc(), f"--proto_path={stage}", f"--python_out={out_dir}",
                        os.path.join(stage, "sandboxd", "sandbox.proto")], check=True)
    return os.path.join(out_dir, "sandboxd", "sandbox_pb2.py")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--proto", default=DEFAULT_PROTO)
    ap.add_argument("--out", required=True, help="directory that gets sandboxd/sandbox_pb2.py")
    a = ap.parse_args()
    print(generate(a.proto, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
