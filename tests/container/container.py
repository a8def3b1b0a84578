"""The container image and the Kubernetes pod spec, for real: builds a Debian
12 base with mmdebstrap (once; kept as localhost/sandboxd-base:bookworm),
builds deploy/Dockerfile with podman, starts the image with the capabilities
deploy/k8s/deployment.yaml grants, calls it from the host with sandbox-run
(hello with numpy and matplotlib, a memory-limit kill, an artifact, GetInfo's
cgroup backend), checks that PID 1 reaps orphans, stops it with SIGTERM while
calls run and wait (a clean drain, exit 0), checks that it refuses to start
without CAP_KILL and that pip in it installs a requirement (from a
wheelhouse), then plays the Deployment with `podman kube play` and calls it
there too.

Run as `python3 -m pytest tests/container/container.py --bin-dir build/bin`
(ctest -L container: container_podman). Needs root, podman, runc, catatonit
and mmdebstrap (scripts/install-deps) and deb.debian.org for the first base
and image builds; later runs reuse podman's caches. The servers in the
containers run their sandboxes as uids the harness allocates
(tests/lib/uids.py), one range per container.

What this host needs (docs/OPERATIONS.md, "Container and Kubernetes"): a
containers.conf of the test's own (CONTAINERS_CONF) with runc, not crun (crun
1.8 refuses hybrid cgroup hosts whose v2 hierarchy has any controller, here
hugetlb), the cgroupfs manager (no systemd) and ulimits no higher than the
test's own hard limits (without CAP_SYS_RESOURCE the runtime cannot raise
them to podman's defaults).
"""
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from lib import uids
from lib.harness import check, free_port
from lib.wheelhouse import make_module_wheel

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BASE_IMAGE = "localhost/sandboxd-base:bookworm"
IMAGE = "localhost/sandboxd:test"
BUILD_STAGE = "localhost/sandboxd-build:test"  # tagged so that its old builds can be removed
DEPLOYMENT = os.path.join(REPO, "deploy", "k8s", "deployment.yaml")
# The sandbox uid bases of the containers' servers (podman run, kube play,
# the requirements check): allocated by test_podman.
UID_RUN = UID_KUBE = UID_REQ = None
TIMINGS = []


def timed(what, t0):
    TIMINGS.append((what, time.monotonic() - t0))
    print(f"--- {what}: {TIMINGS[-1][1]:.1f} s", flush=True)


class Podman:
    """podman with the test's own containers.conf (see the module's text)."""

    def __init__(self, tmp):
        conf = os.path.join(tmp, "containers.conf")
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
        # conmon runs with RLIMIT_NPROC 32768 here; the container's may not
        # be higher than what its runtime holds.
        nproc = min(32768 if nproc == resource.RLIM_INFINITY else nproc, 32768)
        nofile = min(1048576 if nofile == resource.RLIM_INFINITY else nofile, 1048576)
        with open(conf, "w") as f:
            f.write("[containers]\n"
                    f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
                    "[engine]\n"
                    'runtime = "runc"\n'
                    'cgroup_manager = "cgroupfs"\n')
        self.env = dict(os.environ, CONTAINERS_CONF=conf)

    def run(self, *args, timeout=120, check_rc=False, **kw):
        p = subprocess.run(["podman", *args], capture_output=True, text=True, env=self.env,
                           timeout=timeout, **kw)
        if check_rc and p.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args[:3])}: exit {p.returncode}: "
                               f"{p.stderr[-3000:]}")
        return p

    def stream(self, args, log_path, timeout):
        """A long podman command (build) with its output in log_path."""
        with open(log_path, "w") as log:
            p = subprocess.run(["podman", *args], stdout=log, stderr=subprocess.STDOUT,
                               env=self.env, timeout=timeout)
        if p.returncode != 0:
            with open(log_path) as f:
                tail = f.read()[-4000:]
            raise RuntimeError(f"podman {args[0]} failed (exit {p.returncode}):\n{tail}")

    def image_id(self, ref):
        p = self.run("image", "inspect", "--format", "{{.Id}}", ref)
        return p.stdout.strip() if p.returncode == 0 else None


