"""Package code is user code (issue 24; docs/SECURITY.md, "Package code is
user code"): a requirement whose wheel installs a `.pth` hook
(tests/lib/hostile_package.py), served from a wheelhouse made by the test
(--offline 1 --wheelhouse), through every way an interpreter starts. The
hook records what it could do where it ran and leaves a daemon meant to
outlive its run.

Tests (test_<name>, ctest service_<name>):
  package_code_cold         a cold run: the hook runs in the run's sandbox
                            (seccomp, no capabilities, no_new_privs, every
                            probe refused); its daemon dies with the run
  package_code_zygote       python-zygote: the hook ran in the environment's
                            zygote at its start, which is confined as a run
                            (the same verdicts); its daemon did not outlive
                            the start; a later cold run on the same slot
                            finds no socket of it; nothing of the hook is
                            left; the zygote's runs' PID 1 is filtered
  package_code_zygote_limits  a preload (an environment's .pth) that forks
                            until refused: stopped by the zygotes' pids.max,
                            nothing of it left once the zygote serves
  package_code_zygote_leftovers  a preload that leaves a thread, a shared
                            mapping or a socket, or writes bytes that are not
                            UTF-8 on the zygote's control socket: refused with
                            a message the caller can decode, nothing ran
  package_code_interpreter  an INTERPRETER session: requirements are refused
                            (the hook ran nowhere); a sitecustomize on the
                            session's PYTHONPATH runs confined at the
                            interpreter's start and leaves nothing behind
                            once the session is closed
"""
import json
import os
import shutil
import tempfile
import time

from lib.harness import Server, WireCaller, check, load_pb2, slot_processes
from lib import hostile_package as hp

HERE = os.path.dirname(os.path.abspath(__file__))

OK, INVALID_ARGUMENT, INTERNAL = 0, 3, 13


class Caller:
    def __init__(self, server, pb):
        self.pb = pb
        self.w = WireCaller(server.port, pb, timeout=180)

    def run(self, code, **kw):
        st, msg, pl = self.w.call("RunCode", self.pb.RunCodeRequest(code=code, **kw))
        return st, msg, (self.pb.RunCodeResponse.FromString(pl) if st == OK else None)

    def ok(self, code, **kw):
        st, msg, r = self.run(code, **kw)
        if st != OK:
            raise RuntimeError(f"RunCode: {st} {msg}")
        return r

    def close_session(self, sid):
        return self.w.call("CloseSession", self.pb.CloseSessionRequest(session_id=sid))[:2]

    def close(self):
        self.w.close()


def wheelhouse():
    wh = tempfile.mkdtemp(prefix="sbx-hook-wheels-")
    os.chmod(wh, 0o755)
    hp.make_hostile_wheel(wh)
    return wh


def seen_of(r, what):
    try:
        return json.loads(r.stdout)
    except ValueError:
        check(False, f"{what}: the report is JSON", (r.exit_code, r.stdout[-500:],
                                                      r.stderr[-1500:]))
        return {}


def check_confined(seen, where):
    for what, ok in hp.confined(seen):
        check(ok, f"{where}: {what}", seen)


def no_daemons(s, what, timeout=5):
    """No sbxhookd of the server's uids (a killed one may take an instant
    to go)."""
    deadline = time.monotonic() + timeout
    while hp.daemons(s.uid_base, 8) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = hp.daemons(s.uid_base, 8)
    return check(not left, f"{what}: no process of the hook is left", left)


