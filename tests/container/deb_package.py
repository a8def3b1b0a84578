"""The server's Debian package (build/dist/sandboxd_VERSION_amd64.deb, made
by scripts/package deb from deploy/CMakeLists.txt) installed the way the
README's "Install" says, into a disposable root: a container of the Debian 12
base that tests/container makes with mmdebstrap (container.py's ensure_base,
localhost/sandboxd-base:bookworm), privileged, standing in for a host.

In it: `apt-get install -y ./build/dist/sandboxd_VERSION_amd64.deb` from a
directory holding only the package (dependencies from deb.debian.org, the
downloads kept in the podman volume sandboxd-deb-apt-cache between runs);
then the unit in /lib/systemd/system is deploy/sandboxd.service byte for
byte, has Delegate=yes and is enabled, and `systemd-analyze verify` finds
it by name and accepts it (systemd is installed in the root first, as on a
host, but does not run); the sandboxd user and group exist, /etc/sandboxd is root:sandboxd 0750,
/etc/sandboxd/sandboxd.conf is deploy/sandboxd.conf and a conffile;
`sandboxd --version` prints CMake's version. One run: the unit's ExecStart
started by hand (no systemd in a container), with the packaged config, and
the installed sandbox-run sends a RunCode and gets its stdout; SIGTERM stops
it. Last `apt-get remove` (the conffile stays, the unit is masked) and
`apt-get purge` (nothing of the package is left; the user stays, as the
postrm says).

On a cgroup v1 host (the development VM) the server runs with
SANDBOXD_BACKEND=v1 over the config's `backend = v2`, which needs the unit's
delegated v2 subtree; on a unified host the config is used as it is.

Run as `python3 -m pytest tests/container/deb_package.py --bin-dir build/bin`
(ctest: container_deb). Needs root, podman and mmdebstrap (scripts/install-deps)
and deb.debian.org. Must never leave its container behind.
"""
import os
import re
import shutil
import signal
import sys
import tempfile
import time

from container import REPO, TIMINGS, Podman, ensure_base, require_tools, timed
from lib import uids
from lib.harness import check

VERSION = os.environ.get("SANDBOXD_VERSION", "")
DIST = os.environ.get("SANDBOXD_DIST_DIR", os.path.join(REPO, "build", "dist"))
BASE_IMAGE = "localhost/sandboxd-base:bookworm"
APT_CACHE = "sandboxd-deb-apt-cache"  # a podman volume: the .deb files apt downloaded
UNIT = "/lib/systemd/system/sandboxd.service"
CONFIG = "/etc/sandboxd/sandboxd.conf"


class Root:
    """The disposable root: one container, commands run in it with podman exec."""

    def __init__(self, pm, name):
        self.pm, self.name = pm, name

    def sh(self, script, timeout=120, env=()):
        flags = [f for k, v in env for f in ("-e", f"{k}={v}")]
        p = self.pm.run("exec", *flags, self.name, "sh", "-c", script, timeout=timeout)
        return p.returncode, p.stdout, p.stderr

    def out(self, script, timeout=120):
        rc, out, err = self.sh(script, timeout)
        return out.strip() if rc == 0 else f"exit {rc}: {out.strip()} {err.strip()}"

    def exists(self, path):
        return self.sh(f"test -e '{path}' || test -L '{path}'")[0] == 0


