"""Compatibility test: CPython's own test suite, bare and inside the sandbox.

A fixed list of CPython 3.11 test modules (Debian's libpython3.11-testsuite)
runs twice, each side with the same runner (run_cases.py) and the same
environment variables:

  * bare: /usr/bin/python3 as an unprivileged user (uid 65534), as the
    sandbox's code runs unprivileged too: run as root, tests that need root
    would pass bare and fail in the sandbox for the wrong reason;
  * sandboxed: the same runner as the code of a RunCode request to a real
    sandboxd started here, with generous limits.

Every case that passes bare (status ok) and not in the sandbox is a loss. A
loss must match expected_losses.txt, which may only hold cases that need the
network (docs/COMPATIBILITY.md); any other loss fails the test, printed with
the sandbox's error. Cases that pass only in the sandbox are printed.

One pytest test, test_cpython (ctest's compat_cpython), whose sandboxd's
uids the harness allocates. Needs root (the engine and the switch to uid
65534 do); without it the test skips (exit 77), or fails when CI=true.
"""
import concurrent.futures
import fnmatch
import json
import os
import shutil
import subprocess
import tempfile
import time

from lib.harness import Server as ServiceServer, check

HERE = os.path.dirname(os.path.abspath(__file__))

RUNNER = os.path.join(HERE, "run_cases.py")
EXPECTED = os.path.join(HERE, "expected_losses.txt")
PYTHON = "/usr/bin/python3"  # Debian's 3.11, the sandbox's interpreter
TESTSUITE = "/usr/lib/python3.11/test/test_os.py"

# What a user's code exercises: the OS interface, files, processes, threads,
# signals, terminals, sockets, event loops, locales and time, users, the
# interpreter's own set-up, and the usual data formats. Whole modules, but
# for a light subset of multiprocessing (its whole suite takes minutes) and
# the parts of ssl that need no peer (its client/server tests are loopback
# TCP and take most of a minute). The slowest first: they run LANES at a time.
MP = "test.test_multiprocessing_fork."  # fork: the default start method in 3.11
MODULES = [
    "test.test_logging", "test.test_io", "test.test_socket", "test.test_subprocess",
    "test.test_signal", "test.test_faulthandler", "test.test_asyncio.test_subprocess",
    "test.test_selectors", "test.test_threading", "test.test_asyncio.test_events",
    "test.test_zipfile", "test.test_tarfile", "test.test_cmd_line",
    "test.test_cmd_line_script", "test.test_datetime", "test.test_time",
    "test.test_asyncio.test_sock_lowlevel", "test.test_select", "test.test_os",
    "test.test_posix", "test.test_sys", "test.test_ctypes", "test.test_json",
    "test.test_asyncio.test_streams", "test.test_pathlib", "test.test_zoneinfo",
    "test.test_zlib", "test.test_hashlib", "test.test_tempfile", "test.test_shutil",
    "test.test_csv", "test.test_site", "test.test_gzip", "test.test_asyncio.test_unix_events",
    "test.test_glob", "test.test_mmap", "test.test_platform", "test.test_posixpath",
    "test.test_uuid", "test.test_fileio", "test.test_fcntl", "test.test_locale",
    "test.test_sysconfig", "test.test_resource", "test.test_getpass", "test.test_pty",
    "test.test_ioctl", "test.test_stat", "test.test_grp", "test.test_pwd", "test.test_pickle",
    MP + "WithProcessesTestProcess", MP + "WithProcessesTestQueue",
    MP + "WithProcessesTestLock", MP + "WithProcessesTestSemaphore",
    MP + "WithProcessesTestCondition", MP + "WithProcessesTestEvent",
    MP + "WithProcessesTestPool", MP + "WithProcessesTestConnection",
    MP + "WithProcessesTestListener", MP + "WithProcessesTestListenerClient",
    MP + "WithProcessesTestSharedMemory", MP + "WithProcessesTestValue",
    MP + "WithProcessesTestArray", MP + "WithManagerTestQueue",
    MP + "WithManagerTestContainers", MP + "TestStartMethod", MP + "TestSimpleQueue",
    MP + "TestCloseFds",
    "test.test_ssl.BasicSocketTests", "test.test_ssl.ContextTests",
    "test.test_ssl.SSLErrorTests", "test.test_ssl.MemoryBIOTests",
    "test.test_ssl.SSLObjectTests",
]

