"""Streaming and cancel (docs/STREAMING.md) end to end: StartRun, WatchRun and
CancelRun on the wire (raw REQ connections, the build's generated messages),
against a real sandboxd per test.

Tests (test_<name>, ctest service_<name>):
  streaming_chunks    output seen in chunks while the run runs (the first
                      within 300 ms of its print), the per-reply bound, the
                      offsets, the outcome, RunCode unchanged and watchable
  streaming_cancel    a running forking run cancelled: answered within
                      100 ms, nothing of it left; a queued run cancelled never
                      starts; a RunCode run cancelled by its id; idempotence
  streaming_errors    NOT_FOUND, INVALID_ARGUMENT, ALREADY_EXISTS, the caps on
                      started runs and waiting watchers, the TTLs
  streaming_watchers  32 watchers on 32 runs at once keep the server's memory
                      within the documented bound; a watcher that goes away
                      leaks nothing (contexts, fds, records)
  streaming_drain     SIGTERM: running started runs end and are watched to
                      their end, queued ones are answered UNAVAILABLE
"""
import http.server
import os
import signal
import struct
import threading
import time

from lib.harness import Server, WireCaller, load_pb2, slot_processes, wait_log

OK, CANCELLED, INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS = 0, 1, 3, 5, 6
RESOURCE_EXHAUSTED, UNAVAILABLE = 8, 14
QUEUED, RUNNING, DONE = 1, 2, 3
KILLED_BY_NONE, KILLED_BY_CANCELLED = 0, 5

TICKER = """
import sys, time
for i in range({n}):
    print(f"{{i}} {{time.monotonic():.6f}}", flush=True)
    time.sleep(0.1)
"""

FORK_FOREVER = """
import os, time
for _ in range(3):
    os.fork()
print("forked", os.getpid(), flush=True)
while True:
    time.sleep(0.05)
"""


class Streamer:
    """A WireCaller with the streaming calls spelt out."""

    def __init__(self, server, pb):
        self.pb = pb
        self.w = WireCaller(server.port, pb, timeout=90)

    def start(self, code, **kw):
        st, msg, pl = self.w.call("StartRun", self.pb.RunCodeRequest(code=code, **kw))
        return st, msg, (self.pb.StartRunResponse.FromString(pl).run_id if st == OK else None)

    def watch(self, run_id, out=0, err=0, wait_ms=10000):
        st, msg, pl = self.w.call("WatchRun", self.pb.WatchRunRequest(
            run_id=run_id, stdout_offset=out, stderr_offset=err, wait_ms=wait_ms))
        return st, msg, (self.pb.WatchRunResponse.FromString(pl) if st == OK else None)

    def cancel(self, run_id):
        st, msg, pl = self.w.call("CancelRun", self.pb.CancelRunRequest(run_id=run_id))
        return st, msg, (self.pb.CancelRunResponse.FromString(pl) if st == OK else None)

    def info(self):
        st, _, pl = self.w.call("GetInfo", self.pb.GetInfoRequest())
        return self.pb.GetInfoResponse.FromString(pl)

    def follow(self, run_id, wait_ms=10000, on_chunk=None):
        """Watches to the complete reply; returns (it, stdout, stderr,
        replies)."""
        out, err, replies = b"", b"", 0
        while True:
            st, msg, r = self.watch(run_id, len(out), len(err), wait_ms)
            if st != OK:
                raise RuntimeError(f"WatchRun: {st} {msg}")
            replies += 1
            check_offsets(r, len(out), len(err))
            if on_chunk is not None and (r.stdout or r.stderr):
                on_chunk(r)
            out += r.stdout
            err += r.stderr
            if r.complete:
                return r, out, err, replies

    def close(self):
        self.w.close()


OFFSET_ERRORS = []


def check_offsets(r, out, err):
    if r.stdout_offset != out or r.stderr_offset != err:
        OFFSET_ERRORS.append((r.stdout_offset, out, r.stderr_offset, err))


def proc_status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return None


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def sanitized(bin_dir):
    """Whether sandboxd was built with AddressSanitizer: its quarantine and
    shadow memory make RSS no measure of what the server keeps."""
    with open(os.path.join(bin_dir, "sandboxd"), "rb") as f:
        return b"__asan_init" in f.read()


