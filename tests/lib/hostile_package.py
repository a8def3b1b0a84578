"""A package whose code runs the moment an interpreter starts: its wheel
installs `sbx_hook.pth`, whose `import` line Python's site module runs at
every start (before any script), importing `sbx_hook_boot`. Made by the
tests that prove package code runs only inside a run's sandbox (issue 24;
docs/SECURITY.md, "Package code is user code").

At import the hook records in `sbx_hook_boot.SEEN` what it could do where
it ran (its pid, seccomp mode, no_new_privs, capability sets, and whether
an IPv4 socket, a netlink socket, io_uring, new namespaces and a mount
were refused), then starts a daemon meant to outlive its run: a double
fork named `sbxhookd`, in a session of its own, serving the abstract unix
socket `@sbx-hook-<pid>` for two minutes. A later run prints SEEN and
tries that socket; the host looks for `sbxhookd` processes."""
import os

try:
    from .wheelhouse import make_wheel
except ImportError:  # imported flat, with tests/lib on sys.path (not yet converted scripts)
    from wheelhouse import make_wheel

NAME = "sbx-hook"
VERSION = "1.0"
REQUIREMENT = f"{NAME}=={VERSION}"
DAEMON_COMM = "sbxhookd"

HOOK = r'''
import ctypes, errno, os, socket, sys

SEEN = {}


def _errname(e):
    return errno.errorcode.get(e, str(e))


def _try(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return _errname(e.errno)


def _reap(pid):
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:  # SIGCHLD ignored where we run: reaped already
        pass


def _in_child(f):
    """f() in a forked child (so that our own namespaces stay): "ok" or the
    errno's name."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            res = f()
        except BaseException as e:
            res = repr(e)
        os.write(w, res.encode()[:200])
        os._exit(0)
    os.close(w)
    out = os.read(r, 256).decode()
    os.close(r)
    _reap(pid)
    return out


def _probe():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    with open("/proc/self/status") as f:
        st = dict(l.split(":", 1) for l in f if ":" in l)
    SEEN["pid"] = os.getpid()
    for k in ("Seccomp", "NoNewPrivs", "CapEff", "CapPrm", "CapBnd"):
        SEEN[k] = st.get(k, "?").strip()
    SEEN["inet"] = _try(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
    SEEN["netlink"] = _try(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close())
    params = ctypes.create_string_buffer(120)
    rc = libc.syscall(425, 1, params)  # io_uring_setup
    SEEN["io_uring"] = "ok" if rc >= 0 else _errname(ctypes.get_errno())

    def unshare():
        flags = 0x10000000 | 0x40000000 | 0x00020000  # NEWUSER | NEWNET | NEWNS
        return "ok" if libc.unshare(flags) == 0 else _errname(ctypes.get_errno())
    SEEN["unshare"] = _in_child(unshare)

    def clone(flags):
        def f():
            rc = libc.syscall(56, flags, 0, 0, 0, 0)  # raw clone, fork-like
            if rc == 0:
                os._exit(0)
            return "ok" if rc > 0 else _errname(ctypes.get_errno())
        return f
    # a network namespace (with a user namespace to own it), and the flags a
    # zygote's run's first process uses without CLONE_VM | CLONE_VFORK
    SEEN["clone_newnet"] = _in_child(clone(0x10000000 | 0x40000000 | 17))
    SEEN["clone_run_flags"] = _in_child(clone(0x10000000 | 0x20000000 | 0x00020000 | 0x08000000
                                              | 0x04000000 | 17))

    def mount():
        rc = libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)
        return "ok" if rc == 0 else _errname(ctypes.get_errno())
    SEEN["mount"] = _in_child(mount)


def _daemon():
    """Double fork: a process of its own session, named sbxhookd, serving
    @sbx-hook-<its parent's pid> for two minutes."""
    name = "sbx-hook-%d" % os.getpid()
    SEEN["socket"] = name
    pid = os.fork()
    if pid:
        _reap(pid)
        return
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, b"sbxhookd", 0, 0, 0)  # PR_SET_NAME
        for fd in (0, 1, 2):
            try:
                os.close(fd)
            except OSError:
                pass
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind("\0" + name)
        s.listen(8)
        s.settimeout(120)
        while True:
            c, _ = s.accept()
            c.sendall(b"hook daemon here\n")
            c.close()
    except BaseException:
        pass
    os._exit(0)


try:
    _probe()
except BaseException as e:
    SEEN["error"] = repr(e)
_daemon()
'''