def check_installed(root):
    unit = root.out(f"cat {UNIT}")
    with open(os.path.join(REPO, "deploy", "sandboxd.service")) as f:
        check(unit == f.read().strip(), f"{UNIT} is deploy/sandboxd.service", unit[:300])
    check(re.search(r"^Delegate=yes$", unit, re.M) is not None, "the unit has Delegate=yes",
          unit)
    check(re.search(rf"^ExecStart=/usr/sbin/sandboxd --config {CONFIG}$", unit, re.M)
          is not None, f"the unit starts /usr/sbin/sandboxd --config {CONFIG}", unit)
    wants = "/etc/systemd/system/multi-user.target.wants/sandboxd.service"
    check(root.out(f"readlink {wants}") == UNIT,
          "postinst enabled the unit (multi-user.target.wants) without systemd running",
          root.out(f"ls -l {wants}"))
    # The root's own systemd-analyze: the unit by name, looked up in systemd's
    # unit paths; its ExecStart and ExecReload binaries must exist.
    rc, out, err = root.sh("systemd-analyze verify --man=no sandboxd.service")
    check(rc == 0 and "sandboxd" not in out + err,
          "systemd-analyze verify finds sandboxd.service and accepts it",
          f"exit {rc}: {out}{err}")

    passwd = root.out("getent passwd sandboxd").split(":")
    check(len(passwd) == 7 and 0 < int(passwd[2] or 0) < 1000
          and passwd[6] == "/usr/sbin/nologin",
          "sandboxd is a system user (uid below 1000, no login shell)", passwd)
    check(root.out("getent group sandboxd").startswith("sandboxd:"), "group sandboxd exists")
    check(root.out("stat -c '%U:%G %a' /etc/sandboxd") == "root:sandboxd 750",
          "/etc/sandboxd is root:sandboxd 0750 (a dpkg-statoverride)",
          root.out("stat -c '%U:%G %a' /etc/sandboxd"))
    conffiles = root.out("dpkg-query -W -f='${Conffiles}' sandboxd")
    check(re.search(rf"^{CONFIG} [0-9a-f]{{32}}$", conffiles.strip(), re.M) is not None,
          f"{CONFIG} is a conffile (dpkg-query ${{Conffiles}})", conffiles)
    with open(os.path.join(REPO, "deploy", "sandboxd.conf")) as f:
        check(root.out(f"cat {CONFIG}") == f.read().strip(), f"{CONFIG} is deploy/sandboxd.conf")
    check(root.out("sandboxd --version") == f"sandboxd {VERSION}",
          f"sandboxd --version prints CMake's version {VERSION}", root.out("sandboxd --version"))
    where = [root.out(f"command -v {b}") for b in ("sandboxd", "sandbox-run")]
    check(where == ["/usr/sbin/sandboxd", "/usr/bin/sandbox-run"],
          "sandboxd in /usr/sbin, sandbox-run in /usr/bin", where)


def check_run(root, host_v2):
    """The unit's ExecStart, started by hand with the packaged config."""
    unit = root.out(f"cat {UNIT}")
    m = re.search(r"^ExecStart=(.*)$", unit, re.M)
    if not check(m is not None, "the unit has an ExecStart", unit):
        return
    uid_base = uids.allocate(uids.BLOCK)
    env = [("SANDBOXD_UID_BASE", uid_base), ("SANDBOXD_WORKERS", 1)]
    if not host_v2:
        env.append(("SANDBOXD_BACKEND", "v1"))
    root.sh(f"{m.group(1)} >/run/sandboxd.log 2>&1 & echo $! > /run/sandboxd.pid", env=env)
    log = ""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        log = root.out("cat /run/sandboxd.log")
        if "event=ready" in log or root.sh("kill -0 $(cat /run/sandboxd.pid)")[0] != 0:
            break
        time.sleep(0.2)
    if not check("event=ready" in log, f"the unit's ExecStart ({m.group(1)}) is ready", log):
        return
    rc, out, err = root.sh("cd /tmp && printf 'import sys\\nprint(\"hello from the package\", "
                           "sys.executable)\\n' > hello.py && sandbox-run hello.py")
    check(rc == 0 and out == "hello from the package /usr/bin/python3\n",
          "the installed sandbox-run runs hello.py in the installed sandboxd",
          f"exit {rc}: {out} {err}")
    info = root.out("sandbox-run --info")
    check('"cgroup v' in info, "GetInfo: a cgroup backend", info[:600])
    root.sh("kill -TERM $(cat /run/sandboxd.pid)")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "event=stopped" not in log:
        time.sleep(0.2)
        log = root.out("cat /run/sandboxd.log")
    check("event=stopped" in log, "SIGTERM stops it (event=stopped)", log[-1000:])


