"""Shared pieces of bench/soak.py and bench/faults.py: a real sandboxd of our
own (temp state dir, free loopback port, our own uid range), calls through
the real sandbox-run, and the host-side evidence of leaks (processes of the
sandbox uids, the server's cgroups, mounts under the state dir, files left in
its workspaces, the server's RSS and open fds).

Nothing here mocks the server; everything is bounded in time. It must never
touch another engineer's server: uids, cgroups and mounts are looked up by
our own uid range, our server's pid and our own state dir only.
"""
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_BIN_DIR = os.path.join(HERE, "..", "build", "bin")
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
from harness import (SP_HEADER_REQ, SandboxdProcess, free_port,  # noqa: E402,F401
                     recv_exact, sp_connect)


def percentile(values, p):
    """Nearest-rank percentile of a list (0 for an empty one), as sandbox-bench."""
    if not values:
        return 0.0
    v = sorted(values)
    return v[min(len(v) - 1, int(p / 100.0 * (len(v) - 1) + 0.5))]


# ---- the server ----

class Sandboxd(SandboxdProcess):
    """One sandboxd started from bin_dir, on a free loopback port, with its
    state dir in tmp (made here unless given) and uids uid_base..+workers-1.
    The caller must stop() or kill() it, in a finally."""

    def __init__(self, bin_dir, uid_base, *extra, tmp=None, state=None, port=None,
                 log_name="sandboxd.log", ready_timeout=30):
        self.bin_dir = os.path.abspath(bin_dir)
        self.uid_base = uid_base
        self.extra = list(extra)
        self.tmp = tmp or tempfile.mkdtemp(prefix="sbx-soak-")
        os.chmod(self.tmp, 0o755)
        self.state = state or os.path.join(self.tmp, "state")
        self.port = port or free_port()
        self.url = f"tcp://127.0.0.1:{self.port}"
        self.log_path = os.path.join(self.tmp, log_name)
        self.proc = None
        self.start(ready_timeout)

    def command(self):
        return [f"{self.bin_dir}/sandboxd", "--listen", self.url, "--state-dir", self.state,
                "--uid-base", str(self.uid_base), *self.extra]

    def start(self, ready_timeout):
        self.spawn(self.command(), ready_timeout=ready_timeout)
        self.pid = self.proc.pid
        self.workers = int(self.log_text(self.log_offset).split(
            "event=ready", 1)[1].split("workers=", 1)[1].split()[0])

    def restart(self, ready_timeout=30):
        """Starts a new sandboxd with the same flags, port and state dir."""
        self.start(ready_timeout)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=90):
        return super().stop(timeout)

    def dispose(self, keep=False):
        """Stops the server, detaches what it left mounted, removes the temp
        dir unless keep. For finally blocks: never raises."""
        try:
            self.stop()
            unmount_under(self.state)
        finally:
            if not keep and not mounts_under(self.state):
                shutil.rmtree(self.tmp, ignore_errors=True)

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def uids(self):
        return range(self.uid_base, self.uid_base + self.workers)

    def info(self):
        p = subprocess.run([f"{self.bin_dir}/sandbox-run", "-e", self.url, "--info"],
                           capture_output=True, text=True, timeout=30)
        try:
            return json.loads(p.stdout)
        except ValueError:
            return {}

    def run_ids_logged(self, offset=0):
        """run_id of every event=run line (one per run that reached a worker and ended)."""
        ids = []
        for line in self.log_text(offset).splitlines():
            if "event=run " in line and "run_id=" in line:
                ids.append(line.split("run_id=", 1)[1].split()[0])
        return ids


# ---- calls through the real client ----

def run_call(bin_dir, url, script, flags=(), stdin=None, timeout=180):
    """One `sandbox-run --json --retries 0` call. Returns a dict: rc, out (the
    parsed JSON, {} when there is none), ms (client-side latency, process
    start included), lost (no reply or a transport error: no JSON, a client
    that hung, or the client library's own 'no reply'/'sending' errors)."""
    cmd = [f"{bin_dir}/sandbox-run", "-e", url, "--json", "--retries", "0", *flags]
    if stdin is not None:
        cmd += ["--stdin", "-"]
    cmd.append(script)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"rc": None, "out": {}, "ms": (time.perf_counter() - t0) * 1e3, "lost": True,
                "why": f"sandbox-run did not return in {timeout} s"}
    ms = (time.perf_counter() - t0) * 1e3
    try:
        out = json.loads(p.stdout)
    except ValueError:
        return {"rc": p.returncode, "out": {}, "ms": ms, "lost": True,
                "why": "no JSON: " + p.stderr.decode(errors="replace")[-300:]}
    return {"rc": p.returncode, "out": out, "ms": ms, "lost": is_transport_error(out),
            "why": out.get("error", "")}


