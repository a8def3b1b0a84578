"""End-to-end tests of tenants (docs/TENANTS.md, issue 26) over nng: a real
sandboxd with a tenants file (--tenants FILE; keys made here, stored as
their SHA-256), called over tcp:// by raw request envelopes built here from
the build's sandbox_pb2 (the API key in RequestEnvelope.credential, a
front_caller set by hand), and by sandbox-run --api-key.

  tenants_isolation  two tenants, the same session id and run ids: each sees
                     only its own (RunCode in a session, ListFiles, ReadFile,
                     CloseSession, StartRun/WatchRun/CancelRun with a chosen
                     run_id, an interpreter session's variable); another
                     tenant's id answers exactly (status and message) as an id
                     nobody has; GetInfo shows each caller its own tenant;
                     the logs' event=run and event=call carry the tenant
  tenants_quotas     max_sessions, max_interpreters and limits_max: exact
                     status and message, for that tenant alone
  tenants_auth       unknown key, no key, a key over 512 bytes
                     (UNAUTHENTICATED, exact messages), front_caller from the
                     network (INVALID_ARGUMENT), --anonymous-tenant for a
                     loopback caller without a key, sandbox-run --api-key
  tenants_reload     a revoked key (file rewritten, SIGHUP) fails while the
                     other works; a bad file keeps the old one
                     (event=tenants_reload_failed)
  tenants_metrics    /metrics: the tenant label, the per-tenant gauges, auth
                     failures and reloads counted, promtool; --metrics-auth:
                     401 with WWW-Authenticate unless a tenant's Bearer key,
                     the probes open

Needs root (the engine does); without it the test skips loudly (exit 77).
"""
import hashlib
import http.client
import json
import os
import secrets
import signal
import subprocess
import tempfile
import time

from lib.harness import Server, WireCaller, free_port, load_pb2
from lib.prometheus import parse_metrics

OK, CANCELLED, INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED, UNAUTHENTICATED = \
    0, 1, 3, 5, 8, 16
KILLED_BY_CANCELLED = 5
INTERP = 2

NO_KEY_MSG = ("this server needs an API key (RequestEnvelope.credential, Authorization: Bearer) "
              "or a client certificate of a tenant")
UNKNOWN_KEY_MSG = "the API key belongs to no tenant of this server"
LONG_KEY_MSG = "the API key is longer than 512 bytes"
FRONT_MSG = "front_caller is set only by sandboxd's own HTTP fronts, in-process"


def new_key():
    return "sbx_" + secrets.token_hex(24)


def digest(key):
    return hashlib.sha256(key.encode()).hexdigest()


def write_tenants(path, tenants):
    """tenants: {name: (keys, extra fields)}; written whole, then renamed
    into place (as an operator's tool would)."""
    doc = {"tenants": [dict({"name": n, "api_keys_sha256": [digest(k) for k in keys]}, **extra)
                       for n, (keys, extra) in tenants.items()]}
    tmp = path + ".new"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.rename(tmp, path)


class TenantServer(Server):
    """A sandboxd with a tenants file in its scratch directory (made before
    the start) and, when http, the operations listener."""
    tmp_prefix = "sbx-tenants-"

    def __init__(self, bin_dir, tenants, *extra, http=False):
        self.tenants_dir = tempfile.mkdtemp(prefix="sbx-tenants-file-")
        self.tenants_path = os.path.join(self.tenants_dir, "tenants.json")
        write_tenants(self.tenants_path, tenants)
        flags = ["--tenants", self.tenants_path]
        self.http_port = None
        if http:
            self.http_port = free_port()
            flags += ["--http-listen", f"http://127.0.0.1:{self.http_port}"]
        super().__init__(bin_dir, *flags, *extra)

    def http(self, path, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=10)
        try:
            c.request("GET", path, headers=headers or {})
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def reload(self, tenants=None, text=None):
        """Rewrites the file (tenants, or raw text), SIGHUP, and waits for the
        server to say how the reload went; returns that line's event."""
        if text is not None:
            with open(self.tenants_path, "w") as f:
                f.write(text)
        else:
            write_tenants(self.tenants_path, tenants)
        before = self.log_text()
        n_ok, n_bad = before.count("event=tenants_reload "), before.count(
            "event=tenants_reload_failed ")
        self.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            now = self.log_text()
            if now.count("event=tenants_reload ") > n_ok:
                return "tenants_reload"
            if now.count("event=tenants_reload_failed ") > n_bad:
                return "tenants_reload_failed"
            time.sleep(0.02)
        return None


