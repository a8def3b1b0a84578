"""End-to-end tests of per-run requirements (docs/REQUIREMENTS.md): the real
sandboxd and sandbox-run, offline, with wheels this test writes itself into a
temporary wheelhouse (and, for the network mode, a PEP 503 index served from
127.0.0.1). Uses tests/lib/harness.py's Server and check; one ctest entry
per test, service_<name>.
"""
import concurrent.futures
import hashlib
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

from lib.harness import Server
from lib.wheelhouse import make_module_wheel

IMPORT = "import {mod}\nprint({mod}.VALUE)\n"


def info(s, url=None):
    p = subprocess.run([f"{s.bin_dir}/sandbox-run", "-e", url or s.tcp, "--info"],
                       capture_output=True, text=True, timeout=30)
    return json.loads(p.stdout)


def env_dirs(state):
    d = os.path.join(state, "envs")
    return sorted(n for n in os.listdir(d)) if os.path.isdir(d) else []


def req_flags(*reqs):
    return [x for r in reqs for x in ("--requirement", r)]


def new_wheelhouse():
    wh = tempfile.mkdtemp(prefix="sbx-wheels-")
    os.chmod(wh, 0o755)
    return wh


def test_requirements_basic(bin_dir, check):
    wh = new_wheelhouse()
    make_module_wheel(wh, "sbx-alpha", "1.0", "alpha one")
    make_module_wheel(wh, "sbx-alpha", "2.0", "alpha two")
    make_module_wheel(wh, "sbx-dep", "1.0", "dep")
    make_module_wheel(wh, "sbx-uses-dep", "1.0", "uses dep", requires=["sbx-dep>=1"])
    make_module_wheel(wh, "sbx-broken", "1.0", "never", requires=["sbx-missing-dep"])
    s = Server(bin_dir, "--workers", "2", "--offline", "1", "--wheelhouse", wh,
               "--max-requirements", "4")
    try:
        rc, out = s.run(IMPORT.format(mod="sbx_alpha"), *req_flags("sbx-alpha==1.0"))
        check(out.get("status") == "OK" and out.get("stdout") == "alpha one\n",
              "a run with a requirement imports the package", out)
        check(any("installed into a new environment" in l for l in out.get("feedback", [])),
              "its feedback says the environment was built", out.get("feedback"))
        i1 = info(s)
        check(i1["environment_builds_total"] == 1 and i1["environments"] == 1,
              "one build, one environment", i1)
        # The same set spelled differently: same key, no new build.
        rc, out = s.run(IMPORT.format(mod="sbx_alpha"), *req_flags("SBX_Alpha == 1.0"))
        i2 = info(s)
        check(out.get("stdout") == "alpha one\n" and i2["environment_builds_total"] == 1
              and not any("installed" in l for l in out.get("feedback", [])),
              "a second run with the same set reuses the environment", (out, i2))
        check(re.search(r"event=run .* env=[0-9a-f]{12} ", s.log_text()) is not None,
              "the run's log line names its environment")
        # Dependencies come along; another version is another environment.
        rc, out = s.run("import sbx_uses_dep, sbx_dep\nprint(sbx_uses_dep.VALUE, sbx_dep.VALUE)\n",
                        *req_flags("sbx-uses-dep"))
        check(out.get("stdout") == "uses dep dep\n", "a dependency is installed with it", out)
        rc, out = s.run(IMPORT.format(mod="sbx_alpha"), *req_flags("sbx-alpha>=2"))
        check(out.get("stdout") == "alpha two\n", "a version specifier picks the version", out)
        # Read-only, and nothing of it without requirements.
        rc, out = s.run("import os, sbx_alpha\nd = os.path.dirname(sbx_alpha.__file__)\n"
                        "try:\n    open(os.path.join(d, 'x'), 'w')\nexcept OSError as e:\n"
                        "    print(e.errno)\n", *req_flags("sbx-alpha==1.0"))
        check(out.get("stdout") == "30\n", "the environment is read-only in the run (EROFS)", out)
        rc, out = s.run("import importlib.util\nprint(importlib.util.find_spec('sbx_alpha'))\n")
        check(out.get("stdout") == "None\n", "a run without requirements does not see it", out)
        owners = {os.stat(os.path.join(r, n)).st_uid
                  for r, ds, fs in os.walk(os.path.join(s.state, "envs")) for n in ds + fs}
        check(owners == {0}, "the store's files belong to root, not the sandbox's uid", owners)

        before = info(s)
        bad = [
            ("-e .", "must not start with '-'"),
            ("--index-url=http://evil.example/simple", "must not start with '-'"),
            ("-r/etc/passwd", "must not start with '-'"),
            ("sbx-alpha @ https://example.com/x.whl", "URLs"),
            ("https://example.com/sbx_alpha-1.0-py3-none-any.whl", "URLs"),
            ("./pkg", "local paths"),
            ("/etc/passwd", "local paths"),
            ("sbx_alpha-1.0-py3-none-any.whl", "archive"),
            ("sbx-alpha==1.0.zip", "archive"),
            ("sbx-alpha; os.system('id')", "marker"),
            ("sbx-alpha==1.0 --hash=sha256:00", "end of the requirement"),
            ("sbx alpha", "end of the requirement"),
            ("x" * 201, "bytes"),
        ]
        for spec, why in bad:
            rc, out = s.run(HELLO, *req_flags(spec))
            check(out.get("status") == "INVALID_ARGUMENT" and "requirements[0]" in out.get("error", "")
                  and why in out.get("error", ""), f"INVALID_ARGUMENT for {spec[:40]!r}", out)
        rc, out = s.run(HELLO, *req_flags("a", "b", "c", "d", "e"))
        check(out.get("status") == "INVALID_ARGUMENT" and "0 to 4" in out.get("error", ""),
              "more than --max-requirements is refused", out)
        after = info(s)
        check(after["runs_total"] == before["runs_total"]
              and after["environment_builds_total"] == before["environment_builds_total"],
              "nothing ran or was built for refused requirements", (before, after))

        # A package whose install fails: nothing runs, pip's reason comes back.
        marker = os.path.join(s.tmp, "ran")
        rc, out = s.run(f"open({marker!r}, 'w')\n", *req_flags("sbx-broken"))
        err = out.get("error", "")
        check(out.get("status") == "FAILED_PRECONDITION" and rc == 125
              and "could not install 'sbx-missing-dep': no matching distribution in the "
                  "configured index" in err
              and "No matching distribution found for sbx-missing-dep" in err
              and err.splitlines()[0].endswith("; nothing ran") and err.count("nothing ran") == 1,
              "a failed install is FAILED_PRECONDITION with pip's output tail; \"nothing ran\" "
              "ends its first line, once", out)
        rc, out = s.run(HELLO, *req_flags("sbx-not-in-wheelhouse"))
        check("could not install 'sbx-not-in-wheelhouse'" in out.get("error", ""),
              "an unknown package names itself", out)
        after2 = info(s)
        check(after2["runs_total"] == after["runs_total"]
              and after2["environment_build_failures_total"] == 2
              and after2["environments"] == after["environments"],
              "failed installs run nothing and store nothing", after2)
        check(not [n for n in env_dirs(s.state) if not re.fullmatch(r"[0-9a-f]{64}", n)],
              "no build leftovers in the store", env_dirs(s.state))

        # The hint for a missing module.
        rc, out = s.run("import sbx_not_installed_anywhere.sub\n")
        check("add 'sbx_not_installed_anywhere' to requirements" in out.get("feedback", []),
              "ModuleNotFoundError gives the feedback \"add 'X' to requirements\"",
              out.get("feedback"))
    finally:
        s.stop()
    # A server with no package source says so, and still runs code.
    s = Server(bin_dir, "--offline", "1")
    try:
        rc, out = s.run(HELLO, *req_flags("sbx-alpha"))
        check(out.get("status") == "FAILED_PRECONDITION" and "--wheelhouse" in out.get("error", ""),
              "without a package source requirements are FAILED_PRECONDITION", out)
        check(info(s)["requirements_available"] is False, "and GetInfo says so")
    finally:
        s.stop()
    shutil.rmtree(wh, ignore_errors=True)


