#!/usr/bin/python3
"""Fault injection against a real sandboxd, one server per scenario, driven
by the real clients (sandbox-run, svc-probe) and, for frames no client sends,
by raw SP-over-TCP sockets. Each scenario prints PASS or FAIL with its
figures.

  a  kill -9 under load, restart on the same state dir: startup cleans up
     (cgroups, mounts, processes, etc.<pid>), no call is re-run
  b  SIGTERM under load: running calls answered OK, queued ones UNAVAILABLE
     at once (under 1 s), exit status 0
  c  clients SIGKILLed mid-run and while queued: the server keeps serving,
     the run's processes are gone after its timeout, and the queued call of
     a dead client never runs
  d  1,000 idle and a few hundred half-open TCP connections: a normal call
     is answered meanwhile, and the server closes them after its idle
     timeout (--idle-timeout-ms)
  e  garbage frames: random bytes, wrong SP headers, truncated envelopes,
     empty messages, huge length headers, mutated requests: answered or
     dropped, and the server keeps serving
  f  a full state directory (a tiny tmpfs): sandboxd refuses to start with
     a clear message and leaves nothing behind

    /usr/bin/python3 bench/faults.py --bin-dir build/bin [--only a,b]
"""
import argparse
import collections
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import soaklib  # noqa: E402

HELLO = 'print("hello")\n'
SLEEP = "import sys, time\ntime.sleep(float(sys.argv[1]))\nprint('slept')\n"
SPIN = "while True:\n    pass\n"


class Verdict:
    """Collects one scenario's checks. FAIL beats PASS."""

    def __init__(self, name):
        self.name = name
        self.checks, self.figures = [], []

    def check(self, cond, what, evidence=""):
        self.checks.append(("PASS" if cond else "FAIL", what, evidence))
        return cond

    def figure(self, what, value):
        self.figures.append((what, value))

    def result(self):
        kinds = {c[0] for c in self.checks}
        return "FAIL" if "FAIL" in kinds else "PASS"

    def print(self):
        print(f"\n== {self.name}: {self.result()}")
        for what, value in self.figures:
            print(f"   {what}: {value}")
        for status, what, evidence in self.checks:
            tail = f"  [{evidence}]" if status != "PASS" and evidence != "" else ""
            print(f"   {status:<6} {what}{tail}")


def wait_queue(srv, running, queued, timeout=30):
    """Waits until GetInfo shows `running` calls running and `queued` waiting."""
    def seen():
        info = srv.info()
        return info if (info.get("running") == running
                        and info.get("queue_depth") == queued) else None
    return soaklib.wait_until(seen, timeout, 0.05)


def reap(clients, timeout):
    """Waits for background sandbox-run processes; returns (parsed json or
    {'raw':...}, exit time) per client, killing those past timeout."""
    out = []
    deadline = time.monotonic() + timeout
    for p in clients:
        try:
            stdout, _ = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            stdout, _ = p.communicate()
        out.append(_parse(stdout))
    return out


def _parse(stdout):
    import json
    try:
        return json.loads(stdout)
    except ValueError:
        return {"raw": stdout[-300:]}


def watch_exit_times(clients):
    """A thread per client that records when it exits (monotonic)."""
    times = [None] * len(clients)

    def watch(i, p):
        p.wait()
        times[i] = time.monotonic()
    threads = [threading.Thread(target=watch, args=(i, p), daemon=True)
               for i, p in enumerate(clients)]
    for t in threads:
        t.start()
    return times, threads


def hello_ok(srv, timeout=60):
    """A normal call: (ok, latency ms)."""
    r = soaklib.run_call(srv.bin_dir, srv.url, srv.hello, timeout=timeout)
    return r["out"].get("stdout") == "hello\n", r["ms"]


def start_server(bin_dir, uid_base, *extra, **kw):
    srv = soaklib.Sandboxd(bin_dir, uid_base, *extra, **kw)
    srv.hello = soaklib.write_script(srv.tmp, "hello.py", HELLO)
    srv.sleep = soaklib.write_script(srv.tmp, "sleep.py", SLEEP)
    srv.spin = soaklib.write_script(srv.tmp, "spin.py", SPIN)
    return srv