class Caller(WireCaller):
    """One REQ peer over a raw TCP connection, calling as one tenant: its
    API key in every envelope (None: no credential); front_caller set by
    hand when given (a network client must not be believed)."""

    def __init__(self, server, pb, key=None, front_caller=None, timeout=120):
        super().__init__(server.port, pb, timeout=timeout, key=key, front_caller=front_caller)
        self.pb = pb

    def run(self, code, **kw):
        limits = kw.pop("limits", None)
        req = self.pb.RunCodeRequest(code=code, **kw)
        if limits:
            req.limits.CopyFrom(self.pb.Limits(**limits))
        st, msg, pl = self.call("RunCode", req)
        return st, msg, (self.pb.RunCodeResponse.FromString(pl) if st == OK else None)

    def info(self):
        st, msg, pl = self.call("GetInfo", self.pb.GetInfoRequest())
        return st, msg, (self.pb.GetInfoResponse.FromString(pl) if st == OK else None)

    def list_files(self, sid, path=""):
        st, msg, pl = self.call("ListFiles", self.pb.ListFilesRequest(session_id=sid, path=path))
        names = sorted(e.name for e in self.pb.ListFilesResponse.FromString(pl).entries) \
            if st == OK else None
        return st, msg, names

    def read_file(self, sid, path):
        st, msg, pl = self.call("ReadFile", self.pb.ReadFileRequest(session_id=sid, path=path))
        return st, msg, (self.pb.ReadFileResponse.FromString(pl).content if st == OK else None)

    def close_session(self, sid):
        return self.call("CloseSession", self.pb.CloseSessionRequest(session_id=sid))[:2]

    def start(self, code, **kw):
        st, msg, pl = self.call("StartRun", self.pb.RunCodeRequest(code=code, **kw))
        return st, msg, (self.pb.StartRunResponse.FromString(pl).run_id if st == OK else None)

    def watch(self, run_id, wait_ms=0):
        st, msg, pl = self.call("WatchRun", self.pb.WatchRunRequest(run_id=run_id,
                                                                     wait_ms=wait_ms))
        return st, msg, (self.pb.WatchRunResponse.FromString(pl) if st == OK else None)

    def outcome(self, run_id):
        while True:
            st, msg, r = self.watch(run_id, wait_ms=10000)
            if st != OK or r.complete:
                return st, msg, r

    def cancel(self, run_id):
        return self.call("CancelRun", self.pb.CancelRunRequest(run_id=run_id))[:2]

    def close(self):
        self.sock.close()


def answers(c, sid_or_run):
    """What c hears for an id: (status, message) of every call that names a
    session or a run, for comparing with an id nobody has."""
    x = sid_or_run
    return {
        "ListFiles": c.list_files(x)[:2],
        "ReadFile": c.read_file(x, "who.txt")[:2],
        "WatchRun": c.watch(x)[:2],
        "CancelRun": c.cancel(x),
        "CloseSession": c.close_session(x),
    }


# ---- isolation ----

def check_sessions(check, a, b):
    """The same session id, two tenants: each its own workspace."""
    for c, who in ((a, "A"), (b, "B")):
        st, msg, r = c.run(f'open("who.txt", "w").write("{who}")\nprint("{who}")\n',
                           session_id="demo")
        check(st == OK and r.stdout == f"{who}\n".encode(), f"tenant {who}: RunCode in session "
              "demo", (st, msg))
    for c, who in ((a, "A"), (b, "B")):
        st, msg, r = c.run('print(open("who.txt").read())\n', session_id="demo")
        check(st == OK and r.stdout == f"{who}\n".encode(),
              f"tenant {who}'s next run in demo reads its own file", (st, msg, r and r.stdout))
        st, msg, names = c.list_files("demo")
        check(st == OK and "who.txt" in names, f"tenant {who}: ListFiles demo", (st, msg, names))
        st, msg, content = c.read_file("demo", "who.txt")
        check(st == OK and content == who.encode(), f"tenant {who}: ReadFile demo/who.txt is its "
              "own", (st, msg, content))
    st, msg = a.close_session("demo")
    check(st == OK, "A closes its demo", (st, msg))
    st, msg, content = b.read_file("demo", "who.txt")
    check(st == OK and content == b"B", "B's demo lives on after A closed A's", (st, msg, content))
    st, msg, _ = a.list_files("demo")
    check(st == NOT_FOUND, "A's demo is gone for A", (st, msg))
    check(b.close_session("demo")[0] == OK, "B closes its demo")