# Cases left out on both sides, only for time (fnmatch on the case id): each
# mostly waits, for 5 to 30 s.
EXCLUDE = [
    "test.test_signal.SiginterruptTest.test_siginterrupt_off",
    "test.test_logging.HandlerTest.test_race",
    "test.test_faulthandler.FaultHandlerTests.test_dump_traceback_later_twice",
]
LANES = 3  # modules in flight, each bare and sandboxed at once: most cases wait

BARE_UID = 65534  # nobody: a user that exists, like the sandbox's own uid
MODULE_TIMEOUT_S = 600
RESUMES = 5  # new interpreters after a case that crashed or hung it

SERVER_FLAGS = [
    "--workers", str(LANES), "--max-timeout-ms", str(MODULE_TIMEOUT_S * 1000),
    "--max-cpu-time-ms", str(MODULE_TIMEOUT_S * 1000), "--max-memory-bytes", str(4 << 30),
    "--max-output-bytes", str(16 << 20), "--max-max-processes", "1024",
    "--artifact-bytes", str(64 << 20), "--artifacts-total-bytes", str(64 << 20),
]
RUN_FLAGS = [
    "--timeout-ms", str(MODULE_TIMEOUT_S * 1000), "--cpu-time-ms", str(MODULE_TIMEOUT_S * 1000),
    "--memory-mb", "2048", "--output-kb", str(16 << 10), "--max-processes", "1024",
    "--disk-mb", "1024",
]
PASSED = ("ok",)

# The bare side runs in a private mount namespace chrooted into a mirror of
# the host's root (a tmpfs of mode 755 with the host's top-level directories
# bound recursively and its top-level symlinks recreated): the same files, the
# same /dev, /proc and network, but a / that an unprivileged user may search.
# Some containers, this development machine's among them, give / mode 000,
# where uid 65534 could not even load the C library. Run by sh as root inside
# `unshare --mount --propagation private`; $1 the mount point, $2 the work
# directory, the rest the runner's command.
BARE_SH = r'''
set -eu
R=$1; W=$2; shift 2
mount -t tmpfs -o mode=755,size=1m compat-root "$R"
for e in /*; do
  n=${e#/}
  if [ -L "$e" ]; then ln -s "$(readlink "$e")" "$R/$n"
  elif [ -d "$e" ]; then mkdir "$R/$n" && mount --rbind "$e" "$R/$n"
  fi
done
# The mirror's own copy inside its bound /tmp (or wherever $R lies).
umount -l "$R$R" 2>/dev/null || true
exec chroot "$R" /usr/bin/setpriv --reuid=%(uid)d --regid=%(uid)d --clear-groups -- \
  /usr/bin/env -i -C "$W" PATH=/usr/local/bin:/usr/bin:/bin HOME="$W" LANG=C.UTF-8 \
  PYTHONUNBUFFERED=1 TMPDIR="$W/tmp" "$@"
'''


class Server(ServiceServer):
    tmp_prefix = "sbx-compat-"


def runner_args(out, resume):
    args = ["--out", out]
    if resume:
        args += ["--resume", resume]
    for pattern in EXCLUDE:
        args += ["--exclude", pattern]
    return args


def make_dir(path, uid):
    os.makedirs(path, exist_ok=True)
    os.chown(path, uid, uid)
    return path


