#!/usr/bin/python3
"""Runs one pytest file of the client tests as ctest needs it.

Exit 77 (ctest's skip) when a file that starts servers runs without root,
and 1 instead when CI=true (CI runs as root and forbids skips); pytest's exit
5 (no test collected) is a failure, not a pass, and so is a skipped test when
CI=true. The package is imported from
the build tree (--python-dir, build/python) with Debian's interpreter.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET


# A test still running after this long gets every thread's traceback
# printed (and goes on), so that a hang ctest's timeout (300 s) kills leaves
# where it hung in the log.
HANG_DUMP_S = 240


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--python-dir", required=True)
    ap.add_argument("--needs-root", action="store_true")
    ap.add_argument("test_file")
    a = ap.parse_args()
    name = os.path.basename(a.test_file)
    if a.needs_root and os.geteuid() != 0:
        msg = f"SKIP {name}: needs root (it starts sandboxd)"
        if os.environ.get("CI") == "true":
            print(msg.replace("SKIP", "FAIL") + " and CI=true forbids skipping")
            return 1
        print("*" * 70 + "\n" + msg + "\n" + "*" * 70)
        return 77
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.abspath(a.python_dir),
                                                    env.get("PYTHONPATH")) if p)
    env["SANDBOXD_BIN_DIR"] = os.path.abspath(a.bin_dir)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    with tempfile.TemporaryDirectory(prefix="sandboxd-pytest-") as tmp:
        report = os.path.join(tmp, "junit.xml")
        rc = subprocess.call([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v",
                              "-rfEs", "-o", f"faulthandler_timeout={HANG_DUMP_S}",
                              "--rootdir", os.path.dirname(os.path.abspath(a.test_file)),
                              f"--junitxml={report}", a.test_file], env=env)
        skipped = count_skipped(report)
    if rc == 5:
        print(f"FAIL {name}: pytest collected no test")
        return 1
    if rc == 0 and skipped and os.environ.get("CI") == "true":
        print(f"FAIL {name}: {skipped} test(s) skipped and CI=true forbids skipping")
        return 1
    return rc


def count_skipped(report: str) -> int:
    """Skipped tests in pytest's JUnit report (0 when there is none)."""
    try:
        root = ET.parse(report).getroot()
    except (OSError, ET.ParseError):
        return 0
    return sum(int(s.get("skipped", 0)) for s in root.iter("testsuite"))


if __name__ == "__main__":
    sys.exit(main())
