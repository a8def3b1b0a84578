"""setup.py: only the build steps pyproject.toml cannot say: generate
sandboxd/sandbox_pb2.py from proto/sandbox.proto with protoc, and
sandboxd/_version.py from the version in the top CMakeLists.txt
(generate_proto.py, the script the CMake build runs too), into the build
directory, so the installed package has them and the source tree never does;
and the package's version, from that same CMakeLists.txt.

Two layouts: a sandboxd checkout (client/python, with ../../proto and
../../CMakeLists.txt), and an sdist made from one (make_dist.py), which
carries sandbox.proto beside this file and its version in PKG-INFO, so it
builds anywhere without the checkout. Nothing here may write a version by
hand: it comes from CMakeLists.txt, or from the PKG-INFO that was made from
it."""
import os
import shutil
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_INFO = os.path.join(HERE, "PKG-INFO")  # only in an sdist
IN_SDIST = os.path.exists(PKG_INFO)
PROTO = (os.path.join(HERE, "sandbox.proto") if IN_SDIST
         else os.path.join(HERE, "..", "..", "proto", "sandbox.proto"))
CMAKELISTS = os.path.join(HERE, "..", "..", "CMakeLists.txt")
sys.path.insert(0, HERE)
import generate_proto  # noqa: E402 (beside this file)


def _version() -> str:
    if IN_SDIST:
        with open(PKG_INFO, encoding="utf-8") as f:
            for line in f:
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
        raise SystemExit(f"sandboxd: {PKG_INFO} has no Version line")
    if not os.path.exists(CMAKELISTS):
        raise SystemExit(f"sandboxd: {CMAKELISTS} not found: build from a sandboxd checkout "
                         "or its sdist")
    return generate_proto.project_version(CMAKELISTS)


def _proto() -> str:
    if not os.path.exists(PROTO):
        raise SystemExit(f"sandboxd: {PROTO} not found: build from a sandboxd checkout "
                         "or its sdist")
    return PROTO


class BuildPyWithProto(build_py):
    def run(self):
        super().run()
        generate_proto.generate(_proto(), self.build_lib)
        generate_proto.write_version(_version(), self.build_lib)


class SdistWithProto(sdist):
    """The sdist carries the proto (sandbox.proto beside setup.py) and so
    builds without the checkout; sandbox_pb2.py is still made by protoc when
    the sdist is built into a wheel."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        shutil.copyfile(_proto(), os.path.join(base_dir, "sandbox.proto"))


setup(version=_version(), cmdclass={"build_py": BuildPyWithProto, "sdist": SdistWithProto})
