"""uid ranges for the sandboxd servers the tests start, handed out so that
tests running at once (ctest -j, helpers beside each other) never share one.

A server runs slot i as uid and gid uid-base + i (its workers, then its
interpreters: --uid-base in server/settings.c). allocate(n) returns the base
of n free uids inside WINDOW, made of BLOCK-wide blocks, each held with an
flock on its own lock file under LOCK_DIR until this process exits (or
release_all): a block is never handed to two processes at once, and a
restarted server of the same test may take its base again with claim().

A block is skipped when a process runs with a uid or gid in it (a server a
crashed test left, a test that picks its own base) or when the passwd or
group database names one of its ids (a real user), so a check that no
process of a server's uids is left stays strict.

Must never: hand out a uid a real user or another live test holds; follow a
symlink in LOCK_DIR (the files are opened as root).
"""
import errno
import fcntl
import grp
import os
import pwd
import stat

BLOCK = 32
# Below Debian's dynamically allocated uids (60000-64999, systemd's
# DynamicUser 61184-65519) and below the bases tests and bench/ still pick by
# hand (40000 and up); SBX_TEST_UIDS=LO-HI moves it.
WINDOW = tuple(int(x) for x in os.environ.get("SBX_TEST_UIDS", "20000-40000").split("-"))
LOCK_DIR = os.environ.get("SBX_TEST_UID_LOCKS", "/run/sandboxd-tests-uids" if os.geteuid() == 0
                          else f"/tmp/sandboxd-tests-uids-{os.geteuid()}")

_held = {}  # block start -> the fd holding its lock


def _lock_dir():
    """LOCK_DIR, made 0700 when missing; refused unless it is a real
    directory of ours (not a symlink another user planted)."""
    d = LOCK_DIR
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise RuntimeError(f"{d}: not a directory of uid {os.geteuid()} writable only by it")
    return d


def _lock(start):
    """True when this process now holds block `start` (or already did)."""
    if start in _held:
        return True
    path = os.path.join(_lock_dir(), f"{start}.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
    _held[start] = fd
    return True


def _unlock(start):
    fd = _held.pop(start, None)
    if fd is not None:
        os.close(fd)


def ids_in_use():
    """Every uid and gid (real, effective, saved, filesystem) of a live
    process."""
    ids = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith(("Uid:", "Gid:")):
                        ids.update(int(x) for x in line.split()[1:])
        except (OSError, ValueError):
            continue  # gone meanwhile
    return ids


def _named(i):
    """True when the passwd or group database knows id i."""
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(i)
            return True
        except KeyError:
            pass
    return False


def _blocks(base, n):
    first = base - (base - WINDOW[0]) % BLOCK
    return list(range(first, base + n, BLOCK))


def allocate(n):
    """The base of n consecutive uids (and the same gids) nobody uses, held
    by this process until it exits."""
    n = max(n, 1)
    k = (n + BLOCK - 1) // BLOCK
    busy = ids_in_use()
    lo, hi = WINDOW
    for start in range(lo, hi - k * BLOCK + 1, BLOCK):
        blocks = [start + j * BLOCK for j in range(k)]
        if any(b in _held for b in blocks):
            continue  # this process's own: each allocation is a new range
        ids = range(start, start + k * BLOCK)
        if busy.intersection(ids) or any(_named(i) for i in ids):
            continue
        got = []
        for b in blocks:
            if not _lock(b):
                break
            got.append(b)
        if len(got) == k:
            return start
        for b in got:
            _unlock(b)
    raise RuntimeError(f"no {n} free uids in {lo}-{hi} (SBX_TEST_UIDS): "
                       f"every block is locked under {LOCK_DIR} or in use")


def claim(base, n):
    """Holds the blocks of [base, base + n) inside WINDOW for this process (a
    test that chose its base, or restarts a server on its earlier one);
    raises when another process holds one. Outside WINDOW nothing is held:
    such a base is the caller's to keep apart."""
    for b in _blocks(base, max(n, 1)):
        if WINDOW[0] <= b < WINDOW[1] and not _lock(b):
            raise RuntimeError(f"uids {b}-{b + BLOCK - 1} are held by another test process")


def release_all():
    for b in list(_held):
        _unlock(b)
