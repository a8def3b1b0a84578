#!/usr/bin/python3
"""Load soak: a mixed, seeded workload through the real sandbox-run client
against a sandboxd of our own, every reply checked, then the host searched
for anything left behind.

Each request is one of: hello; a sleep; a CPU spin past its timeout; a
512 MiB allocation under a 64 MiB limit; a fork bomb under a process limit;
an output flood past the output limit; abort() (SIGABRT); 5 MiB of
artifacts in output/; stdin echoed back; an exit code; a step of one of two
sessions (a counter file). Each knows its expected killed_by, exit code,
signal and output, so a reply is either right, misclassified, another status
or lost (no reply, a transport error, a client that hung).

While it runs, sandboxd's RSS, open fds and threads are sampled. After it:
processes still running as the sandbox uids, tasks in the server's slot
cgroups, every run logged exactly once; after SIGTERM: exit status 0, the
server's cgroups, mounts under the state dir and files in its workspaces
gone. Exits 1 when any of these invariants is broken.

    /usr/bin/python3 bench/soak.py --bin-dir build/bin [--requests 5000] [--concurrency 32]
"""
import argparse
import collections
import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import soaklib  # noqa: E402

SESSIONS = ("soak-a", "soak-b")


# ---- the workload ----
# Each kind: weight, code, and a function giving the call's flags, stdin and
# what the reply must say. Weights keep the run near five minutes for 5,000
# requests on two CPUs while every kind appears hundreds of times.

def want(killed_by="none", exit_code=0, signal=0, rc=None, **extra):
    w = {"killed_by": killed_by, "exit_code": exit_code, "signal": signal, **extra}
    w["rc"] = rc if rc is not None else (124 if killed_by == "timeout"
                                         else 128 + signal if signal else exit_code)
    return w


KINDS = {
    "hello": (24, 'print("hello")\n',
              lambda rng, i: ([], None, want(stdout="hello\n"))),
    "sleep": (10, "import sys, time\ntime.sleep(float(sys.argv[1]))\nprint('slept')\n",
              lambda rng, i: (["--arg", f"{rng.uniform(0.05, 0.25):.3f}"], None,
                              want(stdout="slept\n"))),
    "spin": (7, "while True:\n    pass\n",
             lambda rng, i: (["--timeout-ms", "300"], None,
                             want("timeout", -1, 9, timeout_ms=300))),
    "memory": (7, "x = bytearray(512 << 20)\nprint(len(x))\n",
               lambda rng, i: (["--memory-mb", "64"], None, want("memory", -1, 9))),
    "forkbomb": (4, "import os\nwhile True:\n    try:\n        os.fork()\n"
                    "    except OSError:\n        pass\n",
                 lambda rng, i: (["--max-processes", "16", "--timeout-ms", "500"], None,
                                 want("timeout", -1, 9, timeout_ms=500))),
    "flood": (7, "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
              lambda rng, i: (["--output-kb", "16"], None,
                              want("output_limit", -1, 9, stdout_len=16384,
                                   stdout_truncated=True))),
    "abort": (7, "import os\nos.abort()\n",
              lambda rng, i: ([], None, want("signal", -1, 6))),
    "artifacts": (4, "import os\nfor i in range(10):\n"
                     "    open(f'output/a{i}.bin', 'wb').write(os.urandom(512 << 10))\n"
                     "print('wrote')\n",
                  lambda rng, i: ([], None, want(stdout="wrote\n",
                                                 artifacts=[512 << 10] * 10))),
    "stdin": (12, "import sys\nsys.stdout.write(sys.stdin.read())\n",
              lambda rng, i: _stdin_call(rng)),
    "exit": (8, "import sys\nsys.exit(int(sys.argv[1]))\n",
             lambda rng, i: _exit_call(rng)),
    "session": (10, "import os\nn = int(open('counter').read()) if os.path.exists('counter') "
                    "else 0\nopen('counter', 'w').write(str(n + 1))\nprint(n + 1)\n",
                None),  # flags and expectation depend on the session's history
}


def _stdin_call(rng):
    data = rng.randbytes(rng.randint(1, 24 << 10)).hex().encode()[:rng.randint(1, 32 << 10)]
    return [], data, want(stdout=data.decode())


def _exit_call(rng):
    code = rng.randint(1, 120)
    return ["--arg", str(code)], None, want(exit_code=code)


