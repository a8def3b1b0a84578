"""setup.py: only the build steps pyproject.toml cannot say: generate
sandboxd/sandbox_pb2.py from the checkout's proto/sandbox.proto with protoc,
and sandboxd/_version.py from the version in the checkout's CMakeLists.txt
(generate_proto.py, the script the CMake build runs too), into the build
directory, so the installed package has them and the source tree never does;
and the package's version, from that same CMakeLists.txt."""
import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "..", "..", "proto", "sandbox.proto")
CMAKELISTS = os.path.join(HERE, "..", "..", "CMakeLists.txt")
sys.path.insert(0, HERE)
import generate_proto  # noqa: E402 (beside this file)


def _version() -> str:
    if not os.path.exists(CMAKELISTS):
        raise SystemExit(f"sandboxd: {CMAKELISTS} not found: build from a sandboxd checkout")
    return generate_proto.project_version(CMAKELISTS)


class BuildPyWithProto(build_py):
    def run(self):
        super().run()
        if not os.path.exists(PROTO):
            raise SystemExit(f"sandboxd: {PROTO} not found: build from a sandboxd checkout")
        generate_proto.generate(PROTO, self.build_lib)
        generate_proto.write_version(_version(), self.build_lib)


setup(version=_version(), cmdclass={"build_py": BuildPyWithProto})
