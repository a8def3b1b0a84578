"""Tenant quotas on the queue (docs/DESIGN.md "The queue", issue 26) end to
end: a real sandboxd with a tenants file, callers proving who they are with
an API key in RequestEnvelope.credential (raw REQ connections, the build's
generated messages), and sandbox-run --api-key for the RunCode path.

Tests (test_<name>, ctest service_<name>):
  tenant_max_queued      a tenant's calls past its max_queued are
                         RESOURCE_EXHAUSTED naming it and the bound (StartRun
                         and RunCode alike); another tenant still queues;
                         counted as reason tenant_queue_full in /metrics
  tenant_max_concurrent  a tenant running max_concurrent calls: its next call
                         waits (QUEUED) while another tenant's call runs on
                         the idle worker; it starts when the first ends
  tenant_rate_limit      past rate_per_s/burst: RESOURCE_EXHAUSTED with a
                         retry hint, for that tenant alone; counted as reason
                         rate_limited in /metrics
"""
import contextlib
import hashlib
import http.client
import json
import os
import re
import subprocess
import time

from lib.harness import Server, WireCaller, free_port, load_pb2
from lib.prometheus import parse_metrics

OK, RESOURCE_EXHAUSTED = 0, 8
QUEUED, RUNNING, DONE = 1, 2, 3
HELLO = 'print("hello")\n'
SLEEP = "import time\ntime.sleep(120)\n"
KEYS = {"a": "key-of-tenant-a-0123456789", "b": "key-of-tenant-b-0123456789"}


class TenantServer(Server):
    """A sandboxd with a tenants file of tenants a and b (policies given)
    and the operations listener for /metrics."""

    def __init__(self, bin_dir, tmp_dir, policies, *extra):
        tenants = []
        for name, policy in policies.items():
            digest = hashlib.sha256(KEYS[name].encode()).hexdigest()
            tenants.append({"name": name, "api_keys_sha256": [digest], **policy})
        self.tenants_path = os.path.join(tmp_dir, "tenants.json")
        with open(self.tenants_path, "w") as f:
            json.dump({"tenants": tenants}, f)
        self.http_port = free_port()
        super().__init__(bin_dir, "--tenants", self.tenants_path, "--http-listen",
                         f"http://127.0.0.1:{self.http_port}", *extra)

    def rejections(self, reason):
        """sandboxd_rejections_total{reason}, summed over any other labels."""
        c = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=10)
        try:
            c.request("GET", "/metrics")
            m = parse_metrics(c.getresponse().read().decode())
        finally:
            c.close()
        return sum(v for (name, labels), v in m.samples.items()
                   if name == "sandboxd_rejections_total" and ("reason", reason) in labels)

    def run_as(self, tenant, script, *flags):
        """sandbox-run --api-key: (exit code, its --json output)."""
        path = os.path.join(self.tmp, f"run-{time.monotonic_ns()}.py")
        with open(path, "w") as f:
            f.write(script)
        p = subprocess.run([f"{self.bin_dir}/sandbox-run", "-e", self.tcp, "--json",
                            "--retries", "0", "--api-key", KEYS[tenant], *flags, path],
                           capture_output=True, text=True, timeout=120)
        try:
            return p.returncode, json.loads(p.stdout)
        except ValueError:
            return p.returncode, {"raw": p.stdout, "stderr": p.stderr}