class Bare:
    """Runs the runner bare, as BARE_UID, one fresh work directory per
    attempt (as the sandbox gives a fresh workspace)."""
    side = "bare"

    def __init__(self, root):
        self.root = make_dir(root, 0)
        os.chmod(self.root, 0o755)
        self.runner = os.path.join(self.root, "run_cases.py")
        shutil.copy(RUNNER, self.runner)
        os.chmod(self.runner, 0o644)

    def attempt(self, name, n, resume):
        """One interpreter over NAME; returns (results file, how it ended,
        its output). The work directory's path is short: AF_UNIX socket
        paths below its tmp/ (multiprocessing's) must fit in 108 bytes, as
        they do below the sandbox's /tmp."""
        work = tempfile.mkdtemp(dir=self.root)
        os.chown(work, BARE_UID, BARE_UID)
        with open(os.path.join(self.root, "index"), "a") as f:
            f.write(f"{os.path.basename(work)} {name} {n}\n")
        make_dir(os.path.join(work, "tmp"), BARE_UID)
        out = os.path.join(work, "results.jsonl")
        mnt = tempfile.mkdtemp(dir=self.root, prefix="mnt-")
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
               BARE_SH % {"uid": BARE_UID}, "sh", mnt, work, PYTHON, self.runner,
               *runner_args(out, resume), name]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            log, _ = p.communicate(timeout=MODULE_TIMEOUT_S)
            how = f"exit {p.returncode}"
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            log, _ = p.communicate()
            how = f"killed after {MODULE_TIMEOUT_S} s"
        os.rmdir(mnt)
        return out, how, log.decode(errors="replace")


class Sandboxed:
    """Runs the runner as the code of a RunCode request; the results come
    back as an artifact (output/results.jsonl) and an earlier attempt's
    results go in as an input file."""
    side = "sandbox"

    def __init__(self, root, server):
        self.root = make_dir(root, 0)
        self.server = server
        with open(RUNNER) as f:
            self.code = f.read()

    def attempt(self, name, n, resume):
        work = tempfile.mkdtemp(dir=self.root)
        with open(os.path.join(self.root, "index"), "a") as f:
            f.write(f"{os.path.basename(work)} {name} {n}\n")
        script = os.path.join(work, "main.py")
        with open(script, "w") as f:
            f.write(self.code)
        flags = []
        if resume:
            flags += ["--file", f"{resume}:prev.jsonl"]
        inside = runner_args("/workspace/output/results.jsonl",
                             "/workspace/mounts/prev.jsonl" if resume else None) + [name]
        for a in inside:
            flags += ["--arg", a]
        cmd = [f"{self.server.bin_dir}/sandbox-run", "-e", self.server.tcp, "--json",
               *RUN_FLAGS, "--artifacts-dir", os.path.join(work, "output"), *flags, script]
        p = subprocess.run(cmd, capture_output=True, timeout=MODULE_TIMEOUT_S + 120)
        try:
            r = json.loads(p.stdout)
        except ValueError:
            return None, f"sandbox-run exit {p.returncode}", p.stderr.decode(errors="replace")
        how = (f"status {r.get('status')} {r.get('error', '')} killed_by={r.get('killed_by')} "
               f"exit {r.get('exit_code')} signal {r.get('signal')}")
        return os.path.join(work, "output", "results.jsonl"), how, r.get("stderr", "")


def read_records(path):
    if path is None or not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run_module(side, name):
    """All of NAME's cases on one side, resuming in a new interpreter after
    a case that killed or hung the previous one. Returns the records of all
    attempts and, per attempt, how it ended and its output's tail."""
    records, ends, resume = [], [], None
    for n in range(RESUMES + 1):
        out, how, log = side.attempt(name, n, resume)
        new = read_records(out)
        ends.append((how, log[-20000:], {r["start"] for r in new if "start" in r}))
        records += new
        if any(r.get("finished") for r in new) or not any("start" in r for r in new):
            break
        # The next attempt skips every case started so far.
        resume = os.path.join(side.root, f"{name}.resume{n}.jsonl")
        with open(resume, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in records if "start" in r)
    return records, ends


def around_timeout(log):
    """The part of a crashed attempt's output that says why: faulthandler's
    "Timeout" dump of the stuck case and what the threads said before it."""
    i = log.rfind("Timeout (")
    return log[-1500:] if i < 0 else log[max(0, i - 700):i + 800]


