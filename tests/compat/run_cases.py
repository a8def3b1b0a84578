"""Runs CPython test modules with unittest and records every case's outcome.

The same file runs on both sides of the compatibility test: bare, as
`/usr/bin/python3 run_cases.py ...`, and inside the sandbox as the code of a
RunCode request (`python3 -I /workspace/main.py ...`). So it must depend on
nothing but the standard library and its arguments.

    run_cases.py --out OUT [--resume PREV] [--exclude PATTERN]... NAME...

NAME is a test module, package or class (test.test_os, test.test_ssl.ContextTests).
OUT gets one JSON object per line, appended as it happens so that a crash or a
kill keeps what came before: {"listed": [ids]} once, then per case
{"start": id} and {"id": id, "status": ..., "t": seconds, "err": excerpt}, and
{"finished": true} when the run got to the end. PREV is an earlier OUT of the
same names: cases started there are not run again, which lets the harness
resume after a case that crashed or hung the interpreter. Cases whose id
matches an --exclude pattern (fnmatch) are neither listed nor run. The verbose
unittest report still goes to stderr, for people.
"""
import argparse
import faulthandler
import fnmatch
import json
import os
import sys
import time
import traceback
import unittest

from test import support

# Only what regrtest would enable with `-u subprocess`: never "network" or
# "urlfetch" (outside unittest's regrtest every resource is on, and those
# would reach the internet), nor the slow "cpu", "largefile", "walltime".
RESOURCES = ["subprocess"]
# A case stuck this long is dumped and the interpreter exits (regrtest's
# --timeout); the harness records it and resumes after it. The slowest case
# kept takes about 5 s bare; the ones that hang in the sandbox wait forever for
# a loopback server that could not start.
CASE_TIMEOUT_S = 30
EXCERPT_CHARS = 700


def excerpt(err):
    """Where a case failed and why: the innermost frame and the exception,
    which is what tells a sandbox's refusal from a test's own failure."""
    etype, value, tb = err
    frames = traceback.extract_tb(tb)
    where = "".join(traceback.format_list(frames[-1:]))
    text = where + "".join(traceback.format_exception_only(etype, value))
    return text[-EXCERPT_CHARS:]


class Recorder(unittest.TextTestResult):
    """TextTestResult that also appends one JSON line per event to OUT.

    The file is opened per record: tests close fds they do not own
    (closerange), change directory and exhaust descriptors, and none of that
    may lose a record. Only the runner's own process writes: a forked child
    that returned into unittest must not add records."""

    def __init__(self, *a, out, **kw):
        super().__init__(*a, **kw)
        self.out = out
        self.pid = os.getpid()
        self.t0 = 0.0

    def record(self, obj):
        if os.getpid() != self.pid:
            return
        line = (json.dumps(obj) + "\n").encode()
        fd = os.open(self.out, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def outcome(self, test, status, err=None):
        rec = {"id": test.id(), "status": status}
        if isinstance(test, unittest.TestCase):  # not a fixture's error holder
            rec["t"] = round(time.monotonic() - self.t0, 3)
        if err is not None:
            rec["err"] = err
        self.record(rec)

    def startTest(self, test):
        self.record({"start": test.id()})
        self.t0 = time.monotonic()
        faulthandler.dump_traceback_later(CASE_TIMEOUT_S, exit=True)
        super().startTest(test)

    def stopTest(self, test):
        faulthandler.cancel_dump_traceback_later()
        super().stopTest(test)

    def addSuccess(self, test):
        super().addSuccess(test)
        self.outcome(test, "ok")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.outcome(test, "fail", excerpt(err))

    def addError(self, test, err):
        # Also how setUpClass/setUpModule errors arrive, with an id such as
        # "setUpClass (test.test_x.Class)": the harness maps them to the
        # cases they kept from running.
        super().addError(test, err)
        self.outcome(test, "error", excerpt(err))

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            # The case itself gets no addSuccess: it failed through this subtest.
            failed = issubclass(err[0], test.failureException)
            self.outcome(test, "fail" if failed else "error", f"{subtest}\n{excerpt(err)}")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.outcome(test, "skip", str(reason)[:EXCERPT_CHARS])

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.outcome(test, "xfail")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.outcome(test, "uxpass")


def cases(suite):
    """Every TestCase in a suite, depth first, in run order."""
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from cases(t)
        else:
            yield t


def started_in(prev):
    if prev is None or not os.path.exists(prev):
        return set()
    with open(prev) as f:
        return {json.loads(line)["start"] for line in f if line.startswith('{"start"')}


def select(suite, keep):
    """The suite with only the cases keep(id) accepts, keeping the class and
    module structure so that setUpClass and setUpModule still run."""
    kept = unittest.TestSuite()
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            sub = select(t, keep)
            if sub.countTestCases():
                kept.addTest(sub)
        elif keep(t.id()):
            kept.addTest(t)
    return kept


def load(name, rec):
    """The tests of one name; a module that raises SkipTest on import (no
    /dev/tty, say) is recorded as one skipped pseudo-case named after it."""
    try:
        return unittest.defaultTestLoader.loadTestsFromName(name)
    except unittest.SkipTest as e:
        rec.record({"id": name, "status": "skip", "err": str(e)[:EXCERPT_CHARS]})
        return unittest.TestSuite()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--resume")
    ap.add_argument("--exclude", action="append", default=[])
    ap.add_argument("names", nargs="+")
    a = ap.parse_args()
    support.use_resources = RESOURCES
    support.verbose = 0  # regrtest without -v
    rec = Recorder(sys.stderr, True, 0, out=a.out)
    suite = unittest.TestSuite(load(n, rec) for n in a.names)
    suite = select(suite, lambda i: not any(fnmatch.fnmatchcase(i, p) for p in a.exclude))
    rec.record({"listed": [t.id() for t in cases(suite)]})
    done = started_in(a.resume)
    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2,
                                     resultclass=lambda *r, **kw: Recorder(*r, out=a.out, **kw))
    runner.run(select(suite, lambda i: i not in done))
    rec.record({"finished": True})
    return 0


if __name__ == "__main__":
    sys.exit(main())