def plan(n, seed):
    """The seeded list of kinds, one per request."""
    rng = soaklib.seeded(seed)
    names = list(KINDS)
    weights = [KINDS[k][0] for k in names]
    return [rng.choices(names, weights)[0] for _ in range(n)], rng


def check_reply(r, w):
    """None when the reply is what the request must get, else why not."""
    out = r["out"]
    if out.get("status") != "OK":
        return None  # counted by status, not as a misclassification
    for key in ("killed_by", "exit_code", "signal"):
        if out.get(key) != w[key]:
            return f"{key}={out.get(key)!r}, want {w[key]!r}"
    if r["rc"] != w["rc"]:
        return f"sandbox-run exit {r['rc']}, want {w['rc']}"
    if "stdout" in w and out.get("stdout") != w["stdout"]:
        return f"stdout {out.get('stdout', '')[:60]!r}, want {w['stdout'][:60]!r}"
    if "stdout_len" in w and len(out.get("stdout", "")) != w["stdout_len"]:
        return f"stdout is {len(out.get('stdout', ''))} bytes, want {w['stdout_len']}"
    if "stdout_truncated" in w and out.get("stdout_truncated") != w["stdout_truncated"]:
        return f"stdout_truncated={out.get('stdout_truncated')}"
    if "artifacts" in w:
        got = [(a["size"], a["content_bytes"], a["content_omitted"])
               for a in out.get("artifacts", [])]
        if got != [(s, s, False) for s in w["artifacts"]]:
            return f"artifacts {got[:3]}..., want {len(w['artifacts'])} of {w['artifacts'][0]}"
    return None


class Sessions:
    """Two sessions, each used by one call at a time (a second concurrent
    call is refused by design), each counting its runs in a file: the
    counter proves every call of the session ran exactly once, in order."""

    def __init__(self):
        self.locks = {s: threading.Lock() for s in SESSIONS}
        self.count = {s: 0 for s in SESSIONS}

    def call(self, i, do_call):
        sid = SESSIONS[i % len(SESSIONS)]
        with self.locks[sid]:
            r = do_call(["--session", sid], None)
            if r["out"].get("status") == "OK":
                self.count[sid] += 1
            return r, want(stdout=f"{self.count[sid]}\n")


# ---- sampling sandboxd ----

class Sampler(threading.Thread):
    """Samples sandboxd's RSS, fds and threads every interval seconds, with the
    number of requests answered so far."""

    def __init__(self, pid, progress, interval):
        super().__init__(daemon=True)
        self.pid, self.progress, self.interval = pid, progress, interval
        self.samples = []
        self.stop_event = threading.Event()

    def run(self):
        while not self.stop_event.is_set():
            self.sample()
            self.stop_event.wait(self.interval)

    def sample(self):
        st = soaklib.proc_stats(self.pid)
        if st is not None:
            self.samples.append((time.monotonic(), self.progress(), st))

    def stop(self):
        self.stop_event.set()
        self.join(10)
        self.sample()

    def at(self, done):
        """The first sample taken once `done` requests were answered."""
        for s in self.samples:
            if s[1] >= done:
                return s
        return self.samples[-1]


# ---- the run ----

def run_load(srv, a, scripts, tmp):
    kinds, rng = plan(a.requests, a.seed)
    # Parameters are drawn up front, in request order, so that a seed gives
    # the same requests whatever the threads' timing.
    params = [None if k == "session" else KINDS[k][2](rng, i) for i, k in enumerate(kinds)]
    sessions = Sessions()
    done = [0]
    lock = threading.Lock()

    def one(i):
        kind = kinds[i]
        run_id = f"soak-{i}"

        def do_call(flags, stdin):
            return soaklib.run_call(srv.bin_dir, srv.url, scripts[kind],
                                    ["--run-id", run_id, *flags], stdin=stdin,
                                    timeout=a.call_timeout)
        if kind == "session":
            r, w = sessions.call(i, do_call)
        else:
            flags, stdin, w = params[i]
            r = do_call(flags, stdin)
        r["kind"], r["run_id"], r["want"] = kind, run_id, w
        r["wrong"] = None if r["lost"] else check_reply(r, w)
        if not r["lost"] and r["out"].get("status") == "OK" and r["out"].get("run_id") != run_id:
            r["wrong"] = f"reply for run_id {r['out'].get('run_id')}, sent {run_id}"
        with lock:
            done[0] += 1
        return r

    sampler = Sampler(srv.pid, lambda: done[0], a.sample_interval)
    sampler.start()
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(a.concurrency) as ex:
        results = list(ex.map(one, range(a.requests)))
    elapsed = time.monotonic() - t0
    sampler.stop()
    return results, elapsed, sampler, sessions