def is_transport_error(out):
    """The client library reports a missing reply as DEADLINE_EXCEEDED or
    UNAVAILABLE with these words (client/client.c, exchange), and no
    connection to send on as UNAVAILABLE 'no endpoint connected'
    (client/fleet.c); the server's own UNAVAILABLE says 'shutting down'."""
    err = out.get("error", "")
    return out.get("status") != "OK" and ("no reply" in err or "sending the request" in err
                                          or "not a valid" in err
                                          or "no endpoint connected" in err)


def spawn_call(bin_dir, url, script, flags=(), stdin_path=None):
    """sandbox-run --json as a background process (for clients killed mid-call
    and for loads that are interrupted)."""
    cmd = [f"{bin_dir}/sandbox-run", "-e", url, "--json", "--retries", "0", *flags]
    if stdin_path is not None:
        cmd += ["--stdin", stdin_path]
    cmd.append(script)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def write_script(directory, name, code):
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write(code)
    return path


def wait_until(pred, timeout, interval=0.05):
    """Polls pred until it returns a true value or timeout seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


# ---- host-side evidence ----

def proc_stats(pid):
    """RSS (KiB), open fds and threads of a live process; None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            st = dict(line.split(":", 1) for line in f if ":" in line)
        return {"rss_kib": int(st["VmRSS"].split()[0]), "threads": int(st["Threads"]),
                "fds": len(os.listdir(f"/proc/{pid}/fd"))}
    except (OSError, KeyError, ValueError):
        return None


def procs_with_uids(uids):
    """(pid, uid, comm, state, ppid) of every process whose real uid is in uids."""
    found = []
    want = set(uids)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                st = dict(line.split(":", 1) for line in f if ":" in line)
            uid = int(st["Uid"].split()[0])
        except (OSError, KeyError, ValueError):
            continue
        if uid in want:
            found.append((int(name), uid, st.get("Name", "?").strip(),
                          st.get("State", "?").split()[0], int(st.get("PPid", "0"))))
    return found