def check_no_oracle(check, a, b):
    """B asks for A's session and run ids: exactly what B hears for them
    before A has them (status and message), for every call."""
    before = answers(b, "only-a")
    check(all(st != OK for st, _ in before.values()), "ids nobody has are refused", before)
    st, msg, r = a.run('open("who.txt", "w").write("A")\n', session_id="only-a")
    check(st == OK, "A makes session only-a", (st, msg))
    st, msg, rid = a.start('import time\ntime.sleep(30)\n', run_id="only-a")
    check(st == OK and rid == "only-a", "A starts run only-a", (st, msg, rid))
    during = answers(b, "only-a")
    check(during == before, "B's calls on A's ids answer exactly as on ids nobody has",
          (during, before))
    st, msg, r = a.watch("only-a")
    check(st == OK, "A still watches its run after B's CancelRun", (st, msg))
    st, msg = a.cancel("only-a")
    check(st == OK, "A cancels its own run", (st, msg))
    st, msg, _ = a.list_files("only-a")
    check(st == OK, "A's session only-a survived B's CloseSession", (st, msg))
    check(a.close_session("only-a")[0] == OK, "A closes only-a")


def check_runs(check, a, b):
    """The same chosen run_id, two tenants: each watches its own output."""
    for c, who in ((a, "A"), (b, "B")):
        st, msg, rid = c.start(f'print("{who}")\n', run_id="r1")
        check(st == OK and rid == "r1", f"tenant {who}: StartRun r1", (st, msg, rid))
    for c, who in ((a, "A"), (b, "B")):
        st, msg, r = c.outcome("r1")
        check(st == OK and r.status == OK and r.result.stdout == f"{who}\n".encode(),
              f"tenant {who}: WatchRun r1 is its own run", (st, msg, r and r.result.stdout))
    st, msg, rid = b.start('import time\ntime.sleep(30)\n', run_id="r2")
    st2, msg2, rid2 = a.start('print("A2")\n', run_id="r2")
    check(st == OK and st2 == OK, "both start r2", (st, msg, st2, msg2))
    st, msg = a.cancel("r2")
    check(st == OK, "A's CancelRun r2 cancels A's", (st, msg))
    st, msg, r = b.watch("r2")
    check(st == OK and not r.complete, "B's r2 runs on", (st, msg, r and r.state))
    st, msg = b.cancel("r2")
    st, msg, r = b.outcome("r2")
    check(st == OK and r.complete and (r.status == CANCELLED or
                                       r.result.killed_by == KILLED_BY_CANCELLED),
          "B cancels its own r2", (st, msg, r))


def check_interpreters(check, a, b):
    for c, who in ((a, "A"), (b, "B")):
        st, msg, r = c.run(f'x = "{who}"\n', session_id="nb", session_mode=INTERP)
        check(st == OK, f"tenant {who}: interpreter session nb", (st, msg))
    for c, who in ((a, "A"), (b, "B")):
        st, msg, r = c.run("x\n", session_id="nb", session_mode=INTERP)
        check(st == OK and r.result == repr(who), f"tenant {who}: nb's x is its own",
              (st, msg, r and r.result))
    for c in (a, b):
        c.close_session("nb")