def cleanup(srv, clients=()):
    for p in clients:
        if p.poll() is None:
            p.kill()
            p.wait()
    if srv is not None:
        srv.dispose()


def fmt_ms(values):
    if not values:
        return "-"
    return (f"min {min(values):.0f} ms, median {soaklib.percentile(values, 50):.0f} ms, "
            f"max {max(values):.0f} ms")


# ---- a: kill -9 under load, restart ----

def leftovers(srv, old_pid, cgroup_dirs):
    """What the killed server left. Its sandboxes die with it (PR_SET_PDEATHSIG)
    and wait as zombies for PID 1 to reap them: those are counted apart."""
    procs = soaklib.procs_with_uids(srv.uids())
    return {
        "processes": [p for p in procs if p[3] != "Z"],
        "zombies": [p for p in procs if p[3] == "Z"],
        "cgroups": [d for d in cgroup_dirs if os.path.exists(d)],
        "mounts": soaklib.mounts_under(srv.state),
        "etc": [n for n in os.listdir(srv.state) if n == f"etc.{old_pid}"],
        "workspaces": soaklib.files_under(os.path.join(srv.state, "workspaces")),
    }


def scenario_a(a, v):
    """kill -9 with 2 calls running and 14 queued, restart on the same state
    dir and port while the clients still wait. Every call has a run_id and
    the server logs one event=run line per run: a run_id the first server
    received must never show up in the second server's log."""
    srv, clients = None, []
    try:
        srv = start_server(a.bin_dir, a.uid_base + 100, "--workers", "2")
        baseline_mounts = sorted(soaklib.mounts_under(srv.state))
        for i in range(10):  # runs that end before the kill: logged once, never again
            soaklib.run_call(srv.bin_dir, srv.url, srv.hello, ["--run-id", f"a-warm-{i}"])
        old_pid = srv.pid
        cgroup_dirs = soaklib.server_cgroup_dirs(old_pid)
        flags = [["--run-id", "a-run-0", "--timeout-ms", "30000", "--arg", "25"],
                 ["--run-id", "a-run-1", "--timeout-ms", "30000"]]
        clients.append(soaklib.spawn_call(srv.bin_dir, srv.url, srv.sleep, flags[0]))
        clients.append(soaklib.spawn_call(srv.bin_dir, srv.url, srv.spin, flags[1]))
        v.check(wait_queue(srv, 2, 0), "two calls running before the queue fills")
        queued_ids = [f"a-queued-{i}" for i in range(14)]
        for rid in queued_ids:
            clients.append(soaklib.spawn_call(srv.bin_dir, srv.url, srv.hello, ["--run-id", rid]))
        received = wait_queue(srv, 2, 14)
        v.check(received, "all 16 calls received (2 running, 14 queued) before the kill",
                srv.info())
        sent_ids = ["a-run-0", "a-run-1"] + queued_ids
        srv.kill9()
        first_ids = srv.run_ids_logged()
        t_kill = time.monotonic()
        before = leftovers(srv, old_pid, cgroup_dirs)
        v.figure("left by kill -9 before the restart",
                 ", ".join(f"{k} {len(x)}" for k, x in before.items()))
        srv.restart()
        v.figure("restart to ready", f"{time.monotonic() - t_kill:.2f} s after the kill")
        after = leftovers(srv, old_pid, cgroup_dirs)
        v.check(not after["processes"], "no live process of the sandbox uids after the restart",
                after["processes"][:5])
        reaped = soaklib.wait_until(lambda: not soaklib.procs_with_uids(srv.uids()), 10, 0.1)
        v.figure("sandbox processes after the kill",
                 f"{len(before['processes'])} alive, {len(before['zombies'])} zombies (parent: "
                 f"PID 1) at once; all gone {time.monotonic() - t_kill:.1f} s after the kill"
                 if reaped else f"still there 10 s after: {soaklib.procs_with_uids(srv.uids())}")
        v.check(reaped, "the killed server's sandbox processes are gone within 10 s")
        v.check(not after["cgroups"], "the killed server's cgroups removed at startup",
                after["cgroups"])
        v.check(sorted(after["mounts"]) == baseline_mounts,
                "mounts under the state dir are exactly a fresh server's (old ones detached)",
                (after["mounts"], baseline_mounts))
        v.check(not after["etc"], f"etc.{old_pid} removed at startup", after["etc"])
        v.check(all(f.startswith("slot-") and "/" not in f for f in after["workspaces"]),
                "no file of the killed server left in workspaces/", after["workspaces"][:5])
        replies = reap(clients, 60)
        statuses = collections.Counter(
            r.get("status", "no JSON") + (" (transport)" if soaklib.is_transport_error(r)
                                           else "") for r in replies)
        v.figure("the 16 interrupted clients got", dict(statuses))
        v.check(all(soaklib.is_transport_error(r) for r in replies),
                "every interrupted call reports 'no reply; may or may not have run', none "
                "an answer from the new server", statuses)
        second = srv.run_ids_logged(srv.log_offset)
        rerun = sorted(set(second) & set(sent_ids))
        info = srv.info()
        v.figure("runs on the restarted server before any new call", info.get("runs_total"))
        v.check(not rerun and info.get("runs_total") == 0,
                "no call received by the killed server ran again after the restart", rerun)
        ok, ms = hello_ok(srv)
        v.check(ok, "the restarted server answers a new call", ms)
        everything = srv.run_ids_logged()
        dup = [k for k, n in collections.Counter(everything).items() if n > 1]
        v.check(not dup, "no run_id logged twice across both servers", dup)
        v.figure("runs logged by the killed server / by the restarted one (one new call)",
                 f"{len(first_ids)} / {len(srv.run_ids_logged(srv.log_offset))}")
        v.check(srv.stop() == 0, "the restarted server exits 0 on SIGTERM")
    finally:
        cleanup(srv, clients)