def ensure_base(pm, tmp):
    """The Debian 12 base: mmdebstrap's minbase imported as BASE_IMAGE, made
    only when missing (podman rmi it to refresh)."""
    t0 = time.monotonic()
    if pm.image_id(BASE_IMAGE) is not None:
        print(f"base image {BASE_IMAGE} present, reused")
        timed("base image (cached)", t0)
        return
    tar = os.path.join(tmp, "base.tar")
    with open(os.path.join(tmp, "mmdebstrap.log"), "w") as log:
        p = subprocess.run(["mmdebstrap", "--variant=minbase", "bookworm", tar],
                           stdout=log, stderr=subprocess.STDOUT, timeout=1200)
    if not check(p.returncode == 0, "mmdebstrap made a Debian 12 minbase tarball",
                 open(os.path.join(tmp, "mmdebstrap.log")).read()[-3000:]):
        raise RuntimeError("no base image")
    pm.run("import", "--change", "CMD=/bin/bash", tar, BASE_IMAGE, timeout=600, check_rc=True)
    os.unlink(tar)
    timed("base image (mmdebstrap + import)", t0)


def build_image(pm, tmp):
    """Builds the image (and tags its build stage); podman's layer cache
    makes an unchanged tree a few seconds. The previous builds of both tags
    are removed, so that repeated runs leave no untagged images behind."""
    t0 = time.monotonic()
    old = {ref: pm.image_id(ref) for ref in (IMAGE, BUILD_STAGE)}
    common = ["--build-arg", f"BASE={BASE_IMAGE}",
              "-f", os.path.join(REPO, "deploy", "Dockerfile")]
    pm.stream(["build", *common, "--target", "build", "-t", BUILD_STAGE, REPO],
              os.path.join(tmp, "build-stage.log"), timeout=1800)
    pm.stream(["build", *common, "-t", IMAGE, REPO], os.path.join(tmp, "build.log"), timeout=1800)
    check(pm.image_id(IMAGE) is not None, "podman build made the image from deploy/Dockerfile")
    for ref, old_id in old.items():
        if old_id is not None and old_id != pm.image_id(ref):
            pm.run("rmi", old_id)  # the previous build of this tag, now untagged
    size = pm.run("image", "inspect", "--format", "{{.Size}}", IMAGE).stdout.strip()
    print(f"image {IMAGE}: {int(size or 0) / 1e6:.0f} MB")
    timed("image build", t0)


def deployment():
    import yaml
    with open(DEPLOYMENT) as f:
        return yaml.safe_load(f)