def outcomes(records, ends, also=()):
    """case id -> (status, excerpt), for the cases listed and those in also
    (the other side's: a run that listed nothing, its interpreter broken,
    still accounts for them). A case that never finished is "crash" (it
    started: the interpreter died or hung in it) or "not run" (never started:
    a setUpClass/setUpModule failed, or the run ended first)."""
    res, listed, fixtures = {}, [], {}
    for r in records:
        if "listed" in r and not listed:
            listed = r["listed"]
        if "status" not in r:
            continue
        if r["id"].startswith(("setUpClass (", "setUpModule (", "tearDownClass (",
                               "tearDownModule (")):
            fixtures[r["id"].split("(", 1)[1].rstrip(")")] = (r["status"], r.get("err", ""))
            continue
        prev = res.get(r["id"])
        # A failed subtest or a second failure wins over a later "ok".
        if prev is None or prev[0] in PASSED + ("skip",):
            res[r["id"]] = (r["status"], r.get("err", ""))
    seen = set(listed)
    for case in listed + [c for c in also if c not in seen]:
        if case in res:
            continue
        cls, module = case.rsplit(".", 1)[0], case.rsplit(".", 2)[0]
        if cls in fixtures or module in fixtures:
            st, err = fixtures.get(cls) or fixtures[module]
            res[case] = ("not run", f"{st} in a fixture: {err}")
            continue
        crashed = [(how, log) for how, log, started in ends if case in started]
        if crashed:
            how, log = crashed[0]
            res[case] = ("crash", f"{how}; output:\n{around_timeout(log)}")
        else:
            how, log, _ = ends[-1]
            res[case] = ("not run", f"{how}; output's end:\n{log[-1500:]}")
    return res


# Lost cases that the per-case timeout ended in the sandbox, run again on
# their own (at most this many): a case that started many processes timed
# out once while the bare side ran beside it on a loaded machine, and passed
# alone. One that passes alone is slow there, not lost, and is listed.
RETRY_MAX = 5


def retry_timeouts(sandboxed, lost, entries):
    """The lost cases (not expected ones) that hit the per-case timeout and
    pass when run again alone in the sandbox."""
    slow = [c for c, (st, err) in sorted(lost.items())
            if st == "crash" and "Timeout (" in err and expected_reason(c, entries)[1] is None]
    passed = []
    for case in slow[:RETRY_MAX]:
        res = outcomes(*run_module(sandboxed, case))
        if res.get(case, ("missing",))[0] in PASSED:
            passed.append(case)
    return passed


def load_expected(path):
    """expected_losses.txt: "reason KEY: text" lines, then "PATTERN KEY"
    lines (fnmatch on the case id). Returns [(pattern, key)], {key: text}."""
    entries, reasons = [], {}
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if line.startswith("reason "):
                key, text = line[len("reason "):].split(":", 1)
                reasons[key.strip()] = text.strip()
            else:
                pattern, key = line.split()
                entries.append((pattern, key))
    unknown = {k for _, k in entries if k not in reasons}
    if unknown:
        raise ValueError(f"{path}: entries with no reason line: {sorted(unknown)}")
    return entries, reasons


def expected_reason(case, entries):
    for pattern, key in entries:
        if fnmatch.fnmatchcase(case, pattern):
            return pattern, key
    return None, None


def compare(bare, sbx):
    lost = {c: sbx.get(c, ("missing", "no result in the sandbox")) for c, (st, _) in bare.items()
            if st in PASSED and sbx.get(c, ("missing",))[0] not in PASSED}
    gained = {c: bare.get(c, ("missing", ""))[0] for c, (st, _) in sbx.items()
              if st in PASSED and bare.get(c, ("missing",))[0] not in PASSED}
    return lost, gained


def indent(text, prefix="      "):
    return "\n".join(prefix + line for line in text.strip().splitlines())


def report(lost, gained, entries, reasons):
    """Prints every lost case, expected ones by reason, and returns the
    unexpected ones."""
    unexpected, used, by_reason = {}, set(), {}
    for case in sorted(lost):
        pattern, key = expected_reason(case, entries)
        if key is None:
            unexpected[case] = lost[case]
        else:
            used.add(pattern)
            by_reason.setdefault(key, []).append(case)
    for key, cases in sorted(by_reason.items()):
        print(f"\nexpected losses, {key} ({reasons[key]}): {len(cases)}")
        for case in cases:
            st, err = lost[case]
            last = err.strip().splitlines()[-1] if err.strip() else ""
            print(f"  {case}: {st}: {last[:200]}")
    if gained:
        print(f"\ngains (pass only in the sandbox): {len(gained)}")
        for case, st in sorted(gained.items()):
            print(f"  {case} (bare: {st})")
    stale = [p for p, _ in entries if p not in used]
    if stale:
        print(f"\nexpected-loss entries that matched no loss this time: {len(stale)}")
        for p in stale:
            print(f"  {p}")
    if unexpected:
        print(f"\nUNEXPECTED LOSSES (pass bare, not in the sandbox, not network): "
              f"{len(unexpected)}")
        for case, (st, err) in sorted(unexpected.items()):
            print(f"  {case}: {st}\n{indent(err)}")
    return unexpected