def check_info(check, a, b):
    st, msg, info = a.info()
    t = info.tenant if info else None
    check(st == OK and t.name == "alpha" and t.weight == 2 and t.max_sessions == 8
          and t.max_interpreters == 2 and t.max_concurrent == 3 and t.max_queued == 16
          and t.limits_max.timeout_ms == 20000, "GetInfo tells A its tenant and policy",
          (st, msg, t))
    st, msg, r = a.run("pass\n", session_id="s1")
    st, msg, info = a.info()
    check(info.tenant.sessions == 1 and info.tenant.running == 0 and info.tenant.queued == 0,
          "and its use now (one session)", info.tenant)
    st, msg, info = b.info()
    check(st == OK and info.tenant.name == "beta" and info.tenant.sessions == 0
          and info.tenant.max_sessions == 0, "GetInfo tells B its own, not A's", info.tenant)
    a.close_session("s1")
    st, msg, info = a.info()
    check(info.tenant.sessions == 0, "A's session count drops when it closes", info.tenant)


def check_logs(check, s):
    text = s.log_text()
    runs = [l for l in text.splitlines() if " event=run " in l]
    check(any(" tenant=alpha " in l for l in runs) and any(" tenant=beta " in l for l in runs)
          and all(" tenant=" in l for l in runs), "every event=run line names its tenant",
          runs[-3:])
    calls = [l for l in text.splitlines() if " event=call " in l]
    check(any(" tenant=beta " in l and "method=ListFiles" in l for l in calls),
          "event=call names the tenant of a refused call", calls[-3:])


def two_tenants(bin_dir, alpha_policy, *flags):
    """A server with tenants alpha (alpha_policy) and beta (no quota), and a
    caller of each."""
    pb = load_pb2(bin_dir)
    key_a, key_b = new_key(), new_key()
    s = TenantServer(bin_dir, {"alpha": ([key_a], alpha_policy), "beta": ([key_b], {})}, *flags)
    return s, Caller(s, pb, key_a), Caller(s, pb, key_b)


def finish(check, s, *callers):
    for c in callers:
        c.close()
    check(s.stop() == 0, "sandboxd exits 0")


def test_tenants_isolation(bin_dir, check):
    s, a, b = two_tenants(bin_dir, {"weight": 2, "max_sessions": 8, "max_interpreters": 2,
                                    "max_concurrent": 3, "max_queued": 16,
                                    "limits_max": {"timeout_ms": 20000}},
                          "--workers", "2", "--max-interpreters", "2")
    try:
        check_sessions(check, a, b)
        check_no_oracle(check, a, b)
        check_runs(check, a, b)
        check_interpreters(check, a, b)
        check_info(check, a, b)
        check_logs(check, s)
    finally:
        finish(check, s, a, b)


# ---- quotas ----

def test_tenants_quotas(bin_dir, check):
    s, a, b = two_tenants(bin_dir, {"max_sessions": 2, "max_interpreters": 1,
                                    "limits_max": {"timeout_ms": 3000}},
                          "--workers", "2", "--max-interpreters", "3")
    try:
        for sid in ("s1", "s2"):
            check(a.run("pass\n", session_id=sid)[0] == OK, f"A's session {sid}")
        st, msg, _ = a.run("pass\n", session_id="s3")
        check(st == RESOURCE_EXHAUSTED and msg ==
              "tenant alpha has its 2 sessions (max_sessions); close one (CloseSession) or wait "
              "for one to expire; nothing ran", "max_sessions: A's third session refused",
              (st, msg))
        check(b.run("pass\n", session_id="s3")[0] == OK, "B's s3 is fine (A's quota is A's)")
        for sid in ("s1", "s2"):
            a.close_session(sid)
        st, msg, _ = a.run("x = 1\n", session_id="i1", session_mode=INTERP)
        check(st == OK, "A's first interpreter", (st, msg))
        st, msg, _ = a.run("x = 2\n", session_id="i2", session_mode=INTERP)
        check(st == RESOURCE_EXHAUSTED and msg ==
              "tenant alpha has its 1 interpreters (max_interpreters); close one of its "
              "interpreter sessions (CloseSession) or wait for one to expire; nothing ran",
              "max_interpreters: A's second interpreter refused", (st, msg))
        st, msg, info = a.info()
        check(info.tenant.interpreters == 1, "GetInfo: A holds 1 interpreter", info.tenant)
        st, msg, r = a.run("x\n", session_id="i1", session_mode=INTERP)
        check(st == OK and r.result == "1", "A's first interpreter still answers", (st, msg))
        check(b.run("y = 1\n", session_id="i2", session_mode=INTERP)[0] == OK,
              "B's interpreter is fine (A's quota is A's)")
        a.close_session("i1")
        st, msg, _ = a.run("x = 2\n", session_id="i2", session_mode=INTERP)
        check(st == OK, "after A closes i1 its i2 may have one", (st, msg))
        st, msg, info = a.info()
        check(info.tenant.interpreters == 1, "GetInfo: A holds 1 interpreter again", info.tenant)
        st, msg, _ = a.run("pass\n", limits={"timeout_ms": 4000})
        check(st == INVALID_ARGUMENT and msg ==
              "limits.timeout_ms: 4000 is out of range; allowed: 1 to 3000 for tenant alpha "
              "(its limits_max) (0 = default 3000); nothing ran", "limits_max: A's ceiling",
              (st, msg))
        st, msg, r = b.run("pass\n", limits={"timeout_ms": 4000})
        check(st == OK, "B may ask for 4000 ms", (st, msg))
        st, msg, r = a.run("pass\n", limits={"timeout_ms": 3000})
        check(st == OK, "A may ask for its ceiling", (st, msg))
    finally:
        finish(check, s, a, b)