HELLO = 'print("hello")\n'


def test_requirements_concurrency(bin_dir, check):
    wh = new_wheelhouse()
    make_module_wheel(wh, "sbx-shared", "1.0", "shared")
    make_module_wheel(wh, "sbx-fails", "1.0", "never", requires=["sbx-nowhere"])
    s = Server(bin_dir, "--workers", "2", "--offline", "1", "--wheelhouse", wh)
    try:
        def one(i):
            return s.run(f"import sbx_shared\nprint(sbx_shared.VALUE, {i})\n",
                         *req_flags("sbx-shared"))
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            results = list(ex.map(one, range(8)))
        ok = [i for i, (rc, out) in enumerate(results) if out.get("stdout") == f"shared {i}\n"]
        check(len(ok) == 8, "eight concurrent requests for a new set all run with it", results)
        i = info(s)
        builds = [l for l in s.log_text().splitlines() if "event=env_build" in l]
        check(i["environment_builds_total"] == 1 and len(builds) == 1 and i["environments"] == 1,
              "and it is built once", (i, builds))
        waited = [out for rc, out in results
                  if any("waited" in l for l in out.get("feedback", []))]
        check(len(waited) >= 1, "a run that waited for the build says so",
              [o.get("feedback") for _, o in results])
        # A failing set: every concurrent request gets pip's answer, none runs.
        before = info(s)["runs_total"]
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            results = list(ex.map(lambda i: s.run(HELLO, *req_flags("sbx-fails")), range(4)))
        check(all(out.get("status") == "FAILED_PRECONDITION"
                  and "sbx-nowhere" in out.get("error", "") for _, out in results)
              and info(s)["runs_total"] == before,
              "concurrent requests for a failing set all get FAILED_PRECONDITION", results)
        rc, out = s.run(IMPORT.format(mod="sbx_shared"), *req_flags("sbx-shared"))
        check(out.get("stdout") == "shared\n", "the server still serves the good set", out)
    finally:
        s.stop()
        shutil.rmtree(wh, ignore_errors=True)


MB = 1 << 20