def run_both(bare, sandboxed, name):
    """One name bare and sandboxed at the same time, so that both sides see
    the same load."""
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        fb = pool.submit(run_module, bare, name)
        fs = pool.submit(run_module, sandboxed, name)
        b = outcomes(*fb.result())
        s = outcomes(*fs.result(), also=b)
    ok_b = sum(st in PASSED for st, _ in b.values())
    ok_s = sum(st in PASSED for st, _ in s.values())
    print(f"{name}: {len(b)} cases, passed bare {ok_b}, sandbox {ok_s} "
          f"({time.monotonic() - t0:.1f} s)", flush=True)
    return b, s


def run_all(bare, sandboxed, names):
    with concurrent.futures.ThreadPoolExecutor(LANES) as pool:
        futures = {name: pool.submit(run_both, bare, sandboxed, name) for name in names}
        return {name: f.result() for name, f in futures.items()}


def preflight():
    """The test suite and the unprivileged user must be there, or every case
    would be "lost" for a reason that has nothing to do with the sandbox."""
    if not os.path.exists(TESTSUITE):
        check(False, "CPython's test suite is installed (apt-get install libpython3.11-testsuite)",
              TESTSUITE)
        return False
    return check(shutil.which("unshare") and shutil.which("setpriv"),
                 "unshare and setpriv (util-linux) are installed")


def test_cpython(bin_dir):
    if not preflight():
        return
    entries, reasons = load_expected(EXPECTED)
    # For working on the test: COMPAT_NAMES=test.test_pty,test.test_os runs
    # only those (the check is the same).
    names = os.environ.get("COMPAT_NAMES", "").split(",") if os.environ.get("COMPAT_NAMES") \
        else MODULES
    tmp = tempfile.mkdtemp(prefix="sbx-compat-", dir="/tmp")  # short: see Bare.attempt
    os.chmod(tmp, 0o755)
    s = Server(bin_dir, *SERVER_FLAGS)
    t0 = time.monotonic()
    try:
        sandboxed = Sandboxed(os.path.join(tmp, "s"), s)
        results = run_all(Bare(os.path.join(tmp, "b")), sandboxed, names)
        bare = {c: v for b_, _ in results.values() for c, v in b_.items()}
        sbx = {c: v for _, s_ in results.values() for c, v in s_.items()}
        lost, gained = compare(bare, sbx)
        slow = retry_timeouts(sandboxed, lost, entries)
    finally:
        s.stop()
        if os.environ.get("COMPAT_KEEP") != "1":
            shutil.rmtree(s.tmp, ignore_errors=True)  # its log and state dir
    for case in slow:
        print(f"slow, not lost: {case} hit the case timeout beside the bare "
              "run and passed alone in the sandbox")
        del lost[case]
    unexpected = report(lost, gained, entries, reasons)
    passed = sum(st in PASSED for st, _ in bare.values())
    print(f"\n{len(names)} names, {len(bare)} cases, {passed} pass bare; lost in the sandbox: "
          f"{len(lost)} ({len(lost) - len(unexpected)} expected: network or read-only root; {len(unexpected)} "
          f"not); gained {len(gained)}; {time.monotonic() - t0:.0f} s")
    check(passed > 0, "cases pass bare", passed)
    check(not unexpected, "no case that passes bare is lost in the sandbox, except those that "
          "need the network (expected_losses.txt)", f"{len(unexpected)} lost, listed above")
    if os.environ.get("COMPAT_KEEP") != "1":
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"kept {tmp}")