def test_package_code_cold(bin_dir, check):
    pb = load_pb2(bin_dir)
    wh = wheelhouse()
    s = Server(bin_dir, "--workers", "1", "--offline", "1", "--wheelhouse", wh)
    c = Caller(s, pb)
    try:
        r = c.ok(hp.REPORT, requirements=[hp.REQUIREMENT])
        seen = seen_of(r, "cold")
        check(r.exit_code == 0 and seen.get("pid") == seen.get("my_pid"),
              "cold: the hook ran in the run's own interpreter", seen)
        check_confined(seen, "cold: the hook")
        check(seen.get("daemon_answers") == "hook daemon here\n",
              "cold: within its run the hook's daemon serves its socket (the probe works)", seen)
        no_daemons(s, "cold, after the run")
        check(slot_processes(s.uid_base, 2) == {}, "cold: nothing of the run is left",
              slot_processes(s.uid_base, 2))
        r = c.ok("import socket\ns = socket.socket(socket.AF_UNIX)\n"
                 f"print(s.connect_ex('\\0' + {seen.get('socket', 'none')!r}))\n")
        check(r.stdout.strip() == b"111", "cold: the next run finds no socket of the hook "
              "(ECONNREFUSED)", r.stdout)
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")
        shutil.rmtree(wh, ignore_errors=True)
    no_daemons(s, "cold, after the server")


def test_package_code_zygote(bin_dir, check):
    pb = load_pb2(bin_dir)
    wh = wheelhouse()
    s = Server(bin_dir, "--workers", "1", "--offline", "1", "--wheelhouse", wh, "--zygote", "1")
    c = Caller(s, pb)
    try:
        r = c.ok(hp.REPORT, requirements=[hp.REQUIREMENT], runtime="python-zygote")
        seen = seen_of(r, "zygote")
        check(r.exit_code == 0 and seen.get("pid") not in (None, seen.get("my_pid")),
              "python-zygote: the hook ran in the environment's zygote, before the run", seen)
        check_confined(seen, "python-zygote: the hook in the zygote")
        check(seen.get("daemon_answers") == "",
              "python-zygote: the daemon the hook started in the zygote is gone before any run",
              seen)
        no_daemons(s, "python-zygote, after the run")
        r2 = c.ok(hp.REPORT, requirements=[hp.REQUIREMENT], runtime="python-zygote")
        seen2 = seen_of(r2, "zygote, second run")
        check(seen2.get("pid") == seen.get("pid") and seen2.get("daemon_answers") == "",
              "python-zygote: the next run of the same zygote finds no daemon either", seen2)
        r = c.ok("import socket\ns = socket.socket(socket.AF_UNIX)\n"
                 f"print(s.connect_ex('\\0' + {seen.get('socket', 'none')!r}))\n")
        check(r.stdout.strip() == b"111", "python-zygote: a cold run on the same slot finds "
              "no socket of the hook (ECONNREFUSED)", r.stdout)
        r = c.ok("st = dict(l.split(':', 1) for l in open('/proc/1/status'))\n"
                 "print(*(st[k].strip() for k in ('Seccomp', 'NoNewPrivs', 'CapBnd', "
                 "'CapEff')))\n", requirements=[hp.REQUIREMENT], runtime="python-zygote")
        check(r.stdout == b"2 1 0000000000000000 0000000000000000\n",
              "python-zygote: the run's PID 1 (sandbox-init -r) is filtered, no_new_privs, "
              "no bounding set, as a cold run's", (r.stdout, r.stderr[-500:]))
        procs = slot_processes(s.uid_base, 2)
        check(len(procs) == 1, "python-zygote: of the slot's uid only the zygote is left", procs)
        no_daemons(s, "python-zygote, after the runs")
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")
        shutil.rmtree(wh, ignore_errors=True)
    no_daemons(s, "python-zygote, after the server")


def zygotes_pids_max(server_pid):
    """pids.max of the server's zygotes' cgroup (v1 pids hierarchy or v2)."""
    import glob
    for pattern in (f"/sys/fs/cgroup/pids/**/sandboxd.{server_pid}/zygotes/pids.max",
                    f"/sys/fs/cgroup/**/sandboxd.{server_pid}/zygotes/pids.max"):
        found = glob.glob(pattern, recursive=True)
        if found:
            with open(found[0]) as f:
                return f.read().strip()
    return None