# ---- authentication ----

def test_tenants_auth(bin_dir, check):
    pb = load_pb2(bin_dir)
    key_a = new_key()
    s = TenantServer(bin_dir, {"alpha": ([key_a], {}), "guest": ([new_key()], {})},
                     "--workers", "1")
    try:
        for key, want, what in ((None, NO_KEY_MSG, "no key"),
                                (new_key(), UNKNOWN_KEY_MSG, "an unknown key"),
                                ("", NO_KEY_MSG, "an empty key"),
                                ("k" * 513, LONG_KEY_MSG, "a key of 513 bytes")):
            c = Caller(s, pb, key)
            for method, req in (("RunCode", pb.RunCodeRequest(code='print("no")\n')),
                                ("ListFiles", pb.ListFilesRequest(session_id="x"))):
                st, msg, _ = c.call(method, req)
                # Every refused RunCode says nothing ran (call_reply_not_run).
                full = want + "; nothing ran" if method == "RunCode" else want
                check(st == UNAUTHENTICATED and msg == full, f"{what}: {method} UNAUTHENTICATED",
                      (st, msg))
            st, _, _ = c.call("Health", pb.HealthRequest())
            check(st == OK, f"{what}: Health still answers", st)
            c.close()
        time.sleep(1.1)  # event=auth_failed: at most 10 lines a second
        front = pb.FrontCaller(cert_identities=["CN=alpha"], loopback=True)
        for key in (None, key_a):
            c = Caller(s, pb, key, front_caller=front)
            st, msg, _ = c.call("GetInfo", pb.GetInfoRequest())
            check(st == INVALID_ARGUMENT and msg == FRONT_MSG,
                  f"front_caller from the network refused (key {key is not None})", (st, msg))
            c.close()
        check(" event=run " not in s.log_text(), "nothing ran")
        check("reason=no_credential" in s.log_text() and "reason=unknown_key" in s.log_text()
              and "reason=key_too_long" in s.log_text()
              and "reason=front_caller_from_network" in s.log_text(),
              "event=auth_failed says why")
        check(key_a not in s.log_text(), "no key is ever logged")
        c = Caller(s, pb, "k" * 512)
        st, msg, _ = c.info()
        check(st == UNAUTHENTICATED and msg == UNKNOWN_KEY_MSG,
              "a key of 512 bytes is a key (unknown here)", (st, msg))
        c.close()
        c = Caller(s, pb, key_a)
        st, msg, info = c.info()
        check(st == OK and info.tenant.name == "alpha", "A's key: alpha", (st, msg))
        c.close()
        script = os.path.join(s.tmp, "hi.py")
        with open(script, "w") as f:
            f.write('print("hi")\n')
        p = subprocess.run([f"{bin_dir}/sandbox-run", "-e", s.tcp, "--api-key", key_a, script],
                           capture_output=True, timeout=60)
        check(p.returncode == 0 and p.stdout == b"hi\n", "sandbox-run --api-key", p.stderr)
        p = subprocess.run([f"{bin_dir}/sandbox-run", "-e", s.tcp, script],
                           capture_output=True, timeout=60, text=True,
                           env={k: v for k, v in os.environ.items() if k != "SANDBOX_API_KEY"})
        check(p.returncode != 0 and NO_KEY_MSG in p.stderr, "sandbox-run without a key",
              (p.returncode, p.stderr))
        p = subprocess.run([f"{bin_dir}/sandbox-run", "-e", s.tcp, script], capture_output=True,
                           timeout=60, env=dict(os.environ, SANDBOX_API_KEY=key_a))
        check(p.returncode == 0 and p.stdout == b"hi\n", "sandbox-run with SANDBOX_API_KEY",
              p.stderr)
    finally:
        check(s.stop() == 0, "sandboxd exits 0")
    s = TenantServer(bin_dir, {"alpha": ([key_a], {}), "guest": ([new_key()], {})}, "--workers", "1",
                     "--anonymous-tenant", "guest")
    try:
        c = Caller(s, pb, None)
        st, msg, info = c.info()
        check(st == OK and info.tenant.name == "guest",
              "--anonymous-tenant: a loopback caller without a key is guest", (st, msg))
        st, msg, r = c.run('print("anon")\n')
        check(st == OK and r.stdout == b"anon\n", "and may run", (st, msg))
        c.close()
        c = Caller(s, pb, new_key())
        st, msg, _ = c.info()
        check(st == UNAUTHENTICATED and msg == UNKNOWN_KEY_MSG,
              "a wrong key is refused even from loopback with --anonymous-tenant", (st, msg))
        c.close()
        c = Caller(s, pb, key_a)
        check(c.info()[2].tenant.name == "alpha", "a key still names its tenant")
        c.close()
    finally:
        check(s.stop() == 0, "sandboxd exits 0")