# What a later run prints: SEEN as JSON, and whether the hook's socket
# answers (it must not: its daemon is gone with the run or the zygote start
# that made it).
REPORT = r'''
import json, socket, sys
import sbx_hook_boot
seen = dict(sbx_hook_boot.SEEN)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect("\0" + seen.get("socket", "none"))
    seen["daemon_answers"] = s.recv(64).decode()
except OSError as e:
    seen["daemon_answers"] = ""
seen["my_pid"] = __import__("os").getpid()
print(json.dumps(seen))
'''


def make_hostile_wheel(wheelhouse):
    return make_wheel(wheelhouse, NAME, VERSION,
                      {"sbx_hook.pth": "import sbx_hook_boot\n", "sbx_hook_boot.py": HOOK})


def confined(seen):
    """The things that must hold for the hook wherever it ran, as
    (what, ok) pairs."""
    return [
        ("seccomp filter (Seccomp: 2)", seen.get("Seccomp") == "2"),
        ("no_new_privs", seen.get("NoNewPrivs") == "1"),
        ("no effective capability", seen.get("CapEff") == "0000000000000000"),
        ("no permitted capability", seen.get("CapPrm") == "0000000000000000"),
        ("an empty bounding set", seen.get("CapBnd") == "0000000000000000"),
        ("socket(AF_INET) refused", seen.get("inet") == "EACCES"),
        ("socket(AF_NETLINK) refused", seen.get("netlink") == "EACCES"),
        ("io_uring_setup refused", seen.get("io_uring") == "EPERM"),
        ("unshare(NEWUSER|NEWNET|NEWNS) refused", seen.get("unshare") == "EPERM"),
        ("mount refused", seen.get("mount") == "EPERM"),
        ("clone(NEWUSER|NEWNET) refused", seen.get("clone_newnet") == "EPERM"),
        ("clone with a run's namespace flags but not its exact flags refused",
         seen.get("clone_run_flags") == "EPERM"),
    ]


def daemons(uid_base, n):
    """pids of every sbxhookd running as a uid in [uid_base, uid_base + n):
    one server's (groups run in parallel, each with its own uids)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/status") as f:
                uid = int(next(line for line in f if line.startswith("Uid:")).split()[1])
        except (OSError, StopIteration):
            continue
        if comm == DAEMON_COMM and uid_base <= uid < uid_base + n:
            found.append(int(pid))
    return found


FORKER = "sbx-forker"
FORKER_REQUIREMENT = f"{FORKER}==1.0"
FORKER_MAX = 3000
FORKER_HOOK = r'''
import os, time
FORKED = 0
for _ in range(%d):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    FORKED += 1
''' % FORKER_MAX


def make_forker_wheel(wheelhouse):
    """A package whose .pth forks sleeping children until the kernel refuses
    (at most FORKER_MAX): what a zygote that imports it may start is bounded
    by the zygotes' pids limit, and none of them outlives the start."""
    return make_wheel(wheelhouse, FORKER, "1.0",
                      {"sbx_forker.pth": "import sbx_forker_boot\n",
                       "sbx_forker_boot.py": FORKER_HOOK})


# What a package's .pth may leave in a zygote that the zygote refuses to
# serve with (zygote_main.c, check_preload_left_nothing), by wheel name:
# (code run at the interpreter's start, what the refusal says).
LEFTOVERS = {
    "sbx-left-thread": ("import threading, time\n"
                        "threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n",
                        "the preload left 2 threads running"),
    "sbx-left-shm": ("import mmap\nM = mmap.mmap(-1, 4096)\n",
                     "the preload left a shared memory mapping"),
    "sbx-left-socket": ("import os, socket\nS = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
                        "S.bind('\\0sbx-left-%d' % os.getpid())\n",
                        "the preload left a socket open"),
    # Bytes of its own on the zygote's control socket, as a start failure
    # that is not UTF-8: the caller still gets a message it can decode.
    "sbx-left-junk": ("import os\n"
                      "for fd in os.listdir('/proc/self/fd'):\n"
                      "    try:\n"
                      "        if os.readlink('/proc/self/fd/' + fd).startswith('socket:'):\n"
                      "            os.write(int(fd), b'F junk \\xff\\xfe\\xc3')\n"
                      "    except OSError:\n"
                      "        pass\n",
                      "junk \ufffd"),
}


def make_leftover_wheel(wheelhouse, name):
    mod = name.replace("-", "_")
    return make_wheel(wheelhouse, name, "1.0", {f"{mod}.pth": f"import {mod}_boot\n",
                                                f"{mod}_boot.py": LEFTOVERS[name][0]})
