"""What every pytest suite under tests/ shares (tests/pytest.ini makes this
the root conftest and puts tests/ on sys.path for `from lib import ...`):

- `--bin-dir DIR` (default: $SANDBOXD_BIN_DIR, else build/bin): the build's
  binaries; the `bin_dir` fixture hands it to a test and, since every such
  test starts sandboxd, ends the run when not root: exit 77 (ctest's skip,
  SKIP_RETURN_CODE) with a loud SKIP banner, or exit 1 when CI=true.
- `check(cond, what, detail="")`: the soft assert (lib.harness.check) as a
  fixture. A failed check prints FAIL and the test goes on; at its end the
  test fails listing every failed check (with the exception that stopped it,
  if one did). Helper functions may call lib.harness.check directly: it
  records into the same test.
- with CI=true a skipped test fails (CI runs as root and forbids skips).
- at the session's end the servers' scratch directories are removed when
  every test passed, and kept (and named) when not.
"""
import os

import pytest

from lib import harness

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pytest_addoption(parser):
    parser.addoption("--bin-dir", default=os.environ.get("SANDBOXD_BIN_DIR",
                                                         os.path.join(REPO, "build", "bin")),
                     help="the build's bin directory (sandboxd, sandbox-run, ...)")


@pytest.fixture
def bin_dir(request):
    """The build's bin directory, for a test that starts sandboxd (as root)."""
    refused = harness.not_root(request.node.name)
    if refused is not None:
        pytest.exit(refused[1], returncode=refused[0])
    return os.path.abspath(request.config.getoption("--bin-dir"))


@pytest.fixture
def check():
    """The soft assert: check(cond, what, detail="") -> cond."""
    return harness.check


def pytest_runtest_setup(item):
    harness.FAILURES.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """The test's call (or teardown) fails when checks failed in it: the
    report lists them after whatever else failed."""
    rep = (yield).get_result()
    if rep.skipped and not hasattr(rep, "wasxfail") and os.environ.get("CI") == "true":
        rep.outcome = "failed"
        rep.longrepr = f"SKIP {item.nodeid}: {rep.longrepr} and CI=true forbids skipping"
        return
    if call.when not in ("call", "teardown"):
        return
    seen = getattr(item, "_sbx_checks_reported", 0)
    failed = harness.FAILURES[seen:]
    item._sbx_checks_reported = len(harness.FAILURES)
    if not failed:
        return
    listing = f"{len(failed)} failed check(s):\n" + "\n".join(f"  FAIL {f}" for f in failed)
    rep.longrepr = f"{rep.longrepr}\n\n{listing}" if rep.failed and rep.longrepr else listing
    rep.outcome = "failed"


def pytest_sessionfinish(session, exitstatus):
    if exitstatus != 0 and harness.SERVERS:
        print()  # after pytest's progress line
    harness.clean_scratch(keep=exitstatus != 0)