# ---- reload ----

def test_tenants_reload(bin_dir, check):
    pb = load_pb2(bin_dir)
    key_a, key_a2, key_b = new_key(), new_key(), new_key()
    s = TenantServer(bin_dir, {"alpha": ([key_a, key_a2], {}), "beta": ([key_b], {})},
                     "--workers", "1")
    try:
        a = Caller(s, pb, key_a)
        check(a.run("pass\n", session_id="keep")[0] == OK, "A's session before the reload")
        a.close()
        ev = s.reload({"alpha": ([key_a2], {"max_sessions": 5}), "beta": ([key_b], {})})
        check(ev == "tenants_reload", "SIGHUP reloads the file", ev)
        c = Caller(s, pb, key_a)
        st, msg, _ = c.info()
        check(st == UNAUTHENTICATED and msg == UNKNOWN_KEY_MSG, "the revoked key now fails",
              (st, msg))
        c.close()
        a2, b = Caller(s, pb, key_a2), Caller(s, pb, key_b)
        st, msg, info = a2.info()
        check(st == OK and info.tenant.name == "alpha" and info.tenant.max_sessions == 5,
              "A's other key works, under the new policy", (st, msg, info and info.tenant))
        st, msg, names = a2.list_files("keep")
        check(st == OK, "A's session outlived the reload", (st, msg))
        check(b.info()[0] == OK, "B's key works")
        ev = s.reload(text='{"tenants": [{"name": "alpha", "api_keys_sha256": ["nothex"]}]}')
        check(ev == "tenants_reload_failed", "a bad file: event=tenants_reload_failed", ev)
        check(a2.info()[0] == OK and b.info()[0] == OK, "the old tenants stay in use")
        c = Caller(s, pb, key_a)
        check(c.info()[0] == UNAUTHENTICATED, "the revoked key stays revoked")
        c.close()
        a2.close()
        b.close()
    finally:
        check(s.stop() == 0, "sandboxd exits 0")


# ---- metrics ----