def check_remove_purge(root, files):
    """files: what dpkg -L listed while the package was installed."""
    rc, out, err = root.sh("DEBIAN_FRONTEND=noninteractive apt-get remove -y -q sandboxd",
                           timeout=300)
    check(rc == 0, "apt-get remove sandboxd", out[-1500:] + err[-1500:])
    check(not root.exists("/usr/sbin/sandboxd") and not root.exists(UNIT)
          and root.exists(CONFIG), "remove: binaries and unit gone, the conffile kept")
    check(root.out("readlink /etc/systemd/system/sandboxd.service") == "/dev/null",
          "remove: the unit is masked while its enable links remain (debhelper's way)")
    rc, out, err = root.sh("DEBIAN_FRONTEND=noninteractive apt-get purge -y -q sandboxd",
                           timeout=300)
    check(rc == 0, "apt-get purge sandboxd", out[-1500:] + err[-1500:])
    made = ["/etc/sandboxd", "/var/lib/sandboxd", "/etc/systemd/system/sandboxd.service",
            "/etc/systemd/system/multi-user.target.wants/sandboxd.service",
            "/var/lib/systemd/deb-systemd-helper-enabled/sandboxd.service.dsh-also"]
    left = [p for p in files + made if root.exists(p)]
    check(files and not left, f"purge: none of the package's {len(files)} files and none of "
          "what its scripts made is left", left)
    check(root.out("dpkg-statoverride --list /etc/sandboxd") in ("", "exit 1:  "),
          "purge: the statoverride of /etc/sandboxd is gone",
          root.out("dpkg-statoverride --list"))
    check(root.sh("dpkg-query -W -f='${Status}' sandboxd")[1] in ("", "unknown ok not-installed"),
          "purge: dpkg no longer knows the package")


def test_deb(bin_dir):
    require_tools()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # run the finally blocks
    deb = os.path.join(DIST, f"sandboxd_{VERSION}_amd64.deb")
    assert VERSION and os.path.isfile(deb), f"no {deb}: make it with scripts/package deb"
    t_all = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="sbx-deb-")
    os.chmod(tmp, 0o755)
    pm = Podman(tmp)
    name = f"sbx-ctest-deb-{os.getpid()}"
    try:
        ensure_base(pm, tmp)
        work = os.path.join(tmp, "work")  # the user's directory: only the package in it
        os.makedirs(os.path.join(work, "build", "dist"))
        shutil.copy(deb, os.path.join(work, "build", "dist"))
        t0 = time.monotonic()
        pm.run("run", "-d", "--privileged", "--init", "--name", name,
               "-v", f"{work}:/work:ro", "-v", f"{APT_CACHE}:/var/cache/apt/archives",
               "-w", "/work", BASE_IMAGE, "sleep", "infinity", check_rc=True)
        root = Root(pm, name)
        # A host has systemd installed; here it does not run (as in a chroot).
        rc, out, err = root.sh("apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get "
                               "install -y -q --no-install-recommends systemd", timeout=600)
        check(rc == 0, "apt-get update and install systemd in the root",
              out[-1500:] + err[-1500:])
        rc, out, err = root.sh("DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
                               f"./build/dist/sandboxd_{VERSION}_amd64.deb", timeout=600)
        if not check(rc == 0, f"apt-get install ./build/dist/sandboxd_{VERSION}_amd64.deb",
                     out[-3000:] + err[-3000:]):
            return
        timed("apt-get update, install systemd and the package", t0)
        t0 = time.monotonic()
        check_installed(root)
        check_run(root, host_v2=os.path.exists("/sys/fs/cgroup/cgroup.controllers"))
        files = root.out("dpkg -L sandboxd | while read -r f; do [ -d \"$f\" ] || echo \"$f\"; "
                         "done").split()
        timed("checks and a run", t0)
        t0 = time.monotonic()
        check_remove_purge(root, files)
        timed("remove and purge", t0)
    finally:
        pm.run("rm", "-f", "-t", "0", name)
        shutil.rmtree(tmp, ignore_errors=True)
        TIMINGS.append(("total", time.monotonic() - t_all))
        print("timings: " + ", ".join(f"{w} {s:.1f} s" for w, s in TIMINGS))