def _unescape_mountinfo(s):
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 3 < len(s) and s[i + 1:i + 4].isdigit():
            out.append(chr(int(s[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def mountinfo(pid="self"):
    """(mount point, root, fstype, super options) of each mount seen by pid."""
    rows = []
    with open(f"/proc/{pid}/mountinfo") as f:
        for line in f:
            left, right = line.rstrip("\n").split(" - ", 1)
            fields, rfields = left.split(), right.split()
            rows.append((_unescape_mountinfo(fields[4]), _unescape_mountinfo(fields[3]),
                         rfields[0], rfields[2] if len(rfields) > 2 else ""))
    return rows


def mounts_under(path, pid="self"):
    real = os.path.realpath(path)
    return [m for m, _, _, _ in mountinfo(pid) if m == real or m.startswith(real + "/")]


def server_cgroup_dirs(pid):
    """The cgroup directories sandboxd <pid> made for itself: sandboxd.<pid>
    next to its own cgroup in every hierarchy (server/sandbox/cgroup_v1.c,
    cgroup_v2.c; on v2 the server sits in <P>/leaf and the engine in
    <P>/sandboxd.<pid>). Call while the server runs; check them after."""
    own = {}
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for c in (controllers.split(",") if controllers else ["<v2>"]):
                own[c] = path
    dirs = []
    for mnt, root, fstype, opts in mountinfo():
        if fstype == "cgroup2":
            keys = ["<v2>"]
        elif fstype == "cgroup":
            keys = [o for o in opts.split(",") if o in own]
        else:
            continue
        for key in keys[:1]:
            rel = own.get(key)
            if rel is None or not (root == "/" or rel == root or rel.startswith(root + "/")):
                continue
            rel = rel[len(root):] if root != "/" else rel
            for base in {rel.rstrip("/"), os.path.dirname(rel.rstrip("/"))}:
                d = f"{mnt}{base}/sandboxd.{pid}"
                if os.path.isdir(d) and d not in dirs:
                    dirs.append(d)
    return dirs


def foreign_tasks_in(cgroup_dirs, server_pid):
    """Tasks in the server's slot cgroups that are not server threads (v1 puts
    each worker thread in its slot's cgroups on purpose, cgroup_v1.c)."""
    found = set()
    for d in cgroup_dirs:
        for sub, _, files in os.walk(d):
            for name in ("tasks", "cgroup.procs"):
                if name not in files:
                    continue
                try:
                    ids = open(os.path.join(sub, name)).read().split()
                except OSError:
                    continue
                for t in ids:
                    if not os.path.exists(f"/proc/{server_pid}/task/{t}"):
                        found.add((sub, int(t)))
    return sorted(found)


def unmount_under(path):
    """Detaches every mount below path, deepest first: what a server killed
    with -9 and never restarted leaves (only our own state dirs get here)."""
    left = sorted(mounts_under(path), key=len, reverse=True)
    for m in left:
        subprocess.run(["umount", "-l", m], capture_output=True, timeout=30)
    return left


def files_under(path):
    """Every file and directory below path (not path itself), relative."""
    found = []
    for d, subs, files in os.walk(path):
        for n in subs + files:
            found.append(os.path.relpath(os.path.join(d, n), path))
    return sorted(found)


# ---- nng SP over TCP, by hand (for frames the real client never sends) ----



def pb_varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def pb_field(num, value):
    """One protobuf field: ints as varints, str/bytes length-delimited."""
    if isinstance(value, int):
        return pb_varint(num << 3) + pb_varint(value)
    if isinstance(value, str):
        value = value.encode()
    return pb_varint(num << 3 | 2) + pb_varint(len(value)) + value


def run_code_envelope(code, request_id="raw", run_id=None):
    """A RequestEnvelope for RunCode, packed by hand (proto/sandbox.proto)."""
    payload = pb_field(1, code) + (pb_field(4, run_id) if run_id else b"")
    return (pb_field(1, "/sandbox.v1.Sandbox/RunCode") + pb_field(2, request_id)
            + pb_field(4, payload))


def sp_frame(body, req_id):
    """A REQ message on the wire: 8-byte length, 4-byte request id (high bit set), body."""
    msg = struct.pack(">I", 0x80000000 | req_id) + body
    return struct.pack(">Q", len(msg)) + msg


def reply_status(body):
    """Status and message of a ReplyEnvelope, decoded by hand (status absent = OK)."""
    status, message, i = 0, "", 0
    while i < len(body):
        key, i = _read_varint(body, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _read_varint(body, i)
            if num == 1:
                status = v
        elif wt == 2:
            n, i = _read_varint(body, i)
            if num == 2:
                message = body[i:i + n].decode(errors="replace")
            i += n
        else:
            raise ValueError("unexpected wire type")
    return status, message


def _read_varint(b, i):
    n = shift = 0
    while True:
        if i >= len(b) or shift > 63:
            raise ValueError("truncated varint")
        n |= (b[i] & 0x7F) << shift
        i += 1
        if not b[i - 1] & 0x80:
            return n, i
        shift += 7


def sp_read_reply(sock, timeout):
    """Body of the next reply (request id stripped)."""
    n = struct.unpack(">Q", recv_exact(sock, 8, timeout))[0]
    msg = recv_exact(sock, n, timeout)
    return msg[4:]


def connection_state(sock):
    """'open' when the peer has not closed the connection, else 'closed'.
    Reads (and drops) whatever the server sent, e.g. its SP header, since a
    FIN is only seen after the data before it. Non-blocking: a socket with a
    timeout would otherwise wait for data despite MSG_DONTWAIT."""
    sock.settimeout(0)
    for _ in range(64):
        try:
            data = sock.recv(65536, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return "open"
        except OSError:
            return "closed"
        if data == b"":
            return "closed"
    return "open"


def exit_on_sigterm():
    """SIGTERM (timeout(1), a CI runner) unwinds like Ctrl-C, so that every
    finally stops our servers and unmounts our tmpfs."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, handler)


def seeded(seed):
    return random.Random(seed)