# ---- b: SIGTERM under load ----

def scenario_b(a, v):
    srv, clients = None, []
    try:
        srv = start_server(a.bin_dir, a.uid_base + 200, "--workers", "2")
        clients.append(soaklib.spawn_call(srv.bin_dir, srv.url, srv.sleep,
                                          ["--run-id", "b-run-0", "--arg", "3",
                                           "--timeout-ms", "10000"]))
        clients.append(soaklib.spawn_call(srv.bin_dir, srv.url, srv.spin,
                                          ["--run-id", "b-run-1", "--timeout-ms", "3000"]))
        v.check(wait_queue(srv, 2, 0), "two calls running")
        n_queued = 12
        for i in range(n_queued):
            clients.append(soaklib.spawn_call(srv.bin_dir, srv.url, srv.hello,
                                              ["--run-id", f"b-queued-{i}"]))
        v.check(wait_queue(srv, 2, n_queued), f"{n_queued} calls queued behind them", srv.info())
        times, threads = watch_exit_times(clients)
        t_term = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        late = soaklib.run_call(srv.bin_dir, srv.url, srv.hello, ["--run-id", "b-late"],
                                timeout=30)
        replies = reap(clients, 60)
        for t in threads:
            t.join(5)
        try:
            code = srv.proc.wait(90)
        except subprocess.TimeoutExpired:
            code = None
        t_exit = time.monotonic()
        running, queued = replies[:2], replies[2:]
        waits = [(t - t_term) * 1e3 for t in times[2:] if t is not None]
        v.check(all(r.get("status") == "OK" for r in running)
                and running[0].get("stdout") == "slept\n"
                and running[1].get("killed_by") == "timeout",
                "running calls finish and are answered OK (sleep; spin killed by its timeout)",
                [(r.get("status"), r.get("killed_by")) for r in running])
        v.check(all(r.get("status") == "UNAVAILABLE" and "nothing ran" in r.get("error", "")
                    for r in queued), "every queued call is answered UNAVAILABLE (nothing ran)",
                collections.Counter(r.get("status", "no JSON") for r in queued))
        ran = set(srv.run_ids_logged())
        v.check(not ran & {f"b-queued-{i}" for i in range(n_queued)} and "b-late" not in ran,
                "no queued or late call ran", sorted(ran))
        v.check(late["out"].get("status") == "UNAVAILABLE",
                "a new call during the drain is answered UNAVAILABLE",
                (late["out"].get("status"), late["why"][:120]))
        v.figure("new call during the drain answered in", f"{late['ms']:.0f} ms")
        v.figure("queued calls' wait for UNAVAILABLE after SIGTERM", fmt_ms(waits))
        v.check(waits and max(waits) < 1000, "queued calls get UNAVAILABLE at once (< 1 s), "
                "not after the running calls end", fmt_ms(waits))
        v.figure("exit after SIGTERM", f"{t_exit - t_term:.2f} s, status {code}")
        v.check(code == 0, "sandboxd exits 0", code)
        v.check(not soaklib.procs_with_uids(srv.uids()), "no sandbox process left")
    finally:
        cleanup(srv, clients)