def test_tenants_metrics(bin_dir, check):
    pb = load_pb2(bin_dir)
    key_a, key_b = new_key(), new_key()
    s = TenantServer(bin_dir, {"alpha": ([key_a], {}), "beta": ([key_b], {})},
                     "--workers", "1", "--max-interpreters", "1", "--metrics-auth", http=True)
    try:
        for headers, what in (({}, "no Authorization"),
                              ({"Authorization": f"Bearer {new_key()}"}, "an unknown key"),
                              ({"Authorization": f"Basic {key_a}"}, "another scheme"),
                              ({"Authorization": "Bearer " + "k" * 600}, "a key too long")):
            st, h, body = s.http("/metrics", headers)
            check(st == 401 and h.get("www-authenticate", "").startswith("Bearer"),
                  f"--metrics-auth: {what}: 401 with WWW-Authenticate: Bearer", (st, h))
            check(b"sandboxd_" not in body, "and no metric", body[:200])
        for path in ("/healthz", "/readyz"):
            st, _, _ = s.http(path)
            check(st == 200, f"{path} stays open", st)
        a, b, nobody = Caller(s, pb, key_a), Caller(s, pb, key_b), Caller(s, pb, None)
        a.run("pass\n", session_id="m1")
        a.run("x = 1\n", session_id="m2", session_mode=INTERP)
        a.info()
        b.info()
        b.list_files("none")
        nobody.info()
        s.reload(text="not json")
        s.reload({"alpha": ([key_a], {}), "beta": ([key_b], {})})
        st, h, body = s.http("/metrics", {"Authorization": f"Bearer {key_b}"})
        check(st == 200, "--metrics-auth: a tenant's key reads /metrics", st)
        text = body.decode()
        m = parse_metrics(text)
        req = "sandboxd_requests_total"
        check(m.get(req, tenant="alpha", method="GetInfo", code="OK") == 1
              and m.get(req, tenant="alpha", method="RunCode", code="OK") == 2
              and m.get(req, tenant="beta", method="GetInfo", code="OK") == 1
              and m.get(req, tenant="beta", method="ListFiles", code="NOT_FOUND") == 1,
              "sandboxd_requests_total by tenant",
              [k for k in m.samples if k[0] == req])
        check(m.get(req, method="GetInfo", code="UNAUTHENTICATED") == 1,
              "a call of no tenant carries no tenant label")
        check(m.get("sandboxd_tenant_sessions", tenant="alpha") == 2
              and m.get("sandboxd_tenant_sessions", tenant="beta") == 0
              and m.get("sandboxd_tenant_interpreters", tenant="alpha") == 1
              and m.get("sandboxd_tenant_interpreters", tenant="beta") == 0
              and m.get("sandboxd_tenant_running", tenant="alpha") == 0
              and m.get("sandboxd_tenant_queued", tenant="beta") == 0,
              "the per-tenant gauges", [k for k in m.samples if "tenant_" in k[0]])
        runs = "sandboxd_runs_total"
        check(m.get(runs, tenant="alpha", killed_by="none") == 2
              and m.get(runs, tenant="beta", killed_by="none") == 0
              and m.get(runs, tenant="beta", killed_by="timeout") == 0
              and m.get(runs, killed_by="none") is None,
              "sandboxd_runs_total by tenant (each tenant's series from the start)",
              [k for k in m.samples if k[0] == runs])
        check(m.get("sandboxd_auth_failures_total", reason="no_credential") == 1
              and m.get("sandboxd_auth_failures_total", reason="unknown_key") == 0,
              "sandboxd_auth_failures_total by reason (the /metrics refusals are not calls)")
        check(m.get("sandboxd_tenants_reloads_total", result="ok") == 1
              and m.get("sandboxd_tenants_reloads_total", result="failed") == 1,
              "sandboxd_tenants_reloads_total by result")
        labels = {dict(lab).get("tenant") for (_, lab) in m.samples} - {None}
        check(labels == {"alpha", "beta"}, "one tenant label value per tenant", labels)
        p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                           text=True)
        check(p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(),
              "promtool check metrics passes with no finding", (p.stdout, p.stderr))
        for c in (a, b, nobody):
            c.close()
    finally:
        check(s.stop() == 0, "sandboxd exits 0")