def security_flags(dep, omit=()):
    """podman run flags for the Deployment container's securityContext,
    without the added capabilities named in omit."""
    sc = dep["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    flags = []
    if sc.get("privileged"):
        return ["--privileged"]
    caps = sc.get("capabilities", {})
    for c in caps.get("drop", []):
        flags += ["--cap-drop", c]
    for c in caps.get("add", []):
        if c not in omit:
            flags += ["--cap-add", c]
    if sc.get("seccompProfile", {}).get("type") == "Unconfined":
        flags += ["--security-opt", "seccomp=unconfined"]
    if sc.get("readOnlyRootFilesystem"):
        flags += ["--read-only", "--read-only-tmpfs=false"]
    return flags


def sandbox_run(bin_dir, url, code, *flags, tmp, timeout=120):
    path = os.path.join(tmp, f"code-{time.monotonic_ns()}.py")
    with open(path, "w") as f:
        f.write(code)
    p = subprocess.run([f"{bin_dir}/sandbox-run", "-e", url, "--json", *flags, path],
                       capture_output=True, text=True, timeout=timeout)
    try:
        return p.returncode, json.loads(p.stdout)
    except ValueError:
        return p.returncode, {"raw": p.stdout[-2000:], "stderr": p.stderr[-2000:]}


def get_info(bin_dir, url):
    p = subprocess.run([f"{bin_dir}/sandbox-run", "-e", url, "--info"], capture_output=True,
                       text=True, timeout=30)
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {"raw": p.stdout + p.stderr}


def wait_ready(pm, name, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = pm.run("logs", name)
        out = p.stdout + p.stderr
        if "event=ready" in out:
            return out
        state = pm.run("inspect", "--format", "{{.State.Status}}", name).stdout.strip()
        if state not in ("running", "created", "configured", "initialized"):
            return out
        time.sleep(0.2)
    p = pm.run("logs", name)
    return p.stdout + p.stderr


def check_calls(bin_dir, url, tmp, uid_base, where):
    """What every deployment of the image must do, called from the host."""
    info = get_info(bin_dir, url)
    iso = info.get("isolation", {})
    check(iso.get("backend", "").startswith("cgroup"),
          f"{where}: GetInfo isolation.backend is a cgroup backend, not rlimit", info)
    check(iso.get("memory_per_process") is False and iso.get("seccomp") is True,
          f"{where}: memory capped per run (not per process) and seccomp on", iso)
    check(iso.get("uid_base") == uid_base, f"{where}: slots run as uids {uid_base}..", iso)
    print(f"{where}: backend={iso.get('backend')!r} cgroup_path={iso.get('cgroup_path')!r}")

    rc, r = sandbox_run(bin_dir, url, "import numpy, matplotlib, sys\n"
                        "print('hello', sys.executable, numpy.__version__, "
                        "matplotlib.__version__)\n", tmp=tmp)
    check(rc == 0 and r.get("killed_by") == "none"
          and r.get("stdout", "").startswith("hello /usr/bin/python3 1.24"),
          f"{where}: hello runs with Debian's python3, numpy and matplotlib", r)
    # The image's runtimes (deploy/runtimes, docs/RUNTIMES.md): every one
    # available, each running its hello world; c compiles in the container.
    infos = {ri.get("name"): ri for ri in info.get("runtime_info", [])}
    check(all(infos.get(n, {}).get("available") for n in ("bash", "c", "cpp", "node")),
          f"{where}: the image offers bash, c, cpp and node, each available", infos)
    for runtime, code in [("bash", "echo hello $BASH_VERSINFO"),
                          ("node", "console.log('hello', process.versions.node > '')"),
                          ("c", '#include <stdio.h>\nint main(void) { puts("hello c"); }'),
                          ("cpp", '#include <iostream>\nint main() { std::cout << "hello c++\\n"; }')]:
        rc, r = sandbox_run(bin_dir, url, code, "--runtime", runtime, tmp=tmp)
        check(rc == 0 and r.get("stdout", "").startswith("hello"),
              f"{where}: runtime {runtime} runs its hello world", r)

    t0 = time.monotonic()
    rc, r = sandbox_run(bin_dir, url, "import time\ntime.sleep(60)\n", "--timeout-ms", "1000",
                        tmp=tmp)
    took = time.monotonic() - t0
    check(r.get("killed_by") == "timeout" and rc == 124 and took < 10,
          f"{where}: a sleeping run is killed at its 1 s timeout (answered in {took:.1f} s)", r)

    rc, r = sandbox_run(bin_dir, url, "b = bytearray(512 << 20)\nprint(len(b))\n",
                        "--memory-mb", "64", tmp=tmp)
    check(r.get("killed_by") == "memory" and r.get("signal") == 9 and rc == 137,
          f"{where}: 512 MiB under a 64 MiB limit is killed_by memory (the cgroup's OOM kill)",
          r)
    return info


def check_artifact(bin_dir, url, tmp, where, *flags):
    code = ("import matplotlib; matplotlib.use('Agg')\n"
            "import matplotlib.pyplot as plt\n"
            "plt.plot([1, 2, 3]); plt.savefig('output/plot.png'); plt.close()\n")
    rc, r = sandbox_run(bin_dir, url, code, *flags, tmp=tmp)
    arts = r.get("artifacts", [])
    check(rc == 0 and len(arts) == 1 and arts[0].get("mime") == "image/png"
          and arts[0].get("size", 0) > 1000,
          f"{where}: a matplotlib plot comes back as an image/png artifact (media-types)",
          r)


def check_reaping(pm, name):
    """An orphan of an exec session is reparented to the container's PID 1,
    which must reap it: sandboxd does not, tini does."""
    pm.run("exec", name, "sh", "-c", "sleep 0.2 & exit 0")
    time.sleep(1.0)
    p = pm.run("exec", name, "sh", "-c",
               "for s in /proc/[0-9]*/status; do "
               "awk '/^(Name|State):/ {printf \"%s \", $2} END {print \"\"}' $s; done")
    zombies = [line for line in p.stdout.splitlines() if " Z" in line]
    check(p.returncode == 0 and not zombies,
          "PID 1 reaps an orphaned exec child (no zombie left)", p.stdout + p.stderr)
    first = pm.run("exec", name, "cat", "/proc/1/comm").stdout.strip()
    check(first == "tini", "PID 1 is tini", first)


def check_drain(pm, name, bin_dir, url, tmp):
    """SIGTERM while two calls run (2 workers) and two wait: the running ones
    finish OK, the queued ones get UNAVAILABLE at once, exit status 0."""
    code = "import time\ntime.sleep(3)\nprint('done')\n"
    path = os.path.join(tmp, "sleep3.py")
    with open(path, "w") as f:
        f.write(code)
    procs = []
    for _ in range(4):
        procs.append(subprocess.Popen(
            [f"{bin_dir}/sandbox-run", "-e", url, "--json", "--retries", "0", path],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        time.sleep(0.15)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # wait until two run and two are queued
        info = get_info(bin_dir, url)
        if info.get("running") == 2 and info.get("queue_depth") == 2:
            break
        time.sleep(0.05)
    check(info.get("running") == 2 and info.get("queue_depth") == 2,
          "drain: two calls running and two queued before SIGTERM", info)
    t0 = time.monotonic()
    stop = pm.run("stop", "-t", "30", name, timeout=60)
    stop_s = time.monotonic() - t0
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=60)
        try:
            results.append(json.loads(out))
        except ValueError:
            results.append({"raw": out})
    statuses = sorted(r.get("status", "?") for r in results)
    check(statuses == ["OK", "OK", "UNAVAILABLE", "UNAVAILABLE"],
          "drain: running calls answered OK, queued ones UNAVAILABLE (nothing ran)", results)
    check(all(r.get("stdout") == "done\n" for r in results if r.get("status") == "OK"),
          "drain: the running calls finished their code", results)
    exit_code = pm.run("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
    logs = pm.run("logs", name)
    log = logs.stdout + logs.stderr
    check(stop.returncode == 0 and exit_code == "0",
          f"podman stop (SIGTERM): exit status 0 after {stop_s:.1f} s",
          f"{exit_code} {stop.stderr}")
    check("event=draining signal=SIGTERM" in log and "event=stopped" in log,
          "drain: the log has event=draining signal=SIGTERM and event=stopped", log[-2000:])
    check("resorting to SIGKILL" not in stop.stderr, "podman stop did not need SIGKILL",
          stop.stderr)
    print(f"drain: podman stop took {stop_s:.1f} s")


def check_short_caps(pm, dep):
    """The manifest's capabilities less CAP_KILL: sandboxd must refuse to
    start and name it, not start and hang at the first timeout."""
    p = pm.run("run", "--rm", *security_flags(dep, omit=("KILL",)),
               "-e", f"SANDBOXD_UID_BASE={UID_RUN}", IMAGE, timeout=60)
    check(p.returncode == 1 and "CAP_KILL" in p.stderr and "refusing to start" in p.stderr,
          "without CAP_KILL sandboxd refuses to start and names the capability",
          f"exit {p.returncode}: {p.stderr[-1000:]}")


def check_requirements(pm, bin_dir, tmp, dep):
    """pip in the image installs a requirement inside the sandbox (offline,
    from a wheelhouse mounted into the container: no index is reachable
    here), under the Deployment's securityContext and a read-only root."""
    wheels = os.path.join(tmp, "wheels")
    os.makedirs(wheels)
    make_module_wheel(wheels, "ctrpkg", "1.0", value="42")
    os.chmod(wheels, 0o755)
    for f in os.listdir(wheels):
        os.chmod(os.path.join(wheels, f), 0o644)
    name = f"sbx-ctest-req-{os.getpid()}"
    port = free_port()
    try:
        p = pm.run("run", "-d", "--name", name, *security_flags(dep), "-p",
                   f"127.0.0.1:{port}:7878", "-v", f"{wheels}:/wheels:ro",
                   "-e", f"SANDBOXD_UID_BASE={UID_REQ}", IMAGE, "--listen", "tcp://0.0.0.0:7878",
                   "--state-dir", "/var/lib/sandboxd", "--offline", "1", "--wheelhouse", "/wheels")
        if not check(p.returncode == 0 and "event=ready" in wait_ready(pm, name),
                     "requirements: sandboxd --offline 1 --wheelhouse /wheels starts", p.stderr):
            return
        code = "import ctrpkg\nprint('pkg', ctrpkg.VALUE, ctrpkg.VERSION)\n"
        for attempt in ("built", "reused"):
            rc, r = sandbox_run(f"{bin_dir}", f"tcp://127.0.0.1:{port}", code, "--requirement",
                                "ctrpkg==1.0", tmp=tmp)
            check(rc == 0 and r.get("stdout") == "pkg 42 1.0\n",
                  f"requirements: pip in the image installs ctrpkg in the sandbox ({attempt})", r)
    finally:
        pm.run("rm", "-f", "-v", "-t", "0", name)


def podman_run_group(pm, bin_dir, tmp, dep):
    t0 = time.monotonic()
    name = f"sbx-ctest-{os.getpid()}"
    port = free_port()
    flags = security_flags(dep)
    print("podman run flags from the Deployment's securityContext:", " ".join(flags))
    try:
        # With zygotes on (docs/ZYGOTE.md): cold runs as always, and
        # python-zygote runs, whose zygotes make user namespaces inside the
        # container with the Deployment's capabilities.
        p = pm.run("run", "-d", "--name", name, *flags, "-p", f"127.0.0.1:{port}:7878",
                   "-e", f"SANDBOXD_UID_BASE={UID_RUN}", "-e", "SANDBOXD_ZYGOTE=1", IMAGE)
        if not check(p.returncode == 0, "podman run starts the image's default command",
                     p.stderr):
            return
        log = wait_ready(pm, name)
        if not check("event=ready" in log and "tcp://0.0.0.0:7878" in log,
                     "sandboxd in the container is ready, listening on 0.0.0.0:7878", log):
            return
        url = f"tcp://127.0.0.1:{port}"
        check_calls(bin_dir, url, tmp, UID_RUN, "podman run")
        check_artifact(bin_dir, url, tmp, "podman run")
        check_artifact(bin_dir, url, tmp, "podman run, python-zygote", "--runtime",
                       "python-zygote")
        check_reaping(pm, name)
        check_drain(pm, name, bin_dir, url, tmp)
    finally:
        pm.run("rm", "-f", "-v", "-t", "0", name)
    check_short_caps(pm, dep)
    check_requirements(pm, bin_dir, tmp, dep)
    timed("podman run: calls, reaping, drain, short capabilities, requirements", t0)


def kube_yaml(dep, tmp, name, rpc_port, http_port, has_http):
    """The Deployment as the test plays it: the local image, one replica, a
    name and uids of its own, host ports on 127.0.0.1 only (podman 4.3
    publishes every containerPort on 0.0.0.0 otherwise), and, while sandboxd
    has no --http-listen, the exec probes the manifest's comment gives."""
    import yaml
    dep = json.loads(json.dumps(dep))
    dep["metadata"]["name"] = name
    dep["spec"]["replicas"] = 1
    c = dep["spec"]["template"]["spec"]["containers"][0]
    c["image"] = IMAGE
    c.setdefault("env", []).append({"name": "SANDBOXD_UID_BASE", "value": str(UID_KUBE)})
    for p in c["ports"]:
        p["hostIP"] = "127.0.0.1"
        p["hostPort"] = rpc_port if p["containerPort"] == 7878 else http_port
    if not has_http:
        a = c["args"]
        for flag in ("--http-listen", "--http-allowed-hosts"):  # the second needs the first
            if flag in a:
                i = a.index(flag)
                del a[i:i + 2]
        probe = {"exec": {"command": ["/usr/local/bin/sandbox-run", "-e",
                                      "tcp://127.0.0.1:7878", "--health"]}}
        for k in ("readinessProbe", "livenessProbe"):
            c[k] = {key: v for key, v in c[k].items() if key != "httpGet"}
            c[k].update(probe)
    path = os.path.join(tmp, "deployment.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(dep, f, sort_keys=False)
    return path


def kube_group(pm, bin_dir, tmp, dep):
    t0 = time.monotonic()
    has_http = "--http-listen" in pm.run("run", "--rm", IMAGE, "--help").stdout
    print("sandboxd in the image has --http-listen:", has_http,
          "" if has_http else "(probes played as the exec form)")
    name = f"sbx-ctest-kube-{os.getpid()}"
    rpc_port, http_port = free_port(), free_port()
    path = kube_yaml(dep, tmp, name, rpc_port, http_port, has_http)
    pod, ctr = f"{name}-pod-0", f"{name}-pod-0-sandboxd"
    try:
        p = pm.run("kube", "play", path, timeout=180)
        if not check(p.returncode == 0, "podman kube play starts the Deployment's pod",
                     p.stdout + p.stderr):
            return
        log = wait_ready(pm, ctr)
        if not check("event=ready" in log, "sandboxd in the pod is ready", log):
            return
        st = pm.run("exec", ctr, "cat", "/proc/1/status").stdout
        fields = dict(line.split(":\t", 1) for line in st.splitlines() if ":\t" in line)
        caps = dep["spec"]["template"]["spec"]["containers"][0]["securityContext"][
            "capabilities"]["add"]
        want = sum(1 << CAP_BITS[c] for c in caps)
        check(int(fields.get("CapEff", "0"), 16) == want and int(fields.get("CapBnd", "0"), 16)
              == want, f"pod: PID 1 holds exactly the {len(caps)} capabilities the manifest adds",
              fields.get("CapEff"))
        check(fields.get("Seccomp", "").strip() == "0", "pod: no runtime seccomp filter",
              fields.get("Seccomp"))
        ro = pm.run("exec", ctr, "touch", "/probe-readonly")
        check(ro.returncode != 0 and "Read-only" in ro.stderr,
              "pod: the root filesystem is read-only", ro.stderr)
        url = f"tcp://127.0.0.1:{rpc_port}"
        check_calls(bin_dir, url, tmp, UID_KUBE, "kube play")
        if not has_http:  # podman turns an exec livenessProbe into its healthcheck
            hc = pm.run("healthcheck", "run", ctr)
            check(hc.returncode == 0, "pod: the liveness probe (sandbox-run --health) passes",
                  hc.stdout + hc.stderr)
        t1 = time.monotonic()
        stop = pm.run("pod", "stop", "-t", "30", pod, timeout=60)
        exit_code = pm.run("inspect", "--format", "{{.State.ExitCode}}", ctr).stdout.strip()
        logs = pm.run("logs", ctr)
        check(stop.returncode == 0 and exit_code == "0"
              and "event=stopped" in logs.stdout + logs.stderr,
              f"pod: SIGTERM drains and sandboxd exits 0 ({time.monotonic() - t1:.1f} s)",
              f"{exit_code} {stop.stderr} {(logs.stdout + logs.stderr)[-1000:]}")
    finally:
        down = pm.run("kube", "down", path, timeout=120)
        check(down.returncode == 0, "podman kube down removes the pod", down.stderr)
        timed("kube play: pod, calls, stop, kube down", t0)


# Linux capability numbers (linux/capability.h) of the ones the manifest may add.
CAP_BITS = {"CHOWN": 0, "DAC_OVERRIDE": 1, "DAC_READ_SEARCH": 2, "FOWNER": 3, "FSETID": 4,
            "KILL": 5, "SETGID": 6, "SETUID": 7, "SETPCAP": 8, "NET_BIND_SERVICE": 10,
            "NET_ADMIN": 12, "NET_RAW": 13, "SYS_CHROOT": 18, "SYS_PTRACE": 19,
            "SYS_ADMIN": 21, "SYS_RESOURCE": 24, "MKNOD": 27, "AUDIT_WRITE": 29,
            "SETFCAP": 31}


def missing_tools():
    return [t for t in ("podman", "runc", "catatonit", "mmdebstrap")
            if shutil.which(t) is None and not os.path.exists(f"/usr/libexec/podman/{t}")]


def require_tools():
    """Ends the run when a tool is missing: a loud skip (exit 77), or a
    failure when CI=true."""
    if missing_tools():
        msg = (f"SKIP container: {', '.join(missing_tools())} missing "
               "(scripts/install-deps installs them)")
        if os.environ.get("CI") == "true":
            pytest.exit(msg.replace("SKIP", "FAIL") + " and CI=true forbids skipping", returncode=1)
        pytest.exit("*" * 70 + "\n" + msg + "\n" + "*" * 70, returncode=77)


def test_podman(bin_dir):
    global UID_RUN, UID_KUBE, UID_REQ
    require_tools()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # run the finally blocks
    # A block each (a container's sandboxd: 2 workers and its interpreters).
    UID_RUN, UID_KUBE, UID_REQ = (uids.allocate(uids.BLOCK) for _ in range(3))
    t_all = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="sbx-container-")
    os.chmod(tmp, 0o755)
    try:
        pm = Podman(tmp)
        dep = deployment()
        ensure_base(pm, tmp)
        build_image(pm, tmp)
        podman_run_group(pm, bin_dir, tmp, dep)
        kube_group(pm, bin_dir, tmp, dep)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        TIMINGS.append(("total", time.monotonic() - t_all))
        print("timings: " + ", ".join(f"{w} {s:.1f} s" for w, s in TIMINGS))