# ---- c: clients killed ----

def scenario_c(a, v):
    srv, clients = None, []
    try:
        srv = start_server(a.bin_dir, a.uid_base + 300, "--workers", "2")
        # 1. A client killed while its call runs (a spin with a 3 s timeout).
        p = soaklib.spawn_call(srv.bin_dir, srv.url, srv.spin,
                               ["--run-id", "c-running", "--timeout-ms", "3000"])
        clients.append(p)
        started = soaklib.wait_until(lambda: soaklib.procs_with_uids(srv.uids()), 15)
        v.check(started, "the spin is running as a sandbox uid")
        p.kill()
        p.wait()
        t_kill = time.monotonic()
        ok, ms = hello_ok(srv)
        v.check(ok, "the server answers another call right after the client died", ms)
        v.figure("that call's latency", f"{ms:.0f} ms")
        gone = soaklib.wait_until(lambda: not soaklib.procs_with_uids(srv.uids()), 15)
        v.figure("the dead client's run: processes gone after",
                 f"{time.monotonic() - t_kill:.2f} s after the client died (timeout 3 s)")
        v.check(gone, "the run's processes are gone after its timeout",
                soaklib.procs_with_uids(srv.uids()))
        line = soaklib.wait_until(lambda: [l for l in srv.log_text().splitlines()
                                           if "run_id=c-running " in l], 5)
        v.check(line and "killed_by=timeout" in line[0],
                "the run ended by its timeout and was logged", line)
        # 2. A client killed while its call is still queued: both workers
        # busy with 3 s sleeps. Its side effect: the log line, and a file in
        # session c-queued-session, read back with ReadFile.
        for i in range(2):
            clients.append(soaklib.spawn_call(srv.bin_dir, srv.url, srv.sleep,
                                              ["--run-id", f"c-fill-{i}", "--arg", "3"]))
        v.check(wait_queue(srv, 2, 0), "both workers busy")
        marker = soaklib.write_script(srv.tmp, "marker.py",
                                      "open('ran-marker', 'w').write('ran')\nprint('ran')\n")
        q = soaklib.spawn_call(srv.bin_dir, srv.url, marker,
                               ["--run-id", "c-queued", "--session", "c-queued-session"])
        clients.append(q)
        v.check(wait_queue(srv, 2, 1), "the call is queued")
        q.kill()
        q.wait()
        reap(clients[1:3], 30)
        time.sleep(1.0)
        ran_log = "c-queued" in srv.run_ids_logged()
        rd = subprocess.run([f"{srv.bin_dir}/sandbox-run", "-e", srv.url, "--json", "--session",
                             "c-queued-session", "--read-file", "ran-marker"],
                            capture_output=True, timeout=30)
        ran_file = _parse(rd.stdout).get("content") == "ran"
        v.figure("queued call of a SIGKILLed client still ran",
                 f"{'yes' if ran_log else 'no'} (log event=run run_id=c-queued), "
                 f"{'yes' if ran_file else 'no'} (its session file)")
        v.check(not ran_log and not ran_file,
                "a queued call whose client is gone is dropped, not run",
                f"log={ran_log} file={ran_file}")
        ok, ms = hello_ok(srv)
        v.check(ok and srv.alive(), "the server still serves", ms)
        v.check(srv.stop() == 0, "sandboxd exits 0")
    finally:
        cleanup(srv, clients)


# ---- d: idle and half-open connections ----

def idle_timeout_flag(bin_dir):
    """(flag, value) for an idle/connection timeout in sandboxd --help, or None."""
    text = subprocess.run([f"{bin_dir}/sandboxd", "--help"], capture_output=True,
                          text=True, timeout=10).stdout
    for line in text.splitlines():
        m = re.match(r"\s*--([a-z0-9-]+)\s", line)
        if m and re.search(r"idle|connection|handshake|keepalive", m.group(1)) \
                and re.search(r"timeout|-ms|-s\b", m.group(1)):
            name = m.group(1)
            return name, "2" if name.endswith("-s") else "2000"
    return None