def test_requirements_eviction_and_restart(bin_dir, check):
    wh = new_wheelhouse()
    for name in ("sbx-pad-a", "sbx-pad-b", "sbx-pad-c", "sbx-pad-d", "sbx-slow"):
        make_module_wheel(wh, name, "1.0", name, padding=MB)
    # Room for two environments of a little over 1 MiB, not three.
    cap = str(MB * 5 // 2)
    s = Server(bin_dir, "--workers", "2", "--offline", "1", "--wheelhouse", wh,
               "--requirements-store-bytes", cap)
    try:
        def use(name, extra=""):
            mod = name.replace("-", "_")
            return s.run(f"import {mod}\n{extra}print({mod}.VALUE)\n", *req_flags(name))

        # a is held by a running program while b and c are built: the cap
        # makes the store evict, but never a, though it is the least recent.
        slow = subprocess.Popen(
            [f"{bin_dir}/sandbox-run", "-e", s.tcp, "--json", "--timeout-ms", "30000",
             *req_flags("sbx-pad-a"), "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        slow.stdin.write(b"import time, os, sbx_pad_a\ntime.sleep(8)\n"
                         b"d = os.path.dirname(sbx_pad_a.__file__)\n"
                         b"print(len(open(os.path.join(d, 'padding.bin'), 'rb').read()))\n")
        slow.stdin.close()
        deadline = time.time() + 30
        while time.time() < deadline and info(s)["environments"] < 1:
            time.sleep(0.1)
        for name in ("sbx-pad-b", "sbx-pad-c"):
            rc, out = use(name)
            check(out.get("stdout") == f"{name}\n", f"{name} runs", out)
        check(slow.poll() is None, "a's program was still running while b and c were built")
        out = json.loads(slow.stdout.read())
        slow.wait(30)
        check(out.get("stdout") == f"{MB}\n", "an environment in use is never evicted: the "
              "program still reads it after the store passed its cap", out)
        i = info(s)
        check(i["environments"] == 2 and i["environment_bytes"] <= int(cap),
              "the store keeps within its cap", i)
        check("event=env_evict" in s.log_text() and "trash-" not in " ".join(env_dirs(s.state)),
              "eviction is logged and leaves nothing behind", env_dirs(s.state))
        # b was evicted (least recently used idle one); a and c remain.
        builds = i["environment_builds_total"]
        use("sbx-pad-a")
        use("sbx-pad-c")
        check(info(s)["environment_builds_total"] == builds, "a and c are still stored")
        # Now c is the most recent: d's build evicts a.
        use("sbx-pad-d")
        use("sbx-pad-c")
        check(info(s)["environment_builds_total"] == builds + 1,
              "the most recently used environment survives the next eviction")
        rc, out = use("sbx-pad-a")
        check(out.get("stdout") == "sbx-pad-a\n" and info(s)["environment_builds_total"] == builds + 2,
              "the evicted one is built again when asked for", out)
        kept = info(s)
        kept_dirs = env_dirs(s.state)
        state = s.state
        check(s.stop() == 0, "server stops")

        # Restart: the store survives; leftovers of a crash are removed.
        os.makedirs(os.path.join(s.state, "envs", "tmp-" + "0" * 64 + "-9", "site"))
        os.makedirs(os.path.join(s.state, "envs", "f" * 64, "site"))  # no meta: incomplete
        s = Server(bin_dir, "--workers", "2", "--offline", "1", "--wheelhouse", wh,
                   "--requirements-store-bytes", cap, "--state-dir", state, uid_base=s.uid_base)
        s.state = state  # the flag wins over the Server's own state dir
        i = info(s)
        check(i["environments"] == kept["environments"]
              and i["environment_bytes"] == kept["environment_bytes"]
              and env_dirs(s.state) == kept_dirs,
              "a restarted server finds its environments, and only complete ones",
              (i, env_dirs(s.state), kept_dirs))
        rc, out = use("sbx-pad-a")
        check(out.get("stdout") == "sbx-pad-a\n" and info(s)["environment_builds_total"] == 0,
              "and uses them without building", out)

        # A server killed in the middle of a build: nothing of it is used.
        p = subprocess.Popen([f"{bin_dir}/sandbox-run", "-e", s.tcp, "--json",
                              *req_flags("sbx-slow"), "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        p.stdin.write(b"import sbx_slow\nprint(sbx_slow.VALUE)\n")
        p.stdin.close()
        build_dir = os.path.join(s.state, "workspaces")
        deadline = time.time() + 20
        while time.time() < deadline and not any(n.startswith("build-")
                                                 for n in os.listdir(build_dir)):
            time.sleep(0.02)
        time.sleep(0.3)
        s.proc.kill()
        s.proc.wait()
        check("event=env_build" not in s.log_text(), "the server died before the build ended")
        p.kill()  # it would wait for a reply that never comes
        p.wait(30)
        s = Server(bin_dir, "--workers", "2", "--offline", "1", "--wheelhouse", wh,
                   "--requirements-store-bytes", cap, "--state-dir", state, uid_base=s.uid_base)
        s.state = state  # the flag wins over the Server's own state dir
        check(info(s)["environments"] == kept["environments"]
              and all(re.fullmatch(r"[0-9a-f]{64}", n) for n in env_dirs(s.state)),
              "a build killed with its server leaves nothing the next server uses",
              env_dirs(s.state))
        rc, out = use("sbx-slow")
        check(out.get("stdout") == "sbx-slow\n" and info(s)["environment_builds_total"] == 1,
              "the set is built anew", out)
    finally:
        s.stop()
        shutil.rmtree(wh, ignore_errors=True)


class Index:
    """A PEP 503 index on 127.0.0.1: files/ holds distributions, simple/<name>/
    links to them. hits records every path asked for; request_lines the
    request lines and headers as they arrived."""

    def __init__(self):
        self.root = new_wheelhouse()
        self.files = os.path.join(self.root, "files")
        os.makedirs(self.files)
        self.hits = []
        idx = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a, **kw):
                super().__init__(*a, directory=idx.root, **kw)

            def log_message(self, fmt, *args):
                idx.hits.append(self.path)

        class Quiet(http.server.ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass  # a client cut off (the byte cap test) is expected

        self.httpd = Quiet(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/simple/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def add(self, project, path):
        d = os.path.join(self.root, "simple", project)
        os.makedirs(d, exist_ok=True)
        name = os.path.basename(path)
        with open(os.path.join(d, "index.html"), "a") as f:
            f.write(f'<a href="../../files/{name}">{name}</a>\n')

    def stop(self):
        self.httpd.shutdown()
        shutil.rmtree(self.root, ignore_errors=True)


def egress_lines(s, **fields):
    """The proxy's log lines whose fields have the given values."""
    out = []
    for line in s.log_text().splitlines():
        if " event=egress " not in line:
            continue
        if all(f" {k}={v} " in line + " " for k, v in fields.items()):
            out.append(line)
    return out


def test_requirements_network(bin_dir, check):
    """--index-url with a plain-http index on 127.0.0.1: pip (only pip) gets
    it through the egress proxy, whose address guard refuses loopback unless
    download-hosts names the host or download-allow-private is set."""
    idx = Index()
    idx.add("sbx-net", make_module_wheel(idx.files, "sbx-net", "1.0", "from the index"))
    s = Server(bin_dir, "--workers", "1", "--index-url", idx.url)
    try:
        check(info(s)["requirements_index_url"] == idx.url, "GetInfo names the index", info(s))
        rc, out = s.run(IMPORT.format(mod="sbx_net"), *req_flags("sbx-net"))
        err = out.get("error", "")
        check(out.get("status") == "FAILED_PRECONDITION"
              and "the egress proxy refused" in err
              and f"GET 127.0.0.1:{idx.port}: address 127.0.0.1 is loopback (127.0.0.0/8)" in err
              and "download-hosts" in err and "nothing ran" in err,
              "without download-hosts the guard refuses the index on loopback, and says so", out)
        check(idx.hits == [], "the proxy never connected to the index", idx.hits)
        check(egress_lines(s, method="GET", target=f"127.0.0.1:{idx.port}", status=403),
              "the refusal is logged", s.log_text()[-1500:])
    finally:
        s.stop()
    for allow in (["--download-hosts", "127.0.0.1"], ["--download-allow-private", "1"]):
        idx.hits.clear()
        s = Server(bin_dir, "--workers", "1", "--index-url", idx.url, *allow)
        try:
            rc, out = s.run(IMPORT.format(mod="sbx_net"), *req_flags("sbx-net"))
            check(out.get("stdout") == "from the index\n", f"pip installs from --index-url with "
                  f"{' '.join(allow)}", out)
            check(any(h.startswith("/simple/sbx-net") for h in idx.hits)
                  and any(h.startswith("/files/") for h in idx.hits), "through the index",
                  idx.hits)
            check(egress_lines(s, method="GET", target=f"127.0.0.1:{idx.port}", status=200),
                  "through the egress proxy (plain-http GET forwarded)", s.log_text()[-1500:])
            rc, out = s.run("import socket\ntry:\n"
                            f"    socket.create_connection(('127.0.0.1', {idx.port}), timeout=2)\n"
                            "    print('connected')\nexcept OSError as e:\n    print('refused')\n",
                            *req_flags("sbx-net"))
            check(out.get("stdout") == "refused\n", "the user's code still has no network", out)
        finally:
            s.stop()
    idx.stop()


NETNS = ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sandboxd-netns"]


def test_requirements_default_index(bin_dir, check):
    """Out of the box the index is pip's default, https://pypi.org/simple.
    No index is reachable here, and nothing may leave the machine, so this
    sandboxd runs in a network namespace of its own (only lo): the proxy's
    name resolution fails as on an offline host, and the install fails
    cleanly with the proxy's reason. --offline 1 gives the old answer."""
    s = Server(bin_dir, "--workers", "1", wrap=NETNS)
    try:
        i = info(s, s.ipc)
        check(i["requirements_available"] is True
              and i["requirements_index_url"] == "https://pypi.org/simple"
              and i["requirements_wheelhouse"] is False,
              "GetInfo: the default index is pip's, online, no wheelhouse", i)
        check(re.search(r"event=requirements available=true .*offline=false "
                        r"index_url=https://pypi.org/simple .*egress=http://127.0.0.1:3128",
                        s.log_text()) is not None, "the start log says which source is in force",
              s.log_text())
        t0 = time.monotonic()
        rc, out = s.run(HELLO, *req_flags("numpy"), url=s.ipc, timeout=120)
        took = time.monotonic() - t0
        err = out.get("error", "")
        check(out.get("status") == "FAILED_PRECONDITION"
              and "could not install 'numpy'" in err
              and "index https://pypi.org/simple" in err
              and "the egress proxy refused" in err
              and "CONNECT pypi.org:443: cannot resolve pypi.org" in err
              and "nothing ran" in err,
              "an install fails cleanly, with the proxy's reason", out)
        check(took < 60, f"within a bounded time ({took:.1f} s)")
        check(egress_lines(s, method="CONNECT", target="pypi.org:443", status=502),
              "pip asked the proxy for pypi.org:443 (CONNECT)", s.log_text()[-1500:])
    finally:
        s.stop()
    s = Server(bin_dir, "--workers", "1", "--offline", "1", wrap=NETNS)
    try:
        i = info(s, s.ipc)
        check(i["requirements_available"] is False and i["requirements_index_url"] == ""
              and i["requirements_wheelhouse"] is False, "--offline 1: GetInfo says no index", i)
        rc, out = s.run(HELLO, *req_flags("numpy"), url=s.ipc)
        check(out.get("status") == "FAILED_PRECONDITION" and
              "this server cannot install packages: no package source is configured"
              in out.get("error", ""), "--offline 1 without a wheelhouse: FAILED_PRECONDITION", out)
        rc, out = s.run(HELLO, url=s.ipc)
        check(out.get("stdout") == "hello\n", "and code still runs", out)
        check("event=egress" not in s.log_text(), "no proxy, no request through one")
    finally:
        s.stop()
    # A wheelhouse alone does not make the server offline; --offline 1 does,
    # and then the wheelhouse is the only source: no index, no proxy.
    wh = new_wheelhouse()
    make_module_wheel(wh, "sbx-local", "1.0", "from the wheelhouse")
    s = Server(bin_dir, "--workers", "1", "--wheelhouse", wh, wrap=NETNS)
    try:
        i = info(s, s.ipc)
        check(i["requirements_index_url"] == "https://pypi.org/simple"
              and i["requirements_wheelhouse"] is True,
              "a wheelhouse alone: the index stays in force, the wheelhouse is offered too", i)
    finally:
        s.stop()
    s = Server(bin_dir, "--workers", "1", "--offline", "1", "--wheelhouse", wh, wrap=NETNS)
    try:
        i = info(s, s.ipc)
        check(i["requirements_available"] is True and i["requirements_index_url"] == ""
              and i["requirements_wheelhouse"] is True, "--offline 1 with a wheelhouse", i)
        rc, out = s.run(IMPORT.format(mod="sbx_local"), *req_flags("sbx-local"), url=s.ipc)
        check(out.get("stdout") == "from the wheelhouse\n", "installs from the wheelhouse", out)
        rc, out = s.run(HELLO, *req_flags("numpy"), url=s.ipc)
        err = out.get("error", "")
        check(out.get("status") == "FAILED_PRECONDITION"
              and "could not install 'numpy': no matching distribution in the configured index "
                  f"(wheelhouse {wh})" in err and "egress proxy" not in err,
              "and nothing else: no index asked, no proxy", out)
        check("event=egress" not in s.log_text(), "no request through a proxy")
    finally:
        s.stop()
        shutil.rmtree(wh, ignore_errors=True)


# A PEP 517 backend in the sdist itself (backend-path, no build
# requirements, so pip installs nothing first): pip runs it in the
# installer's sandbox to build, as it would any package's setup.py. It is
# the hostile code here: it probes the way out and reports one line.
HOSTILE_BACKEND = r"""
import os, socket, sys, time
PROXY = ("127.0.0.1", 3128)
R = {}

def direct(name, host, port):
    try:
        socket.create_connection((host, port), timeout=3).close()
        R[name] = "connected"
    except ConnectionRefusedError:
        R[name] = "refused"
    except OSError as e:
        R[name] = "errno%d" % (e.errno or 0)

def status(data):
    parts = data.split(b" ", 2)
    return parts[1].decode() if data.startswith(b"HTTP/") and len(parts) > 1 else "none"

def read_all(s, limit=1 << 30):
    data = b""
    try:
        while len(data) < limit:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    return data

def ask(head):
    s = socket.create_connection(PROXY, timeout=10)
    try:
        s.sendall(head)
    except OSError:
        pass
    data = read_all(s)
    s.close()
    return status(data)

def tunnel(target):
    s = socket.create_connection(PROXY, timeout=10)
    s.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target))
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            break
        head += chunk
    return s, status(head)

def probes():
    # At most pip-tunnels (4) connections at once per build: the fifth is refused.
    socks = [socket.create_connection(PROXY, timeout=5) for _ in range(5)]
    time.sleep(1)
    got = []
    for s in socks:
        s.setblocking(False)
        try:
            got.append(status(s.recv(4096)))
        except BlockingIOError:
            got.append("none")
    for s in socks:
        s.close()
    R["tunnels"] = ",".join(got)
    time.sleep(0.5)
    # No route but the proxy: not the host's loopback, not its other addresses.
    direct("sandboxd", "127.0.0.1", SANDBOXD_PORT)
    direct("listener", "127.0.0.1", LISTENER_PORT)
    if HOST_ADDR:
        direct("host_addr", HOST_ADDR, LISTENER_PORT)
    # The proxy refuses what the policy refuses.
    R["metadata"] = ask(b"CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n")
    R["private_get"] = ask(b"GET http://10.0.0.1/ HTTP/1.1\r\nHost: 10.0.0.1\r\n\r\n")
    R["sandboxd_port"] = ask(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % SANDBOXD_PORT)
    R["post"] = ask(b"POST http://127.0.0.1:%d/ HTTP/1.1\r\n\r\n" % INDEX_PORT)
    R["big_head"] = ask(b"GET http://127.0.0.1/ HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n")
    # CONNECT end to end: a tunnel to the index's port carries whatever is
    # spoken through it (plain HTTP here; TLS for a real index), both ways.
    s, st = tunnel(b"127.0.0.1:%d" % INDEX_PORT)
    s.sendall(b"GET /simple/sbx-hostile/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
    body = read_all(s)
    R["tunnel"] = st + ("+index" if b"sbx_hostile-1.0.tar.gz" in body else "+nothing")
    # The byte cap (pip-disk-bytes): a 3 MiB file through a 2 MiB tunnel.
    s, st = tunnel(b"127.0.0.1:%d" % INDEX_PORT)
    s.sendall(b"GET /files/big.bin HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
    R["cap"] = "%s+%s" % (st, "short" if len(read_all(s)) < 3 << 20 else "full")
    # Idle timeout (pip-idle-timeout-ms 1500): a silent request, a silent tunnel.
    t0 = time.monotonic()
    s = socket.create_connection(PROXY, timeout=10)
    R["idle_head"] = status(read_all(s))
    s, st = tunnel(b"127.0.0.1:%d" % INDEX_PORT)
    R["idle_tunnel"] = "%s+%s" % (st, "closed" if read_all(s) == b"" else "data")
    R["idle_s"] = "%d" % round(time.monotonic() - t0)
    # A flood of bad requests: each answered 400, but not each logged.
    got = set()
    for _ in range(100):
        got.add(ask(b"NOT HTTP\r\n\r\n"))
    R["flood"] = ",".join(sorted(got))

def get_requires_for_build_wheel(config_settings=None):
    return []

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    # The results go into the wheel it builds (module sbx_hostile, VALUE),
    # so the test reads them from a run: no length cap on the way back.
    import base64, hashlib, zipfile
    try:
        probes()
    except Exception as e:
        R["crash"] = repr(e)[:100].replace(" ", "_")
    info = "sbx_hostile-1.0.dist-info"
    files = {
        "sbx_hostile/__init__.py": "VALUE = %r\n" % "".join("PROBE %s=%s\n" % kv for kv in R.items()),
        info + "/METADATA": "Metadata-Version: 2.1\nName: sbx-hostile\nVersion: 1.0\n",
        info + "/WHEEL": "Wheel-Version: 1.0\nGenerator: hostile\nRoot-Is-Purelib: true\n"
                         "Tag: py3-none-any\n",
    }
    name = "sbx_hostile-1.0-py3-none-any.whl"
    record = ""
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as z:
        for path, text in files.items():
            data = text.encode()
            z.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record += "%s,sha256=%s,%d\n" % (path, digest.decode(), len(data))
        z.writestr(info + "/RECORD", record + info + "/RECORD,,\n")
    return name
"""


def make_hostile_sdist(directory, **ports):
    import io
    import tarfile
    code = "".join(f"{k} = {v!r}\n" for k, v in ports.items()) + HOSTILE_BACKEND
    members = {
        "PKG-INFO": "Metadata-Version: 2.1\nName: sbx-hostile\nVersion: 1.0\n",
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "hostile_backend"\n'
                          'backend-path = ["."]\n',
        "hostile_backend.py": code,
    }
    path = os.path.join(directory, "sbx_hostile-1.0.tar.gz")
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            ti = tarfile.TarInfo(f"sbx_hostile-1.0/{name}")
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
    return path


def host_address():
    """An address of this host other than loopback, if it has one."""
    p = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"],
                       capture_output=True, text=True)
    m = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", p.stdout)
    return m.group(1) if m else ""


def test_requirements_egress(bin_dir, check):
    """The installer's network, probed from inside by a hostile build step
    (an sdist's in-tree PEP 517 backend): no route but the egress proxy,
    the proxy's refusals (policy, port, method, head size), a CONNECT tunnel
    end to end, the tunnel, byte and idle caps."""
    idx = Index()
    with open(os.path.join(idx.files, "big.bin"), "wb") as f:
        f.write(os.urandom(3 << 20))
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", 0))
    listener.listen(8)
    listener.settimeout(0.1)
    addr = host_address()
    s = Server(bin_dir, "--workers", "1", "--index-url", idx.url, "--download-hosts",
               "127.0.0.1", "--pip-tunnels", "4", "--pip-idle-timeout-ms", "1500",
               "--pip-disk-bytes", str(2 << 20))
    try:
        idx.add("sbx-hostile", make_hostile_sdist(
            idx.files, SANDBOXD_PORT=s.port, LISTENER_PORT=listener.getsockname()[1],
            HOST_ADDR=addr, INDEX_PORT=idx.port))
        rc, out = s.run(IMPORT.format(mod="sbx_hostile"), *req_flags("sbx-hostile"),
                        timeout=120)
        r = dict(re.findall(r"PROBE (\w+)=(\S+)", out.get("stdout", "")))
        check(out.get("status") == "OK" and "idle_s" in r,
              "the hostile build ran in the installer and reported (in the wheel it built)", out)
        print("probes:", r)
        t = r.get("tunnels", "").split(",")
        check(len(t) == 5 and t[-1] == "503" and t[:3] == ["none"] * 3,
              "at most --pip-tunnels connections at once per build: the fifth gets 503", r)
        check(r.get("sandboxd") == "refused" and r.get("listener") == "refused",
              "no route to the host's loopback: sandboxd's port and a host listener refused "
              "(the installer's own lo)", r)
        if addr:
            check(r.get("host_addr") == "errno101",
                  f"no route to the host's address {addr} (ENETUNREACH)", r)
        try:
            listener.accept()
            reached = True
        except (socket.timeout, BlockingIOError):
            reached = False
        check(not reached, "the host listener never got a connection")
        check(r.get("metadata") == "403" and r.get("private_get") == "403",
              "the proxy refuses the metadata address and a private one (403)", r)
        check(egress_lines(s, target="169.254.169.254:80", status=403)
              and "host 169.254.169.254 is not in download-hosts" in s.log_text(),
              "with its reason", s.log_text()[-2000:])
        check(r.get("sandboxd_port") == "403"
              and f"port {s.port} is not allowed (80, 443 and the index's {idx.port} only)"
              in s.log_text(), "a port other than 80, 443 and the index's: 403", r)
        check(r.get("post") == "405" and r.get("big_head") == "431",
              "other methods 405, a head over 8 KiB 431", r)
        check(r.get("tunnel") == "200+index",
              "CONNECT end to end: 200, then bytes both ways through the tunnel", r)
        check(r.get("cap") == "200+short" and "more than 2097152 bytes (pip-disk-bytes)"
              in s.log_text(), "a tunnel stops at --pip-disk-bytes", r)
        check(r.get("idle_head") == "408" and r.get("idle_tunnel") == "200+closed"
              and 2 <= int(r.get("idle_s", "99")) <= 8,
              "silent connections end after --pip-idle-timeout-ms (408 before a request)", r)
        flood_lines = egress_lines(s, status=400)
        m = re.search(r"event=env_build .* egress_refusals=(\d+)", s.log_text())
        check(r.get("flood") == "400" and len(flood_lines) <= 32
              and m is not None and int(m.group(1)) >= 100,
              "a flood of bad requests is answered, counted (env_build egress_refusals) and "
              "logged only up to a cap", (r.get("flood"), len(flood_lines), m and m.group(0)))
        rc, out = s.run(HELLO)
        check(out.get("stdout") == "hello\n", "the server still serves", out)
    finally:
        s.stop()
        listener.close()
        idx.stop()


def test_requirements_upstream(bin_dir, check):
    """--pip-proxy: the egress proxy checks each request, then hands it to
    the operator's upstream proxy, which resolves and connects (here: a
    small proxy on 127.0.0.1 that serves every host from the local index).
    The index's name does not resolve on this machine at all."""
    idx = Index()
    idx.add("sbx-up", make_module_wheel(idx.files, "sbx-up", "1.0", "via the upstream"))
    seen = []

    class Upstream(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append((self.requestline, self.headers.get("Connection")))
            m = re.match(r"http://[^/]+(/.*)", self.path)
            if not m:
                self.send_error(400)
                return
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            try:
                resp = opener.open(f"http://127.0.0.1:{idx.port}{m.group(1)}", timeout=10)
                body = resp.read()
            except urllib.error.HTTPError as e:
                self.send_error(e.code)
                return
            self.send_response(200)
            self.send_header("Content-Type", resp.headers.get("Content-Type", ""))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_CONNECT(self):
            seen.append((self.requestline, self.headers.get("Host")))
            self.send_response(403, "upstream says no")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    up = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=up.serve_forever, daemon=True).start()
    proxy = f"http://127.0.0.1:{up.server_address[1]}"
    name_url = f"http://sbx-index.invalid:{idx.port}/simple/"
    s = Server(bin_dir, "--workers", "1", "--index-url", name_url, "--pip-proxy", proxy,
               "--download-hosts", "sbx-index.invalid")
    try:
        rc, out = s.run(IMPORT.format(mod="sbx_up"), *req_flags("sbx-up"))
        check(out.get("stdout") == "via the upstream\n",
              "pip installs through the egress proxy and the upstream proxy", out)
        check(any(l.startswith(f"GET http://sbx-index.invalid:{idx.port}/simple/sbx-up/")
                  and c == "close" for l, c in seen),
              "the upstream got the absolute-form request, one per connection", seen)
    finally:
        s.stop()
    # An https index: pip's CONNECT goes to the upstream as a CONNECT, and
    # the upstream's answer reaches pip unchanged.
    seen.clear()
    s = Server(bin_dir, "--workers", "1", "--index-url",
               f"https://sbx-index.invalid:{idx.port}/simple/", "--pip-proxy", proxy,
               "--download-hosts", "sbx-index.invalid")
    try:
        rc, out = s.run(HELLO, *req_flags("sbx-up"))
        check(out.get("status") == "FAILED_PRECONDITION"
              and "Tunnel connection failed: 403 upstream says no" in out.get("error", ""),
              "the upstream's refusal of the CONNECT reaches pip", out)
        check((f"CONNECT sbx-index.invalid:{idx.port} HTTP/1.1", f"sbx-index.invalid:{idx.port}")
              in seen, "the upstream got the CONNECT", seen)
    finally:
        s.stop()
    # The egress proxy's own checks come first: a host not in download-hosts,
    # and an address literal the guard refuses, never reach the upstream.
    for allow, url, why in [
            (["--download-hosts", "other.example"], name_url,
             "host sbx-index.invalid is not in download-hosts"),
            ([], idx.url, "address 127.0.0.1 is loopback")]:
        seen.clear()
        s = Server(bin_dir, "--workers", "1", "--index-url", url, "--pip-proxy", proxy, *allow)
        try:
            rc, out = s.run(HELLO, *req_flags("sbx-up"))
            check(out.get("status") == "FAILED_PRECONDITION" and why in out.get("error", ""),
                  f"refused before the upstream: {why}", out)
            check(seen == [], "the upstream saw nothing", seen)
        finally:
            s.stop()
    up.shutdown()
    idx.stop()


def test_requirements_urls(bin_dir, check):
    """--requirements-allow-urls: "name @ http(s)://.../x.whl", fetched by the
    server's downloader (download-hosts and the address guard apply) and
    installed by pip offline."""
    root = tempfile.mkdtemp(prefix="sbx-urlwheels-")
    wheel = make_module_wheel(root, "sbx-url", "1.0", value="from a URL")
    make_module_wheel(root, "sbx-slow", "1.0", value="slow")
    make_module_wheel(root, "sbx-huge", "1.0", value="huge", padding=5 << 20)
    digest = hashlib.sha256(open(wheel, "rb").read()).hexdigest()

    class Wheels(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=root, **kw)

        def do_GET(self):
            if self.path.startswith("/slow/"):  # holds a build for a while
                time.sleep(3)
                self.path = self.path[len("/slow"):]
            super().do_GET()

        def log_message(self, *a):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Wheels)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    web = f"http://127.0.0.1:{httpd.server_address[1]}"
    good = f"sbx-url @ {web}/sbx_url-1.0-py3-none-any.whl"
    s = Server(bin_dir, "--workers", "2", "--offline", "1", "--requirements-allow-urls", "1",
               "--download-hosts", "127.0.0.1", "--max-concurrent-builds", "1",
               "--pip-disk-bytes", str(4 << 20))
    guarded = Server(bin_dir, "--workers", "1", "--offline", "1",
                     "--requirements-allow-urls", "1")
    try:
        check(info(s)["requirements_available"] is True,
              "requirements are available with URLs allowed and no other source", info(s))
        rc, out = s.run(IMPORT.format(mod="sbx_url"), *req_flags(good))
        check(out.get("stdout") == "from a URL\n", "a wheel named by URL is installed and imported",
              out)
        builds = info(s)["environment_builds_total"]
        rc, out = s.run(IMPORT.format(mod="sbx_url"), *req_flags(good))
        check(out.get("stdout") == "from a URL\n" and info(s)["environment_builds_total"] == builds,
              "the same URL set reuses its environment", out)
        # A pinned SHA-256 is checked after the download.
        rc, out = s.run(IMPORT.format(mod="sbx_url"), *req_flags(f"{good}#sha256={digest.upper()}"))
        check(out.get("stdout") == "from a URL\n", "a wheel whose SHA-256 matches the pin installs",
              out)
        before = info(s)["runs_total"]
        rc, out = s.run(HELLO, *req_flags(f"{good}#sha256={'0' * 64}"))
        check(out.get("status") == "FAILED_PRECONDITION"
              and f"has SHA-256 {digest}, not the pinned one" in out.get("error", ""),
              "a wheel whose SHA-256 differs from the pin: FAILED_PRECONDITION, nothing ran", out)
        missing = f"sbx-url @ {web}/sbx_url-9.9-py3-none-any.whl"
        rc, out = s.run(HELLO, *req_flags(missing))
        err = out.get("error", "")
        check(out.get("status") == "FAILED_PRECONDITION" and "could not download" in err
              and "HTTP status 404" in err and "nothing ran" in err,
              "a URL that is not there: FAILED_PRECONDITION naming it", out)
        huge = f"sbx-huge @ {web}/sbx_huge-1.0-py3-none-any.whl"
        rc, out = s.run(HELLO, *req_flags(huge))
        err = out.get("error", "")
        check(out.get("status") == "FAILED_PRECONDITION" and "could not download" in err
              and "larger than 4 MiB" in err,
              "a wheel over --pip-disk-bytes: FAILED_PRECONDITION, stopped while it arrives", out)
        for spec, why in [("x @ file:///etc/passwd", "http:// or https://"),
                          (f"x @ {web}/x-1.0.tar.gz", "wheel file"),
                          (f"x @ {web}/x-1.0-py3-none-any.whl?a=b", "query"),
                          (f"x @ {web}/x-1.0-py3-none-any.whl#md5=00", "only fragment")]:
            rc, out = s.run(HELLO, *req_flags(spec))
            check(out.get("status") == "INVALID_ARGUMENT" and why in out.get("error", ""),
                  f"URLs allowed, still INVALID_ARGUMENT for {spec[:40]!r}", out)
        check(info(s)["runs_total"] == before, "nothing ran for refused or failed URL requirements")
        # Without download-hosts, the address guard refuses loopback for
        # requirement URLs too.
        rc, out = guarded.run(HELLO, *req_flags(good))
        err = out.get("error", "")
        check(out.get("status") == "FAILED_PRECONDITION" and "is loopback" in err
              and "public addresses only" in err,
              "a requirement URL on loopback is refused without download-hosts", out)
        # One build at a time (--max-concurrent-builds 1): while a slow one
        # runs, a request for another new set is refused at once, not queued
        # behind it on the other worker; afterwards it builds.
        slow = f"sbx-slow @ {web}/slow/sbx_slow-1.0-py3-none-any.whl"
        other = f"sbx-url @ {web}/sbx_url-1.0-py3-none-any.whl#sha256={'1' * 64}"
        with concurrent.futures.ThreadPoolExecutor(1) as ex:
            holder = ex.submit(s.run, IMPORT.format(mod="sbx_slow"), *req_flags(slow))
            time.sleep(1.5)
            rc, out = s.run(HELLO, "--retries", "0", *req_flags(other))
            check(out.get("status") == "RESOURCE_EXHAUSTED"
                  and "--max-concurrent-builds" in out.get("error", ""),
                  "a second new set while one builds: RESOURCE_EXHAUSTED", out)
            rc, out = s.run(HELLO)
            check(out.get("stdout") == "hello\n", "a run without requirements still runs meanwhile",
                  out)
            rc, out = holder.result()
            check(out.get("stdout") == "slow\n", "the slow build finishes and its run runs", out)
        rc, out = s.run(HELLO, *req_flags(other))
        check(out.get("status") == "FAILED_PRECONDITION" and "not the pinned one" in out.get(
              "error", ""), "afterwards the other set builds (here: its pin fails, as it should)", out)
        rc, out = s.run(HELLO)
        check(out.get("stdout") == "hello\n", "server still serves", out)
    finally:
        s.stop()
        guarded.stop()
        httpd.shutdown()
        shutil.rmtree(root, ignore_errors=True)