def bench_phase(srv, a, scripts):
    """hello through sandbox-bench at the same concurrency, before and after
    the mix: the service's own throughput without a client process per call,
    and whether the mix left the server slower (a ratio from the same run)."""
    if a.bench_requests <= 0:
        return None
    p = subprocess.run([f"{srv.bin_dir}/sandbox-bench", "-e", srv.url, "--concurrency",
                        str(a.concurrency), "--requests", str(a.bench_requests), "--json",
                        scripts["hello"]], capture_output=True, text=True, timeout=600)
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {"error": p.stderr[-300:], "requests": 0, "status": {}}


def bench_text(b):
    if b is None:
        return "skipped"
    lat = b.get("latency_ms", {})
    return (f"{b.get('requests')} requests, {b.get('throughput_rps', 0):.1f} req/s, "
            f"p50 {lat.get('p50', 0):.1f} ms, p99 {lat.get('p99', 0):.1f} ms, "
            + " ".join(f"{k}={v}" for k, v in b.get("status", {}).items()))


def live_leaks(srv, cgroup_dirs):
    """What must be gone once every call has been answered, server still up."""
    time.sleep(0.5)  # a reply is sent before the slot's last cleanup step ends
    procs = soaklib.procs_with_uids(srv.uids())
    tasks = soaklib.foreign_tasks_in(cgroup_dirs, srv.pid)
    ws = os.path.join(srv.state, "workspaces")
    slot_files = []
    for name in sorted(os.listdir(ws)):
        if name.startswith("slot-"):
            slot_files += [f"{name}/{f}" for f in soaklib.files_under(os.path.join(ws, name))]
    return procs, tasks, slot_files


def stopped_leaks(srv, cgroup_dirs):
    """What must be gone after SIGTERM."""
    procs = soaklib.procs_with_uids(srv.uids())
    cgroups = [d for d in cgroup_dirs if os.path.exists(d)]
    mounts = soaklib.mounts_under(srv.state)
    ws = os.path.join(srv.state, "workspaces")
    files = soaklib.files_under(ws) if os.path.isdir(ws) else []
    etc = [n for n in os.listdir(srv.state) if n.startswith("etc.")]
    return procs, cgroups, mounts, files, etc


def mib(kib):
    return f"{kib / 1024:.1f} MiB"