HALF_OPEN = {
    # name: bytes sent after connect (then nothing)
    "idle (nothing sent)": b"",
    "half an SP header": soaklib.SP_HEADER_REQ[:4],
    "SP header only (an idle client)": soaklib.SP_HEADER_REQ,
    "header + half a length": soaklib.SP_HEADER_REQ + struct.pack(">Q", 64)[:4],
    "header + length + part of a body": soaklib.SP_HEADER_REQ + struct.pack(">Q", 64) + b"\x80\0",
}


class Conn:
    """One raw connection and when it was opened and seen closed."""

    def __init__(self, sock, opened):
        self.sock, self.opened, self.closed = sock, opened, None


def open_connections(port, n, payload, errors):
    conns = []
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            if payload:
                s.sendall(payload)
            conns.append(Conn(s, time.monotonic()))
        except OSError as e:
            errors[type(e).__name__] += 1
    return conns


def watch_connections(srv, groups, until, v):
    """Polls every connection twice a second until `until` (monotonic),
    noting when each is seen closed; a normal call every few seconds shows
    the server still answers meanwhile."""
    next_call = time.monotonic()
    while time.monotonic() < until:
        now = time.monotonic()
        for conns in groups.values():
            for c in conns:
                if c.closed is None and soaklib.connection_state(c.sock) == "closed":
                    c.closed = now
        if now >= next_call:
            ok, ms = hello_ok(srv, timeout=60)
            v.check(ok, f"a normal call is answered while they are held "
                        f"({now - min(c.opened for cs in groups.values() for c in cs):.0f} s "
                        f"after the first opened)", ms)
            next_call = now + 5
        time.sleep(0.5)


def lifetime(conns, end):
    """'closed n/N after a..b s' and/or 'open n/N for >= x s', per group."""
    closed = [c.closed - c.opened for c in conns if c.closed is not None]
    still = [end - c.opened for c in conns if c.closed is None]
    parts = []
    if closed:
        parts.append(f"closed {len(closed)}/{len(conns)} after {min(closed):.1f}.."
                     f"{max(closed):.1f} s")
    if still:
        parts.append(f"open {len(still)}/{len(conns)} after {min(still):.1f} s")
    return ", ".join(parts)


def scenario_d(a, v):
    srv, groups = None, {}
    flag = idle_timeout_flag(a.bin_dir)
    try:
        extra = ["--" + flag[0], flag[1]] if flag else []
        srv = start_server(a.bin_dir, a.uid_base + 400, *extra)
        v.figure("idle-timeout flag in sandboxd --help",
                 f"--{flag[0]} (used: {flag[1]})" if flag else "none")
        fds0 = soaklib.proc_stats(srv.pid)["fds"]
        errors = collections.Counter()
        t0 = time.monotonic()
        for name, payload in HALF_OPEN.items():
            n = a.idle_connections if name.startswith("idle") else a.half_open
            groups[name] = open_connections(srv.port, n, payload, errors)
        t_open = time.monotonic()
        v.figure("connections opened", f"{sum(map(len, groups.values()))} in "
                 f"{t_open - t0:.1f} s, connect errors {dict(errors) or 0}")
        v.check(not errors, "every connection accepted", dict(errors))
        time.sleep(0.5)
        fds = soaklib.proc_stats(srv.pid)["fds"]
        v.figure("server fds: before / with the connections", f"{fds0} / {fds}")
        ok, ms = hello_ok(srv, timeout=60)
        v.check(ok, "a normal call is answered with all of them open", ms)
        v.figure("that call's latency", f"{ms:.0f} ms")
        watch_connections(srv, groups, t_open + a.observe, v)
        end = time.monotonic()
        for name, conns in groups.items():
            v.figure(name, lifetime(conns, end))
        still = {name: sum(c.closed is None for c in conns) for name, conns in groups.items()}
        all_closed = not any(still.values())
        if flag:
            v.check(all_closed, f"--{flag[0]} closes idle and half-open connections", still)
        else:
            v.check(all_closed, "idle and half-open connections are closed by the server",
                    f"open after >= {a.observe} s: "
                    + ", ".join(f"{k} {n}" for k, n in still.items() if n))
        for conns in groups.values():
            for c in conns:
                c.sock.close()
        groups = {}
        back = soaklib.wait_until(
            lambda: soaklib.proc_stats(srv.pid)["fds"] <= fds0 + 4, 10, 0.2)
        v.check(back, "server fds back to where they were once the clients close",
                (fds0, soaklib.proc_stats(srv.pid)["fds"]))
        ok, _ = hello_ok(srv)
        v.check(ok and srv.alive(), "the server still serves")
        v.check(srv.stop() == 0, "sandboxd exits 0")
    finally:
        for conns in groups.values():
            for c in conns:
                c.sock.close()
        cleanup(srv)