def wait_until(pred, timeout=10.0, step=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()


def test_streaming_chunks(bin_dir, check):
    pb = load_pb2(bin_dir)
    s = Server(bin_dir, "--workers", "2")
    c = Streamer(s, pb)
    try:
        st, msg, rid = c.start(TICKER.format(n=20), limits=pb.Limits(timeout_ms=20000))
        check(st == OK and rid, "StartRun answers with a run id", (st, msg))
        arrivals = []  # (arrival monotonic, printed monotonic) per line
        pending = [b""]  # a chunk may end inside a line

        def on_chunk(r):
            now = time.monotonic()
            *lines, pending[0] = (pending[0] + r.stdout).split(b"\n")
            for line in lines:
                arrivals.append((now, float(line.split()[1])))
        r, out, err, replies = c.follow(rid, on_chunk=on_chunk)
        lines = out.decode().splitlines()
        check(len(lines) == 20 and r.complete and r.status == OK and r.result.stdout == out,
              "the chunks add up to the result's stdout", (len(lines), r.status, r.message))
        check(r.result.run_id == rid and r.result.killed_by == KILLED_BY_NONE
              and r.result.exit_code == 0, "the complete reply carries the whole result",
              str(r.result)[:300])
        lag = [a - p for a, p in arrivals]
        check(bool(lag) and lag[0] < 0.3, "the first chunk arrives within 300 ms of its print",
              lag[:3])
        check(replies >= 10 and arrivals[-1][0] - arrivals[0][0] > 1.5,
              "chunks arrive while the run runs, not all at its end",
              (replies, arrivals[:2], arrivals[-2:]))
        print(f"     lag of each line behind its print: median {sorted(lag)[len(lag) // 2] * 1000:.1f}"
              f" ms, max {max(lag) * 1000:.1f} ms over {len(lag)} lines, {replies} replies")
        check(not OFFSET_ERRORS, "every reply says where its bytes start", OFFSET_ERRORS[:3])
        # Read again within 5 s: the same outcome (a lost reply can be read
        # again); the offsets at the end give no bytes.
        st, msg, r2 = c.watch(rid, len(out), 0, wait_ms=0)
        check(st == OK and r2.complete and r2.result.stdout == out and r2.stdout == b"",
              "the outcome can be read again just after", (st, msg))
        # stderr, and offsets past the end are answered from the end.
        st, msg, rid = c.start('import sys\nsys.stderr.write("E" * 1000)\nprint("o")\n')
        r, out, err, _ = c.follow(rid)
        check(err == b"E" * 1000 and out == b"o\n" and r.result.stderr == err,
              "stderr streams too", (out, err[:20]))
        st, msg, r3 = c.watch(rid, 10**9, 10**9, wait_ms=0)
        check(st == OK and r3.stdout_offset == 2 and r3.stderr_offset == 1000 and r3.complete,
              "offsets past the end are answered from the end",
              (st, msg, r3 and (r3.stdout_offset, r3.stderr_offset)))
        # A large output comes in replies of at most 256 KiB a stream.
        big = 'import sys\nsys.stdout.write("x" * (3 << 20))\nsys.stderr.write("y" * (1 << 20))\n'
        st, msg, rid = c.start(big, limits=pb.Limits(output_bytes=4 << 20))
        sizes = []
        r, out, err, replies = c.follow(rid, on_chunk=lambda r: sizes.append(
            (len(r.stdout), len(r.stderr))))
        check(out == b"x" * (3 << 20) and err == b"y" * (1 << 20) and r.status == OK,
              "3 MiB of stdout and 1 MiB of stderr arrive whole", (len(out), len(err)))
        check(max(max(a, e) for a, e in sizes) <= 256 << 10 and replies >= 12,
              "each reply carries at most 256 KiB of each stream", (replies, sizes[:4]))
        # Truncation: the flags say so, and the stream stops at the limit.
        st, msg, rid = c.start('print("z" * 5000)\n', limits=pb.Limits(output_bytes=1000))
        r, out, err, _ = c.follow(rid)
        check(len(out) == 1000 and r.stdout_truncated and r.result.stdout_truncated,
              "a stream cut at the output limit says so", (len(out), r.stdout_truncated))
        # A run that failed before its code ran: the outcome is the error
        # RunCode gives.
        st, msg, rid = c.start("print(1)", files=[pb.File(path="a", url="http://127.0.0.1:1/x")])
        r, out, err, _ = c.follow(rid)
        check(st == OK and r.complete and r.status == 9 and "nothing ran" in r.message
              and not r.HasField("result"), "a run that could not start: status and message",
              (r.status, r.message))
        # RunCode is unchanged, and its run can be watched by its id while
        # it runs.
        results = {}

        def runcode():
            w = WireCaller(s.port, pb, timeout=60)
            st, msg, pl = w.call("RunCode", pb.RunCodeRequest(
                code=TICKER.format(n=8), run_id="rc-watched"))
            results["rc"] = (st, pb.RunCodeResponse.FromString(pl) if st == OK else msg)
            w.close()
        t = threading.Thread(target=runcode)
        t.start()
        got = b""
        wait_until(lambda: c.watch("rc-watched", wait_ms=0)[0] == OK, 5)
        while True:
            st, msg, r = c.watch("rc-watched", len(got), 0, wait_ms=5000)
            if st != OK:
                break
            got += r.stdout
            if r.complete:
                break
        t.join()
        st, resp = results["rc"]
        check(st == OK and resp.stdout.count(b"\n") == 8, "RunCode answers as before", results)
        check(got == resp.stdout and len(got) > 0,
              "a RunCode run can be watched by its run_id while it runs", (got[:50], st))
        check(c.watch("rc-watched", wait_ms=0)[0] == NOT_FOUND,
              "a RunCode run is not kept after its answer")
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0 on SIGTERM")


def test_streaming_cancel(bin_dir, check):
    pb = load_pb2(bin_dir)
    s = Server(bin_dir, "--workers", "2")
    uid = s.uid_base
    c = Streamer(s, pb)
    try:
        times = []
        for i in range(5):
            st, msg, rid = c.start(FORK_FOREVER, limits=pb.Limits(timeout_ms=30000))
            # Running, its tree forked: the first line is out.
            st, msg, r = c.watch(rid, wait_ms=10000)
            check(st == OK and b"forked" in r.stdout, f"run {i}: running and forked", (st, msg))
            check(wait_until(lambda: len(slot_processes(uid, 2)) >= 8, 5),
                  f"run {i}: its 8 processes are alive", slot_processes(uid, 2))
            t0 = time.monotonic()
            st, msg, cr = c.cancel(rid)
            dt = time.monotonic() - t0
            times.append(dt)
            left = slot_processes(uid, 2)
            check(st == OK and cr.state == DONE, f"run {i}: CancelRun answers DONE", (st, msg))
            check(not left, f"run {i}: no process of the run is left when CancelRun answers", left)
            st, msg, r = c.watch(rid, 10**9, 10**9, wait_ms=0)
            check(st == OK and r.complete and r.result.killed_by == KILLED_BY_CANCELLED
                  and r.result.signal == 9
                  and any("cancelled" in f for f in r.result.feedback),
                  f"run {i}: its result says killed_by CANCELLED", r and str(r.result)[:300])
        times.sort()
        print(f"     CancelRun of a running forking run: {', '.join(f'{t * 1000:.1f}' for t in times)} ms")
        check(times[len(times) // 2] < 0.1, "CancelRun answers within 100 ms (median of 5)", times)
        check(wait_log(s, "killed_by=cancelled"), "the run's log line says killed_by=cancelled")
        # Cancelling again, or a finished run, changes nothing.
        st, msg, cr = c.cancel(rid)
        check(st == OK and cr.state == DONE, "cancelling an ended run again is OK, DONE", (st, msg))
        st, msg, rid2 = c.start('print("done")')
        r, out, _, _ = c.follow(rid2)
        st, msg, cr = c.cancel(rid2)
        st2, _, r2 = c.watch(rid2, wait_ms=0)
        check(st == OK and cr.state == DONE and r2.result.killed_by == KILLED_BY_NONE
              and r2.result.stdout == b"done\n", "cancelling a finished run leaves its result",
              (st, msg))
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0 on SIGTERM")

    # A queued run cancelled never starts: one worker, held by a sleeper.
    s = Server(bin_dir, "--workers", "1", "--queue", "4")
    c = Streamer(s, pb)
    try:
        st, msg, busy = c.start("import time\nprint('busy', flush=True)\ntime.sleep(30)\n",
                                limits=pb.Limits(timeout_ms=40000))
        c.watch(busy, wait_ms=10000)
        runs_before = c.info().runs_total
        st, msg, queued = c.start("print('I ran')\n", run_id="queued-one")
        st2, _, r = c.watch(queued, wait_ms=0)
        check(st == OK and st2 == OK and r.state == QUEUED, "the second run is queued",
              (st, msg, r and r.state))
        t0 = time.monotonic()
        st, msg, cr = c.cancel(queued)
        dt = time.monotonic() - t0
        check(st == OK and cr.state == DONE and dt < 0.1,
              "CancelRun of a queued run answers DONE at once", (st, msg, dt))
        st, msg, r = c.watch(queued, wait_ms=0)
        check(st == OK and r.complete and r.status == CANCELLED and "nothing ran" in r.message
              and not r.HasField("result"), "its outcome: CANCELLED, nothing ran",
              (st, r and r.status, r and r.message))
        info = c.info()
        check(info.queue_depth == 0, "it left the queue at once", info.queue_depth)
        c.cancel(busy)
        c.follow(busy)
        # The worker is free now: the cancelled run must still not run.
        st, msg, after = c.start("print('after')")
        c.follow(after)
        time.sleep(0.3)
        lines = [ln for ln in s.log_text().splitlines() if "run_id=queued-one" in ln]
        check(len(lines) == 1 and "status=CANCELLED" in lines[0] and "slot=-" in lines[0],
              "the cancelled queued run never started (its one log line: CANCELLED, no slot)",
              lines)
        check(c.info().runs_total == runs_before + 2,
              "runs_total counts the cancelled sleeper and the next run, not the queued one",
              (runs_before, c.info().runs_total))
        # A RunCode call's run cancelled by its id from another connection.
        res = {}

        def runcode():
            w = WireCaller(s.port, pb, timeout=60)
            t0 = time.monotonic()
            st, msg, pl = w.call("RunCode", pb.RunCodeRequest(
                code=FORK_FOREVER, run_id="rc-cancel", limits=pb.Limits(timeout_ms=30000)))
            res["rc"] = (st, pb.RunCodeResponse.FromString(pl) if st == OK else msg,
                         time.monotonic() - t0)
            w.close()
        t = threading.Thread(target=runcode)
        t.start()
        wait_until(lambda: (c.watch("rc-cancel", wait_ms=0)[2] or pb.WatchRunResponse()).stdout
                   != b"", 10)
        st, msg, cr = c.cancel("rc-cancel")
        t.join(30)
        st_rc, resp, took = res.get("rc", (None, None, None))
        check(st == OK and st_rc == OK and resp.killed_by == KILLED_BY_CANCELLED and took < 10,
              "a RunCode run cancelled by its run_id answers its caller killed_by CANCELLED",
              res)
        # A RunCode call queued and cancelled: its caller hears CANCELLED.
        st, msg, busy = c.start("import time\nprint('b', flush=True)\ntime.sleep(30)\n",
                                limits=pb.Limits(timeout_ms=40000))
        c.watch(busy, wait_ms=10000)

        def runcode_queued():
            w = WireCaller(s.port, pb, timeout=60)
            st, msg, pl = w.call("RunCode", pb.RunCodeRequest(code="print(1)", run_id="rc-q"))
            res["q"] = (st, msg)
            w.close()
        t = threading.Thread(target=runcode_queued)
        t.start()
        wait_until(lambda: c.watch("rc-q", wait_ms=0)[0] == OK, 5)
        st, msg, cr = c.cancel("rc-q")
        t.join(10)
        check(res.get("q", (None,))[0] == CANCELLED and "nothing ran" in res["q"][1],
              "a queued RunCode cancelled answers its caller CANCELLED, nothing ran", res.get("q"))
        c.cancel(busy)
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0 on SIGTERM")

    # A run cancelled while it prepares (here: downloading an input file
    # from a slow server) stops before its code starts.
    class Slow(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            time.sleep(1.5)
            body = b"data"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    s = Server(bin_dir, "--workers", "1", "--download-allow-private", "1")
    c = Streamer(s, pb)
    try:
        url = f"http://127.0.0.1:{web.server_address[1]}/slow"
        st, msg, rid = c.start("print('ran')", run_id="preparing",
                               files=[pb.File(path="in.txt", url=url)])
        time.sleep(0.5)
        st2, _, r = c.watch(rid, wait_ms=0)
        check(st == OK and r.state == RUNNING, "the run is preparing (downloading)",
              (st, msg, r and r.state))
        st, msg, cr = c.cancel(rid)
        st, msg, r = c.watch(rid, wait_ms=0)
        check(st == OK and r.complete and r.status == CANCELLED and "nothing ran" in r.message
              and "before its code started" in r.message,
              "a run cancelled while preparing ends CANCELLED before its code starts",
              (st, msg, r and (r.status, r.message)))
        check("status=OK" not in "".join(ln for ln in s.log_text().splitlines()
                                         if "run_id=preparing" in ln),
              "its code never ran (its log line is not a run's)")
    finally:
        c.close()
        web.shutdown()
        check(s.stop() == 0, "server exits 0 on SIGTERM")


def test_streaming_errors(bin_dir, check):
    pb = load_pb2(bin_dir)
    s = Server(bin_dir, "--workers", "1", "--max-started-runs", "3", "--max-watchers", "2",
               "--run-result-ttl-s", "2")
    c = Streamer(s, pb)
    try:
        for bad in ("no-such-run", "../etc", "", "x" * 65, "a b"):
            st, msg, _ = c.watch(bad, wait_ms=0)
            st2, msg2, _ = c.cancel(bad)
            check(st == NOT_FOUND and st2 == NOT_FOUND and "run_id" in msg,
                  f"a bad run id {bad[:10]!r} is NOT_FOUND for WatchRun and CancelRun",
                  (st, msg, st2))
        st, msg, rid = c.start('print(1)')
        st, msg, _ = c.watch(rid, wait_ms=60001)
        check(st == INVALID_ARGUMENT and "wait_ms" in msg, "wait_ms over 60000 is refused",
              (st, msg))
        c.follow(rid)
        st, msg, _ = c.start("print(1)", limits=pb.Limits(timeout_ms=-1))
        check(st == INVALID_ARGUMENT and "nothing ran" in msg,
              "StartRun refuses what RunCode refuses", (st, msg))
        # The read outcome above is kept 5 s: then the table is empty.
        check(wait_until(lambda: c.info().started_runs == 0, 10),
              "an outcome read is dropped 5 s later", c.info().started_runs)
        # Duplicates: a run id in the table is refused.
        st, msg, rid = c.start("import time; time.sleep(1)", run_id="dup")
        st2, msg2, _ = c.start("print(2)", run_id="dup")
        w = WireCaller(s.port, pb)
        st3, msg3, _ = w.call("RunCode", pb.RunCodeRequest(code="print(3)", run_id="dup"))
        check(st == OK and st2 == ALREADY_EXISTS and st3 == ALREADY_EXISTS and "run_id" in msg2,
              "a run id already in the table is ALREADY_EXISTS", (st2, msg2, st3))
        # The cap on started runs (3, one of them "dup").
        ids = []
        for i in range(2):
            st, msg, r = c.start("import time; time.sleep(1)")
            ids.append(r)
        st, msg, _ = c.start("print(4)")
        check(st == RESOURCE_EXHAUSTED and "--max-started-runs" in msg and "nothing ran" in msg
              and all(ids), "past --max-started-runs StartRun is RESOURCE_EXHAUSTED",
              (st, msg, ids))
        for r in ["dup"] + ids:  # read before the 2 s TTL, then kept 5 s more
            c.follow(r)
        # Outcomes already read give way to new runs at the cap (they are
        # only kept for a lost reply): three more start at once.
        more = [c.start("print('more')") for _ in range(3)]
        check(all(st == OK for st, _, _ in more) and c.watch("dup", wait_ms=0)[0] == NOT_FOUND,
              "at the cap, outcomes already read make room for new runs", more)
        for _, _, r in more:
            c.follow(r)
        st, msg, pl = w.call("RunCode", pb.RunCodeRequest(code="print(5)"), timeout=60)
        check(st == OK, "RunCode is not held to the started-runs cap", (st, msg))
        # The cap on waiting watchers (2): a third waiting watch is refused.
        waiters = []

        def wait_long(run_id):
            w2 = WireCaller(s.port, pb)
            t0 = time.monotonic()
            st, msg, pl = w2.call("WatchRun", pb.WatchRunRequest(run_id=run_id, wait_ms=1500))
            waiters.append((st, pb.WatchRunResponse.FromString(pl).state if st == OK else msg,
                            round(time.monotonic() - t0, 2)))
            w2.close()
        wait_until(lambda: c.info().started_runs == 0, 10)
        st, msg, slow = c.start("import time; time.sleep(6)", limits=pb.Limits(timeout_ms=10000))
        # Out of the queue first: the answers below say RUNNING (on a loaded
        # machine the run was once still QUEUED when the watchers came).
        wait_until(lambda: (lambda w: w[0] == OK and w[2].state == RUNNING)(
            c.watch(slow, wait_ms=0)), 10)
        ts = [threading.Thread(target=wait_long, args=(slow,)) for _ in range(2)]
        for t in ts:
            t.start()
        wait_until(lambda: c.info().watchers == 2, 5)
        st, msg, _ = c.watch(slow, wait_ms=1500)
        check(st == RESOURCE_EXHAUSTED and "--max-watchers" in msg,
              "past --max-watchers a waiting watch is RESOURCE_EXHAUSTED", (st, msg))
        st, msg, r = c.watch(slow, wait_ms=0)
        check(st == OK and r.state == RUNNING, "a watch that does not wait is still answered",
              (st, msg, r.state if r is not None else None))
        for t in ts:
            t.join()
        check(len(waiters) == 2 and all(x[0] == OK and x[1] == RUNNING and 1.4 < x[2] < 3
                                        for x in waiters) and c.info().watchers == 0,
              "the waiting watchers are answered at their wait_ms, the run still running",
              waiters)
        # TTLs: an outcome nobody reads goes --run-result-ttl-s (2 s) after
        # the end; one read goes 5 s after it was read, whichever first.
        c.follow(slow)
        st, msg, rid = c.start("print('unread')")
        wait_until(lambda: c.watch(rid, wait_ms=0)[2].state == DONE, 10)
        time.sleep(2.5)
        st, msg, _ = c.watch(rid, wait_ms=0)
        check(st == NOT_FOUND, "an unread outcome is dropped after --run-result-ttl-s", (st, msg))
        check(wait_until(lambda: c.info().started_runs == 0, 10), "the table is empty again",
              c.info().started_runs)
        w.close()
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0 on SIGTERM")


def test_streaming_watchers(bin_dir, check):
    pb = load_pb2(bin_dir)
    s = Server(bin_dir, "--workers", "4", "--queue", "64", "--max-output-bytes", str(4 << 20),
               "--max-started-runs", "40",
               "--run-result-ttl-s", "3")
    pid = s.proc.pid
    c = Streamer(s, pb)
    try:
        # Warm: the same kinds of calls once, so that the baseline has the
        # allocator's arenas and nng's threads.
        st, msg, rid = c.start('print("warm")')
        c.follow(rid)
        time.sleep(0.5)
        base_rss = proc_status(pid, "VmRSS")
        base_fds = fd_count(pid)
        # 32 runs writing 1 MiB each over about 2 s, 32 watchers, one each.
        code = ('import sys, time\nfor i in range(16):\n    sys.stdout.write("%05d" % i + "v" * '
                '(65536 - 5))\n    sys.stdout.flush()\n    time.sleep(0.1)\n')
        results = [None] * 32
        peak = [0]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                v = proc_status(pid, "VmRSS") or 0
                peak[0] = max(peak[0], v)
                time.sleep(0.02)

        def one(i):
            cc = Streamer(s, pb)
            try:
                st, msg, rid = cc.start(code, limits=pb.Limits(output_bytes=1 << 20,
                                                               timeout_ms=60000))
                if st != OK:
                    results[i] = (st, msg)
                    return
                r, out, err, replies = cc.follow(rid, wait_ms=5000)
                results[i] = (r.status, out == r.result.stdout and len(out) == 1 << 20, replies)
            finally:
                cc.close()
        def wave():
            ts = [threading.Thread(target=one, args=(i,)) for i in range(32)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(180)
        sampler = threading.Thread(target=sample)
        sampler.start()
        wave()
        stop.set()
        sampler.join()
        good = sum(1 for r in results if r and r[0] == OK and r[1])
        check(good == 32, "32 watchers on 32 runs each get all 1 MiB of output and the result",
              [r for r in results if not (r and r[0] == OK and r[1])][:3])
        grown_mib = (peak[0] - base_rss) / 1024
        # docs/STREAMING.md: per started run 2 x output (the stream copies)
        # + its response (1 MiB of stdout here), the engine's own 1 MiB
        # buffer for the 4 running, and the replies in flight (at most 512
        # KiB each): 32 x 3 + 4 + 32 x 0.5 = 116 MiB.
        bound = 32 * 3 + 4 + 32 * 0.5
        print(f"     server RSS: {base_rss / 1024:.0f} MiB before, peak {peak[0] / 1024:.0f} MiB "
              f"(+{grown_mib:.0f} MiB; bound {bound:.0f} MiB)")
        asan = sanitized(bin_dir)
        if asan:
            print("     (AddressSanitizer build: the RSS bounds are not checked, LeakSanitizer "
                  "checks what is left at exit)")
        check(asan or grown_mib < bound, "the server's memory stays within the documented bound",
              (grown_mib, bound))
        check(c.info().watchers == 0, "no watcher is left waiting", c.info().watchers)
        check(wait_until(lambda: c.info().started_runs == 0, 15),
              "every outcome read is dropped within 5 s", c.info().started_runs)
        # The same again: what the first wave held was given back, so the
        # second reuses it (32 MiB of stream copies kept would show here).
        rss1 = proc_status(pid, "VmRSS")
        results[:] = [None] * 32
        wave()
        wait_until(lambda: c.info().started_runs == 0, 15)
        rss2 = proc_status(pid, "VmRSS")
        print(f"     server RSS after the first wave {rss1 / 1024:.0f} MiB, after the second "
              f"{rss2 / 1024:.0f} MiB")
        check(sum(1 for r in results if r and r[0] == OK and r[1]) == 32
              and (asan or rss2 - rss1 < 16 * 1024),
              "a second wave of 32 leaves the server's memory where the first left it",
              (rss1, rss2))

        # A watcher that goes away: its connection closes while it waits.
        st, msg, rid = c.start("import time\ntime.sleep(6)\nprint('end')",
                               limits=pb.Limits(timeout_ms=10000))
        gone = []
        for i in range(8):
            w = WireCaller(s.port, pb)
            env = pb.RequestEnvelope(method="/sandbox.v1.Sandbox/WatchRun",
                                     payload=pb.WatchRunRequest(run_id=rid,
                                                                wait_ms=1500).SerializeToString())
            body = env.SerializeToString()
            w.sock.sendall(struct.pack(">QI", len(body) + 4, 0x80000001) + body)
            gone.append(w)
        check(wait_until(lambda: c.info().watchers == 8, 5), "8 watchers wait",
              c.info().watchers)
        for w in gone:
            w.close()
        t_gone = time.monotonic()
        check(wait_until(lambda: c.info().watchers == 0, 5) and time.monotonic() - t_gone < 3,
              "watchers whose clients went away are let go at their wait_ms (the run still runs)",
              (c.info().watchers, time.monotonic() - t_gone))
        # Nobody reads the run's outcome: it goes after the TTL (3 s).
        check(wait_until(lambda: c.info().started_runs == 0, 15),
              "the run nobody watched to its end is dropped after --run-result-ttl-s",
              c.info().started_runs)
        c.close()
        c = Streamer(s, pb)
        time.sleep(0.3)
        check(fd_count(pid) <= base_fds + 1, "no file descriptor is left behind",
              (base_fds, fd_count(pid), os.listdir(f"/proc/{pid}/fd")))
        st, msg, pl = c.w.call("RunCode", pb.RunCodeRequest(code="print('still')"))
        check(st == OK and pb.RunCodeResponse.FromString(pl).stdout == b"still\n",
              "the server keeps serving", (st, msg))
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0 on SIGTERM")


def test_streaming_drain(bin_dir, check):
    pb = load_pb2(bin_dir)
    s = Server(bin_dir, "--workers", "1", "--queue", "4")
    c = Streamer(s, pb)
    try:
        st, msg, running = c.start(TICKER.format(n=10), limits=pb.Limits(timeout_ms=20000))
        c.watch(running, wait_ms=10000)
        st, msg, queued = c.start("print('never')")
        s.proc.send_signal(signal.SIGTERM)
        check(wait_log(s, "event=draining"), "the server drains")
        st, msg, r = c.watch(queued, wait_ms=0)
        check(st == OK and r.complete and r.status == UNAVAILABLE and "nothing ran" in r.message,
              "a started run queued at SIGTERM ends UNAVAILABLE, nothing ran", (st, msg, r))
        st, msg, _ = c.start("print(1)")
        check(st == UNAVAILABLE, "no new run starts while draining", (st, msg))
        r, out, err, _ = c.follow(running)
        check(r.status == OK and out.count(b"\n") == 10 and r.result.exit_code == 0,
              "a started run running at SIGTERM ends and is watched to its end",
              (r.status, out[-40:]))
    finally:
        c.close()
        check(s.stop() == 0, "server exits 0 after the drain")