def report(a, srv, results, elapsed, sampler, sessions, live, stopped, exit_code, logged,
           benches, at_ready):
    """Prints the figures table; returns the list of broken invariants."""
    broken = []
    by_status = collections.Counter(r["out"].get("status", "NO_REPLY") for r in results
                                    if not r["lost"])
    lost = [r for r in results if r["lost"]]
    wrong = [r for r in results if r["wrong"]]
    not_ok = [r for r in results if not r["lost"] and r["out"].get("status") != "OK"]
    lat = [r["ms"] for r in results]
    warm_done = a.warmup if a.warmup is not None else max(100, a.requests // 10)
    s0, sw, se = sampler.samples[0], sampler.at(warm_done), sampler.samples[-1]
    peak = max(s[2]["rss_kib"] for s in sampler.samples)
    after_warm = [s[2]["rss_kib"] for s in sampler.samples if s[1] >= warm_done]
    growth = (se[2]["rss_kib"] - sw[2]["rss_kib"]) / 1024
    bench_ok = sum(b.get("status", {}).get("OK", 0) for b in benches if b)
    # Not an invariant: the CPU-time limit equals the timeout by default, and
    # a run with several processes can reach it before the wall clock; its
    # killed_by is still timeout (docs/ENGINE.md), but what does feedback say?
    cpu_first = [r for r in results if r["want"].get("timeout_ms")
                 and r["out"].get("killed_by") == "timeout"
                 and r["out"].get("wall_time_ms", 0) < r["want"]["timeout_ms"]]
    cpu_first_kinds = ", ".join(f"{k} {n}" for k, n in
                                collections.Counter(r["kind"] for r in cpu_first).items())
    cpu_first_says_timed_out = sum(any("timed out after" in f for f in r["out"]["feedback"])
                                   for r in cpu_first)

    print(f"\nsoak: {a.requests} requests, concurrency {a.concurrency}, seed {a.seed}, "
          f"workers {srv.workers}, cpus {os.cpu_count()}, uid base {srv.uid_base}")
    print(f"{'kind':<10} {'n':>5} {'ok':>5} {'wrong':>5} {'lost':>4} {'p50 ms':>8} "
          f"{'p99 ms':>8}")
    for kind in KINDS:
        rs = [r for r in results if r["kind"] == kind]
        if not rs:
            continue
        ms = [r["ms"] for r in rs]
        print(f"{kind:<10} {len(rs):>5} {sum(r['out'].get('status') == 'OK' for r in rs):>5} "
              f"{sum(bool(r['wrong']) for r in rs):>5} {sum(r['lost'] for r in rs):>4} "
              f"{soaklib.percentile(ms, 50):>8.1f} {soaklib.percentile(ms, 99):>8.1f}")
    rows = [
        ("elapsed", f"{elapsed:.1f} s"),
        ("throughput", f"{len(results) / elapsed:.1f} req/s"),
        ("latency (sandbox-run, incl. its start)",
         f"p50 {soaklib.percentile(lat, 50):.1f} ms, p99 {soaklib.percentile(lat, 99):.1f} ms, "
         f"max {max(lat):.1f} ms"),
        ("statuses", " ".join(f"{k}={v}" for k, v in sorted(by_status.items())) or "-"),
        *[(f"sandbox-bench hello, same concurrency, {when}", bench_text(b))
          for when, b in zip(("before the mix", "after the mix"), benches)],
        ("sandbox-bench throughput after / before the mix",
         f"{benches[1]['throughput_rps'] / benches[0]['throughput_rps']:.3f}"
         if all(b and b.get("throughput_rps") for b in benches) else "-"),
        ("lost replies", str(len(lost))),
        ("misclassified runs", str(len(wrong))),
        ("runs logged / distinct run_ids / calls (mix + sandbox-bench)",
         f"{len(logged)} / {len(set(logged))} / {len(results)} + {bench_ok}"),
        ("timeouts ended by CPU time before the wall clock",
         f"{len(cpu_first)} of {sum(bool(r['want'].get('timeout_ms')) for r in results)} "
         f"({cpu_first_kinds or '-'}), "
         f"feedback 'timed out after' in {cpu_first_says_timed_out}"),
        ("sessions (runs counted in-sandbox)",
         ", ".join(f"{k}={v}" for k, v in sessions.count.items())),
        ("RSS at ready (before any call)", mib(at_ready["rss_kib"])),
        ("RSS mix start / after warm-up / end / peak",
         f"{mib(s0[2]['rss_kib'])} / {mib(sw[2]['rss_kib'])} (after {sw[1]} requests) / "
         f"{mib(se[2]['rss_kib'])} / {mib(peak)}"),
        ("RSS after warm-up min..max",
         f"{mib(min(after_warm))}..{mib(max(after_warm))}" if after_warm else "-"),
        ("fds start / after warm-up / end (idle ends)",
         f"{s0[2]['fds']} / {sw[2]['fds']} / {se[2]['fds']}"),
        ("threads start / end", f"{s0[2]['threads']} / {se[2]['threads']}"),
        ("after load: sandbox-uid processes", str(len(live[0]))),
        ("after load: foreign tasks in slot cgroups", str(len(live[1]))),
        ("after load: files in slot workspaces", str(len(live[2]))),
        ("SIGTERM exit status", str(exit_code)),
        ("after stop: sandbox-uid processes", str(len(stopped[0]))),
        ("after stop: server cgroups left", str(len(stopped[1]))),
        ("after stop: mounts under state dir", str(len(stopped[2]))),
        ("after stop: files in workspaces/", str(len(stopped[3]))),
        ("after stop: etc.<pid> dirs", str(len(stopped[4]))),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")

    def bad(cond, what, evidence):
        if cond:
            broken.append(what)
            print(f"BROKEN {what}: {evidence}")
    bad(lost, "lost replies", [(r["run_id"], r["kind"], r["why"][:200]) for r in lost[:5]])
    bad(wrong, "misclassified runs",
        [(r["run_id"], r["kind"], r["wrong"]) for r in wrong[:5]])
    bad(not_ok, "calls not OK", [(r["run_id"], r["kind"], r["out"].get("status"),
                                  r["why"][:200]) for r in not_ok[:5]])
    ran = [r for r in results if not r["lost"] and r["out"].get("status") == "OK"]
    bad(bench_ok != sum(a.bench_requests for b in benches if b), "sandbox-bench calls all OK",
        [b.get("status") if b else None for b in benches])
    # sandbox-bench's runs get server-made UUIDs, ours soak-<i>: both once each.
    soak_logged = [x for x in logged if x.startswith("soak-")]
    bad(len(soak_logged) != len(ran) or len(set(logged)) != len(logged)
        or len(logged) - len(soak_logged) != bench_ok,
        "each answered run logged exactly once",
        collections.Counter(logged).most_common(3))
    bad(growth > a.rss_growth_mib, f"RSS flat after warm-up (<= {a.rss_growth_mib} MiB growth)",
        f"{growth:.1f} MiB")
    # Under load each client connection holds an fd, so the idle ends compare.
    bad(se[2]["fds"] > s0[2]["fds"] + 8, "fds back to the start once idle",
        (s0[2]["fds"], se[2]["fds"]))
    bad(live[0], "no sandbox-uid process after the load", live[0][:5])
    bad(live[1], "no foreign task in slot cgroups", live[1][:5])
    bad(live[2], "slot workspaces empty after the load", live[2][:5])
    bad(exit_code != 0, "sandboxd exits 0 on SIGTERM", exit_code)
    for i, what in enumerate(("no sandbox-uid process after stop", "no server cgroup after stop",
                              "no mount under the state dir after stop",
                              "no file in workspaces/ after stop",
                              "no etc.<pid> after stop")):
        bad(stopped[i], what, stopped[i][:5])
    print("soak:", "all invariants held" if not broken else f"{len(broken)} invariant(s) broken")
    return broken


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=soaklib.DEFAULT_BIN_DIR)
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int,
                    help="sandboxd --workers (default: its own, one per CPU)")
    ap.add_argument("--uid-base", type=int, default=51000,
                    help="sandbox uids uid-base..+workers-1 (keep within 51000-51999)")
    ap.add_argument("--warmup", type=int, help="requests before the warm-up RSS sample "
                    "(default: 10%%, at least 100)")
    ap.add_argument("--rss-growth-mib", type=float, default=8.0,
                    help="largest RSS growth from warm-up to the end that still counts as flat")
    ap.add_argument("--sample-interval", type=float, default=0.5)
    ap.add_argument("--call-timeout", type=float, default=180,
                    help="seconds one sandbox-run may take before it counts as lost")
    ap.add_argument("--bench-requests", type=int, default=500,
                    help="hello calls through sandbox-bench before and after the mix "
                    "(0: skip)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (log, state)")
    a = ap.parse_args()
    soaklib.exit_on_sigterm()
    if os.geteuid() != 0:
        sys.exit("soak.py: sandboxd needs root")
    if not 1 <= a.requests <= 100000 or not 1 <= a.concurrency <= 512:
        sys.exit("soak.py: --requests 1..100000, --concurrency 1..512")

    extra = ["--queue", str(max(64, 2 * a.concurrency))]
    if a.workers:
        extra += ["--workers", str(a.workers)]
    srv = soaklib.Sandboxd(a.bin_dir, a.uid_base, *extra)
    broken = ["did not finish"]
    try:
        scripts = {k: soaklib.write_script(srv.tmp, f"{k}.py", v[1]) for k, v in KINDS.items()}
        cgroup_dirs = soaklib.server_cgroup_dirs(srv.pid)
        print(f"sandboxd pid {srv.pid} {srv.url} state {srv.state}; cgroups: "
              f"{', '.join(cgroup_dirs) or 'none found'}", flush=True)
        at_ready = soaklib.proc_stats(srv.pid)
        benches = [bench_phase(srv, a, scripts)]
        results, elapsed, sampler, sessions = run_load(srv, a, scripts, srv.tmp)
        benches.append(bench_phase(srv, a, scripts))
        live = live_leaks(srv, cgroup_dirs)
        logged = srv.run_ids_logged()
        exit_code = srv.stop()
        stopped = stopped_leaks(srv, cgroup_dirs)
        broken = report(a, srv, results, elapsed, sampler, sessions, live, stopped, exit_code,
                        logged, benches, at_ready)
        if broken:
            print(f"server log: {srv.log_path}")
    finally:
        srv.dispose(keep=bool(a.keep or broken))
        if a.keep or broken:
            print(f"kept {srv.tmp}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