# ---- e: garbage frames ----

def raw_exchange(port, data, timeout=3.0, handshake=True):
    """Sends data on a fresh connection (after the SP handshake when asked);
    returns 'reply STATUS', 'dropped' (closed without a reply) or 'no reply'."""
    try:
        s = soaklib.sp_connect(port) if handshake else socket.create_connection(
            ("127.0.0.1", port), timeout=5)
    except (OSError, ConnectionError) as e:
        return f"handshake failed: {e}"
    try:
        s.sendall(data)
        if not handshake:
            s.settimeout(timeout)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:  # the server's header, then EOF
                if not s.recv(4096):
                    return "dropped"
            return "no reply"
        body = soaklib.sp_read_reply(s, timeout)
        return "reply " + status_name(soaklib.reply_status(body)[0])
    except socket.timeout:
        return "no reply"
    except (ConnectionError, OSError):
        return "dropped"
    except ValueError:
        return "undecodable reply"
    finally:
        s.close()


STATUS_NAMES = ["OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
                "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
                "UNAVAILABLE"]


def status_name(n):
    return STATUS_NAMES[n] if 0 <= n < len(STATUS_NAMES) else str(n)


def garbage_cases(rng, max_message):
    """(name, bytes, handshake first?, acceptable outcomes)."""
    env = soaklib.run_code_envelope(HELLO, "raw-1")
    frame = soaklib.sp_frame
    both = {"dropped", "no reply", "reply INVALID_ARGUMENT", "reply UNIMPLEMENTED"}
    return [
        ("random bytes instead of an SP header", rng.randbytes(64), False, {"dropped"}),
        ("SP header of another protocol (PUB)", b"\x00SP\x00\x00\x20\x00\x00", False,
         {"dropped"}),
        ("random body", frame(rng.randbytes(200), 1), True, {"reply INVALID_ARGUMENT"}),
        ("envelope cut in half", frame(env[:len(env) // 2], 2), True,
         {"reply INVALID_ARGUMENT"}),
        ("envelope minus its last byte", frame(env[:-1], 3), True, {"reply INVALID_ARGUMENT"}),
        ("empty message (no request id)", struct.pack(">Q", 0), True, {"dropped", "no reply"}),
        ("request id only, empty envelope", frame(b"", 4), True, both),
        ("request id without its high bit", struct.pack(">QI", 4 + len(env), 5) + env, True,
         {"dropped", "no reply"}),
        ("length 2^63-1", struct.pack(">Q", (1 << 63) - 1) + b"\x80\0\0\1", True, {"dropped"}),
        ("length 2^40", struct.pack(">Q", 1 << 40) + b"\x80\0\0\1", True, {"dropped"}),
        ("length max-message-bytes + 1", struct.pack(">Q", max_message + 5) + b"\x80\0\0\1"
         + b"A" * 1000, True, {"dropped"}),
        ("length 1000, 10 bytes sent", struct.pack(">Q", 1000) + b"\x80\0\0\1" + b"x" * 6, True,
         {"no reply"}),
        ("a valid request (control)", frame(env, 6), True, {"reply OK"}),
    ]


def mutated_envelopes(rng, n):
    """A valid hello request with 1-4 random bytes changed, n times."""
    base = bytearray(soaklib.run_code_envelope(HELLO, "mut"))
    for _ in range(n):
        b = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        yield bytes(b)


def scenario_e(a, v):
    srv = None
    try:
        max_message = 1 << 20
        srv = start_server(a.bin_dir, a.uid_base + 500, "--max-message-bytes", str(max_message))
        fds0 = soaklib.proc_stats(srv.pid)["fds"]
        rng = soaklib.seeded(a.seed)
        for name, data, handshake, fine in garbage_cases(rng, max_message):
            got = raw_exchange(srv.port, data, handshake=handshake)
            v.check(got in fine and srv.alive(), f"{name}: {got}", f"want {sorted(fine)}")
        for mode in (["garbage"], ["badpayload"], ["nulpath"], ["method", "/x.Y/Z"],
                     ["oversize", str(max_message + 1)]):
            out = subprocess.run([f"{a.bin_dir}/svc-probe", srv.url, *mode],
                                 capture_output=True, text=True, timeout=30).stdout.strip()
            want = "NO_REPLY" if mode[0] == "oversize" else (
                "UNIMPLEMENTED" if mode[0] == "method" else "INVALID_ARGUMENT")
            v.check(out.startswith(want) and srv.alive(), f"svc-probe {mode[0]}: {out[:60]}",
                    f"want {want}")
        outcomes = collections.Counter()
        t0 = time.monotonic()
        for i, body in enumerate(mutated_envelopes(rng, a.mutations)):
            outcomes[raw_exchange(srv.port, soaklib.sp_frame(body, 1000 + i), timeout=10)] += 1
        v.figure(f"{a.mutations} mutated requests ({time.monotonic() - t0:.1f} s)",
                 dict(sorted(outcomes.items())))
        v.check(srv.alive() and "no reply" not in outcomes,
                "every mutated request answered or dropped, server alive", dict(outcomes))
        ok, _ = hello_ok(srv)
        v.check(ok, "the server answers a normal call after the garbage")
        fds = soaklib.wait_until(lambda: soaklib.proc_stats(srv.pid)["fds"] <= fds0 + 4, 10)
        v.check(fds, "no fd left open by the garbage connections",
                (fds0, soaklib.proc_stats(srv.pid)["fds"]))
        v.figure("log lines recv_error", srv.log_text().count("event=recv_error"))
        v.check(srv.stop() == 0, "sandboxd exits 0")
    finally:
        cleanup(srv)


# ---- f: a full state directory ----

def cgroup_candidates(pid):
    """Where sandboxd <pid> (a child of ours, now gone) would have made its
    cgroups: sandboxd.<pid> beside our own cgroup in each hierarchy."""
    out = []
    own = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctrl, path = line.rstrip("\n").split(":", 2)
            for c in (ctrl.split(",") if ctrl else ["<v2>"]):
                own[c] = path
    for mnt, root, fstype, opts in soaklib.mountinfo():
        keys = ["<v2>"] if fstype == "cgroup2" else [o for o in opts.split(",") if o in own] \
            if fstype == "cgroup" else []
        for key in keys[:1]:
            rel = own[key] if root == "/" else own[key][len(root):]
            out.append(f"{mnt}{rel.rstrip('/')}/sandboxd.{pid}")
    return out


def fill(path):
    """Writes until the filesystem is full; returns the bytes written."""
    n = 0
    with open(os.path.join(path, "filler"), "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
                n += 65536
        except OSError:
            pass
    try:  # the last partial page too
        with open(os.path.join(path, "filler2"), "wb") as f:
            f.write(b"\0" * 4096)
    except OSError:
        pass
    return n


def scenario_f(a, v):
    tmp = tempfile.mkdtemp(prefix="sbx-full-")
    mnt = os.path.join(tmp, "full")
    os.mkdir(mnt)
    mounted = False
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", mnt], check=True)
        mounted = True
        v.figure("filled", f"{fill(mnt)} bytes into a 512 KiB tmpfs")
        state = os.path.join(mnt, "state")
        port = soaklib.free_port()
        cmd = [f"{a.bin_dir}/sandboxd", "--listen", f"tcp://127.0.0.1:{port}", "--state-dir",
               state, "--uid-base", str(a.uid_base + 600)]
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            out, _ = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        text = out.decode(errors="replace").strip()
        v.figure("exit", f"status {p.returncode} after {time.monotonic() - t0:.2f} s")
        v.figure("message", text.splitlines()[-1] if text else "(none)")
        v.check(p.returncode not in (0, None), "sandboxd refuses to start", p.returncode)
        v.check("No space left on device" in text or "ENOSPC" in text,
                "the message names the full disk", text[-300:])
        # What a clean start-and-stop leaves too: the state dir, root/ and
        # workspaces/, all empty. Anything else is left behind.
        skeleton = {"root", "workspaces"}
        left = [f for f in soaklib.files_under(state) if f not in skeleton] \
            if os.path.isdir(state) else []
        v.figure("left in the state dir", left or "nothing beyond state/, root/, workspaces/")
        v.check(not left, "nothing left in the state dir",
                "known: partial etc.<pid> (rootfs_init fails after mkdir; engine.c does not "
                f"call rootfs_destroy) {left[:8]}")
        cgroups = [d for d in cgroup_candidates(p.pid) if os.path.exists(d)]
        v.check(not cgroups, "no cgroup left", cgroups)
        mounts = [m for m in soaklib.mounts_under(mnt) if m != os.path.realpath(mnt)]
        v.check(not mounts, "no mount left under the state dir", mounts)
        # Space again: does the next start on this state dir clear what the
        # failed one left (rootfs.c removes etc.<pid> of dead pids)?
        for name in ("filler", "filler2"):
            if os.path.exists(os.path.join(mnt, name)):
                os.unlink(os.path.join(mnt, name))
        srv = soaklib.Sandboxd(a.bin_dir, a.uid_base + 600, tmp=tmp, state=state)
        try:
            stale = [f for f in os.listdir(state) if f == f"etc.{p.pid}"]
            v.figure("after freeing space, the next start", "ready; "
                     + (f"etc.{p.pid} still there" if stale else f"removed etc.{p.pid}"))
            v.check(not stale, "the next start clears what the failed one left", stale)
        finally:
            srv.stop()
            soaklib.unmount_under(state)
    finally:
        if mounted:
            for m in sorted(soaklib.mounts_under(mnt), key=len, reverse=True):
                subprocess.run(["umount", "-l", m], capture_output=True)
        if not soaklib.mounts_under(mnt):
            shutil.rmtree(tmp, ignore_errors=True)


SCENARIOS = {
    "a": ("kill -9 under load, restart on the same state dir", scenario_a),
    "b": ("SIGTERM under load", scenario_b),
    "c": ("clients killed mid-run and while queued", scenario_c),
    "d": ("idle and half-open connections", scenario_d),
    "e": ("garbage frames", scenario_e),
    "f": ("a full state directory", scenario_f),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=soaklib.DEFAULT_BIN_DIR)
    ap.add_argument("--only", default="abcdef", help="scenarios to run, e.g. a,c")
    ap.add_argument("--uid-base", type=int, default=51000,
                    help="scenario x uses uid-base + 100*(x's index + 1); keep within 51000-51999")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--idle-connections", type=int, default=1000)
    ap.add_argument("--half-open", type=int, default=100, help="connections per half-open kind")
    ap.add_argument("--observe", type=int, default=15,
                    help="seconds to watch idle connections (nng's handshake timeout is 10 s)")
    ap.add_argument("--mutations", type=int, default=300)
    a = ap.parse_args()
    soaklib.exit_on_sigterm()
    a.bin_dir = os.path.abspath(a.bin_dir)
    if os.geteuid() != 0:
        sys.exit("faults.py: sandboxd and the tmpfs need root")
    chosen = [k for k in SCENARIOS if k in a.only]
    t0 = time.monotonic()
    verdicts = []
    for key in chosen:
        title, fn = SCENARIOS[key]
        v = Verdict(f"({key}) {title}")
        t = time.monotonic()
        try:
            fn(a, v)
        except Exception as e:  # a crash of the scenario is a failure, with its reason
            import traceback
            traceback.print_exc()
            v.check(False, "scenario ran to the end", repr(e))
        v.figure("time", f"{time.monotonic() - t:.1f} s")
        v.print()
        sys.stdout.flush()
        verdicts.append(v)
    print(f"\nfaults: {len(verdicts)} scenario(s) in {time.monotonic() - t0:.0f} s")
    for v in verdicts:
        print(f"  {v.result():<6} {v.name}")
    return 1 if any(v.result() == "FAIL" for v in verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