def test_package_code_zygote_limits(bin_dir, check):
    pb = load_pb2(bin_dir)
    wh = wheelhouse()
    hp.make_forker_wheel(wh)
    s = Server(bin_dir, "--workers", "1", "--offline", "1", "--wheelhouse", wh, "--zygote", "1",
               "--zygote-preload", "json")
    c = Caller(s, pb)
    try:
        r = c.ok("import sbx_forker_boot, os\nprint(sbx_forker_boot.FORKED)\n",
                 requirements=[hp.FORKER_REQUIREMENT], runtime="python-zygote",
                 limits=pb.Limits(timeout_ms=60000))
        limit = zygotes_pids_max(s.proc.pid)
        forked = int(r.stdout or b"-1")
        check(limit is not None and limit.isdigit() and 0 < forked < int(limit)
              and forked < hp.FORKER_MAX,
              "a zygote's preload that forks until refused is stopped by the zygotes' "
              "pids.max", (forked, limit, r.stderr[-500:]))
        procs = slot_processes(s.uid_base, 2)
        check(len(procs) == 1, "none of the preload's processes outlived the zygote's start",
              len(procs))
        r = c.ok("print('after')\n", runtime="python-zygote")
        check(r.stdout == b"after\n", "the slot serves python-zygote runs after", r.stdout)
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")
        shutil.rmtree(wh, ignore_errors=True)


def test_package_code_zygote_leftovers(bin_dir, check):
    pb = load_pb2(bin_dir)
    wh = wheelhouse()
    for name in hp.LEFTOVERS:
        hp.make_leftover_wheel(wh, name)
    s = Server(bin_dir, "--workers", "1", "--offline", "1", "--wheelhouse", wh, "--zygote", "1",
               "--zygote-preload", "json")
    c = Caller(s, pb)
    try:
        for name, (_, says) in hp.LEFTOVERS.items():
            st, msg, r = c.run("print('ran')\n", requirements=[f"{name}==1.0"],
                               runtime="python-zygote")
            check(st == INTERNAL and says in msg and "nothing ran" in msg and r is None,
                  f"{name}: the zygote refuses to serve, the call says why and nothing ran",
                  (st, msg))
            r = c.ok("print('after')\n", runtime="python-zygote")
            check(r.stdout == b"after\n", f"{name}: the slot serves python-zygote runs after",
                  r.stdout)
        check(len(slot_processes(s.uid_base, 2)) == 1, "nothing of the refused zygotes is left",
              slot_processes(s.uid_base, 2))
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")
        shutil.rmtree(wh, ignore_errors=True)


SITECUSTOMIZE = "import sbx_hook_boot\n"


def test_package_code_interpreter(bin_dir, check):
    pb = load_pb2(bin_dir)
    wh = wheelhouse()
    s = Server(bin_dir, "--workers", "1", "--offline", "1", "--wheelhouse", wh)
    c = Caller(s, pb)
    try:
        st, msg, _ = c.run(hp.REPORT, requirements=[hp.REQUIREMENT], session_id="nb",
                           session_mode=pb.SESSION_MODE_INTERPRETER)
        check(st == INVALID_ARGUMENT and "requirements" in msg,
              "interpreter: a session with requirements is refused before anything runs",
              (st, msg))
        no_daemons(s, "interpreter, refused")
        files = [pb.File(path="lib/sitecustomize.py", content=SITECUSTOMIZE.encode()),
                 pb.File(path="lib/sbx_hook_boot.py", content=hp.HOOK.encode())]
        r = c.ok(hp.REPORT, session_id="nb2", session_mode=pb.SESSION_MODE_INTERPRETER,
                 files=files, env={"PYTHONPATH": "/workspace/mounts/lib"})
        seen = seen_of(r, "interpreter")
        check(r.exit_code == 0 and seen.get("pid") == seen.get("my_pid"),
              "interpreter: the sitecustomize hook ran in the interpreter itself", seen)
        check_confined(seen, "interpreter: the hook")
        st, msg = c.close_session("nb2")
        check(st == OK, "interpreter: the session closes", (st, msg))
        no_daemons(s, "interpreter, after the session")
        procs = slot_processes(s.uid_base, 4)
        check(procs == {}, "interpreter: nothing of the session is left", procs)
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0")
        shutil.rmtree(wh, ignore_errors=True)
    no_daemons(s, "interpreter, after the server")
