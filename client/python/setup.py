"""setup.py: only the build step pyproject.toml cannot say: generate
sandboxd/sandbox_pb2.py from the checkout's proto/sandbox.proto with protoc
(generate_proto.py, the script the CMake build runs too) into the build
directory, so the installed package has it and the source tree never does."""
import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "..", "..", "proto", "sandbox.proto")


class BuildPyWithProto(build_py):
    def run(self):
        super().run()
        if not os.path.exists(PROTO):
            raise SystemExit(f"sandboxd: {PROTO} not found: build from a sandboxd checkout")
        sys.path.insert(0, HERE)
        import generate_proto
        generate_proto.generate(PROTO, self.build_lib)


setup(cmdclass={"build_py": BuildPyWithProto})