class Caller:
    """One REQ peer (the harness's WireCaller) calling as the tenant."""

    def __init__(self, server, pb, tenant):
        self.pb = pb
        self.w = WireCaller(server.port, pb, timeout=120, key=KEYS[tenant])

    def call(self, method, request):
        return self.w.call(method, request)

    def start(self, code):
        st, msg, pl = self.call("StartRun", self.pb.RunCodeRequest(code=code))
        return st, msg, (self.pb.StartRunResponse.FromString(pl).run_id if st == OK else None)

    def run(self, code):
        st, msg, pl = self.call("RunCode", self.pb.RunCodeRequest(code=code))
        return st, msg, (self.pb.RunCodeResponse.FromString(pl) if st == OK else None)

    def watch(self, run_id, wait_ms=0, out=0):
        st, msg, pl = self.call("WatchRun", self.pb.WatchRunRequest(
            run_id=run_id, stdout_offset=out, wait_ms=wait_ms))
        return st, msg, (self.pb.WatchRunResponse.FromString(pl) if st == OK else None)

    def cancel(self, run_id):
        return self.call("CancelRun", self.pb.CancelRunRequest(run_id=run_id))[0]

    def info(self):
        st, _, pl = self.call("GetInfo", self.pb.GetInfoRequest())
        return self.pb.GetInfoResponse.FromString(pl)

    def wait_state(self, run_id, state, timeout=60):
        """True once the run is in state (polled: no timing is asserted)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st, _, w = self.watch(run_id)
            if st == OK and w.state == state:
                return True
            time.sleep(0.05)
        return False

    def outcome(self, run_id):
        """Watches to the end: the final WatchRunResponse (or None)."""
        out = 0
        for _ in range(200):
            st, _, w = self.watch(run_id, wait_ms=10000, out=out)
            if st != OK:
                return None
            out += len(w.stdout)
            if w.complete:
                return w
        return None

    def close(self):
        self.w.close()


@contextlib.contextmanager
def tenants_up(bin_dir, tmp_path, check, policies, *flags):
    """A TenantServer and a caller of each of a and b; stopped (exit 0
    checked) at the end."""
    pb = load_pb2(bin_dir)
    s = TenantServer(bin_dir, str(tmp_path), policies, *flags)
    a, b = Caller(s, pb, "a"), Caller(s, pb, "b")
    try:
        yield s, a, b
    finally:
        a.close()
        b.close()
        check(s.stop() == 0, "exits 0")


def test_tenant_max_queued(bin_dir, tmp_path, check):
    policies = {"a": {"max_queued": 1}, "b": {}}
    with tenants_up(bin_dir, tmp_path, check, policies, "--workers", "1", "--queue", "8") as (
            s, a, b):
        st, msg, busy = a.start(SLEEP)
        check(st == OK and a.wait_state(busy, RUNNING), "a's long run holds the one worker",
              (st, msg))
        st, msg, queued = a.start(HELLO)
        check(st == OK, "a's first call past the busy worker waits (max_queued 1)", (st, msg))
        want = ("tenant a: max_queued 1 of its calls already wait for a worker; retry later; "
                "nothing ran")
        st, msg, _ = a.start(HELLO)
        check((st, msg) == (RESOURCE_EXHAUSTED, want),
              "a's second waiting StartRun: RESOURCE_EXHAUSTED naming a and max_queued", (st, msg))
        st, msg, _ = a.run(HELLO)
        check((st, msg) == (RESOURCE_EXHAUSTED, want), "the same for RunCode", (st, msg))
        rc, out = s.run_as("a", HELLO)
        check(out.get("status") == "RESOURCE_EXHAUSTED" and out.get("error") == want,
              "sandbox-run --api-key sees the same refusal", out)
        st, msg, b_queued = b.start(HELLO)
        check(st == OK, "b still queues: the bound is a's alone", (st, msg))
        info = a.info()
        check(info.queue_depth == 2 and info.running == 1, "two calls wait, one runs",
              (info.queue_depth, info.running))
        check(s.rejections("tenant_queue_full") == 3,
              "sandboxd_rejections_total{reason=tenant_queue_full} counts the three",
              s.rejections("tenant_queue_full"))
        check(s.rejections("queue_full") == 0, "none of them was the queue's", 0)
        check(a.cancel(busy) == OK, "the long run cancelled")
        for who, c, rid in (("a", a, queued), ("b", b, b_queued)):
            w = c.outcome(rid)
            check(w is not None and w.result.stdout == b"hello\n",
                  f"{who}'s queued call ran once the worker was free",
                  w and w.result.stdout)


def test_tenant_max_concurrent(bin_dir, tmp_path, check):
    policies = {"a": {"max_concurrent": 1}, "b": {}}
    with tenants_up(bin_dir, tmp_path, check, policies, "--workers", "2", "--queue", "8") as (
            s, a, b):
        st, msg, busy = a.start(SLEEP)
        check(st == OK and a.wait_state(busy, RUNNING), "a runs its one call", (st, msg))
        st, msg, held = a.start(HELLO)
        check(st == OK, "a's second call is accepted (it waits)", (st, msg))
        st, msg, r = b.run(HELLO)
        check(st == OK and r.stdout == b"hello\n",
              "b's call runs on the idle worker while a's waits", (st, msg))
        st, _, w = a.watch(held)
        check(st == OK and w.state == QUEUED,
              "a's second call is still queued after b's ran: a is at max_concurrent 1",
              w and w.state)
        info = a.info()
        check(info.queue_depth == 1 and info.running == 1,
              "GetInfo: one waits, one runs, a worker idle", (info.queue_depth, info.running))
        st, msg, r = b.run(HELLO)
        check(st == OK and r.stdout == b"hello\n", "and b's next call too", (st, msg))
        check(a.cancel(busy) == OK, "a's long run cancelled")
        w = a.outcome(held)
        check(w is not None and w.result.stdout == b"hello\n",
              "a's held call runs once its first ended", w and w.result.stdout)


def test_tenant_rate_limit(bin_dir, tmp_path, check):
    # 0.05 calls/s: a token every 20 s, so the test never sees one refill.
    policies = {"a": {"rate_per_s": 0.05, "burst": 2}, "b": {}}
    with tenants_up(bin_dir, tmp_path, check, policies, "--workers", "1") as (s, a, b):
        for i in range(2):
            st, msg, r = a.run(HELLO)
            check(st == OK and r.stdout == b"hello\n", f"a's call {i + 1} of its burst of 2 runs",
                  (st, msg))
        pattern = (r"tenant a: over its rate limit \(rate_per_s 0\.05, burst 2\); "
                   r"retry in (\d+) ms; nothing ran")
        st, msg, _ = a.run(HELLO)
        m = re.fullmatch(pattern, msg)
        check(st == RESOURCE_EXHAUSTED and m is not None,
              "past the burst: RESOURCE_EXHAUSTED with a retry hint", (st, msg))
        check(m is not None and 0 < int(m.group(1)) <= 20001,
              "the hint is at most one token's time (20 s)", msg)
        st, msg, _ = a.start(HELLO)
        check(st == RESOURCE_EXHAUSTED and re.fullmatch(pattern, msg) is not None,
              "StartRun too", (st, msg))
        rc, out = s.run_as("a", HELLO)
        check(out.get("status") == "RESOURCE_EXHAUSTED"
              and re.fullmatch(pattern, out.get("error", "")) is not None,
              "sandbox-run --api-key sees the same refusal", out)
        for i in range(3):
            st, msg, r = b.run(HELLO)
            check(st == OK and r.stdout == b"hello\n", f"b (no rate limit) call {i + 1} runs",
                  (st, msg))
        check(s.rejections("rate_limited") == 3,
              "sandboxd_rejections_total{reason=rate_limited} counts the three",
              s.rejections("rate_limited"))
        info = a.info()
        check(info.runs_total == 5, "nothing of the refused calls ran", info.runs_total)
