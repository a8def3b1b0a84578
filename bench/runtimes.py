#!/usr/bin/python3
"""The runtimes (docs/RUNTIMES.md): hello world through the service against
the bare command on the host, for every runtime the server lists, measured
side by side in one run.

For each available runtime of GetInfo's runtime_info (python, bash, node, c,
cpp, python-zygote aside) one RunCode of its hello world by runtime name,
from a running client over one connection (the raw wire, tests/lib/harness
WireCaller: no client library's own cost), against the bare command in a
scratch directory of the host:

  python  /usr/bin/python3 main.py
  others  the manifest's run argv and env (bash main.sh, node main.js),
          /workspace being the scratch directory
  c, cpp  the manifest's compile command (its own flags: gcc -std=gnu17 -O2
          ... main.c -lm), then its run (./a.out)

each bare command in the environment a run gets (PATH, HOME, LANG, TMPDIR
as server/sandbox/spawn.c sets them, then the manifest's env), not this
process's; and for c and cpp the compile stage alone: the service's
CompileResult.wall_time_ms (the compiler in the sandbox, as the engine times
it) and the whole call's time, against the bare compile command.

Every round times each runtime's service call and bare command once,
alternating which goes first; the figures are medians of --rounds rounds,
after one warm-up of each (the server's first run of a runtime, the page
cache). The machine is shared: only the ratios mean anything.

Starts its own sandboxd (needs root; --workers 2, the build's runtimes
directory beside the binary) unless --url is given.

  sudo /usr/bin/python3 bench/runtimes.py [--rounds 30] [--json FILE]
       [--bin-dir build/bin] [--uid-base N] [--port N]

bench/run-all calls measure() for its runtime rows.
"""
import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "lib"))
import harness  # noqa: E402

HELLO = {
    "python": 'print("hello")\n',
    "bash": "echo hello\n",
    "node": 'console.log("hello");\n',
    "c": '#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n',
    "cpp": '#include <iostream>\nint main() { std::cout << "hello" << std::endl; }\n',
}
# A runtime's hello world by its language when its name is not one above.
BY_LANGUAGE = {"python": "python", "bash": "bash", "javascript": "node", "c": "c",
               "c++": "cpp"}
ORDER = ["python", "bash", "node", "c", "cpp"]


def manifests(bin_dir):
    """{runtime name: manifest} from the runtimes directory beside bin_dir."""
    out = {}
    for path in sorted(glob.glob(os.path.join(bin_dir, "..", "share", "sandboxd", "runtimes",
                                              "*.json"))):
        with open(path) as f:
            m = json.load(f)
        out[m["name"]] = m
    return out


def hello_of(info):
    key = info.name if info.name in HELLO else BY_LANGUAGE.get(info.language)
    return HELLO.get(key)


class Bare:
    """A runtime's bare command in a scratch directory of the host, as the
    sandbox runs it in /workspace."""

    def __init__(self, info, manifest, code, scratch):
        self.dir = os.path.join(scratch, info.name)
        os.makedirs(os.path.join(self.dir, "mounts"))
        here = lambda argv: [w.replace("/workspace", self.dir) for w in argv]  # noqa: E731
        if manifest is None:  # the built-in python
            file, self.run_argv, self.env = "main.py", ["/usr/bin/python3", "main.py"], {}
        else:
            file, self.run_argv = manifest["file"], here(manifest["run"])
            self.env = manifest.get("env", {})
        compile_ = (manifest or {}).get("compile")
        self.compile_argv = here(compile_["command"]) if compile_ else None
        with open(os.path.join(self.dir, file), "w") as f:
            f.write(code)
        # The environment a run gets (spawn.c's minimum, then the
        # manifest's), not this process's: the host's NODE_EXTRA_CA_CERTS
        # alone made bare node load the CA bundle, 110 ms against 40.
        self.penv = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": self.dir,
                     "LANG": "C.UTF-8", "TMPDIR": "/tmp", **self.env}

    def _run(self, argv):
        t0 = time.perf_counter()
        p = subprocess.run(argv, cwd=self.dir, env=self.penv, capture_output=True)
        dt = time.perf_counter() - t0
        if p.returncode != 0:
            raise RuntimeError(f"bare {' '.join(argv)}: exit {p.returncode}: "
                               f"{p.stderr.decode(errors='replace')[-500:]}")
        return dt, p.stdout

    def hello(self):
        """(whole seconds, compile seconds or None): compile and run."""
        c = self._run(self.compile_argv)[0] if self.compile_argv else None
        r, out = self._run(self.run_argv)
        if out != b"hello\n":
            raise RuntimeError(f"bare {' '.join(self.run_argv)}: printed {out[:200]!r}")
        return (c or 0.0) + r, c


def service_hello(w, pb, info, code):
    """(call seconds, CompileResult.wall_time_ms / 1e3 or None)."""
    req = pb.RunCodeRequest(code=code, runtime=info.name)
    t0 = time.perf_counter()
    status, message, payload = w.call("RunCode", req)
    dt = time.perf_counter() - t0
    if status != 0:
        raise RuntimeError(f"RunCode runtime {info.name}: status {status}: {message}")
    r = pb.RunCodeResponse.FromString(payload)
    if r.stdout != b"hello\n" or r.exit_code != 0:
        raise RuntimeError(f"runtime {info.name}: exit {r.exit_code}, killed_by {r.killed_by}, "
                           f"stdout {r.stdout[:200]!r}, stderr {r.stderr[-300:]!r}")
    return dt, (r.compile.wall_time_ms / 1e3 if r.HasField("compile") else None)


def runtime_infos(w, pb):
    status, message, payload = w.call("GetInfo", pb.GetInfoRequest())
    if status != 0:
        raise RuntimeError(f"GetInfo: status {status}: {message}")
    return list(pb.GetInfoResponse.FromString(payload).runtime_info)


def measure(bin_dir, port, rounds, progress=lambda msg: None):
    """{runtime: figures} for every runtime the server on port lists
    (python-zygote aside); an unavailable one as {"unavailable": reason}."""
    pb = harness.load_pb2(bin_dir)
    w = harness.WireCaller(port, pb, timeout=120)
    scratch = tempfile.mkdtemp(prefix="sbx-bench-runtimes-")
    out = {}
    try:
        found = {}
        mans = manifests(bin_dir)
        for info in runtime_infos(w, pb):
            if info.name == "python-zygote":
                continue
            code = hello_of(info)
            if not info.available or code is None:
                out[info.name] = {"language": info.language, "version": info.version,
                                  "unavailable": info.unavailable_reason if not info.available
                                  else "no hello world for its language here"}
                continue
            found[info.name] = (info, code, Bare(info, mans.get(info.name), code, scratch))
        names = sorted(found, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))
        samples = {n: {"svc": [], "bare": [], "svc_compile": [], "bare_compile": []}
                   for n in names}
        for n in names:  # warm-up: the server's first run of it, the page cache
            info, code, bare = found[n]
            service_hello(w, pb, info, code)
            bare.hello()
        for i in range(rounds):
            progress(f"round {i + 1}/{rounds}")
            for n in names:
                info, code, bare = found[n]
                s = samples[n]
                first, second = (service_hello, bare.hello) if i % 2 == 0 else (bare.hello,
                                                                                    service_hello)
                for fn in (first, second):
                    if fn is service_hello:
                        dt, c = service_hello(w, pb, info, code)
                        s["svc"].append(dt)
                        if c is not None:
                            s["svc_compile"].append(c)
                    else:
                        dt, c = bare.hello()
                        s["bare"].append(dt)
                        if c is not None:
                            s["bare_compile"].append(c)
        for n in names:
            info, _, bare = found[n]
            s = samples[n]
            ms = lambda xs: round(statistics.median(xs) * 1e3, 2)  # noqa: E731
            f = {"language": info.language, "version": info.version,
                 "bare_command": " ".join(bare.run_argv).replace(bare.dir, "/workspace"),
                 "service_ms": ms(s["svc"]), "bare_ms": ms(s["bare"])}
            f["ratio"] = round(f["service_ms"] / f["bare_ms"], 3)
            if s["svc_compile"]:
                f["compile_command"] = " ".join(bare.compile_argv).replace(bare.dir,
                                                                           "/workspace")
                f["service_compile_ms"] = ms(s["svc_compile"])  # CompileResult.wall_time_ms
                f["bare_compile_ms"] = ms(s["bare_compile"])
                f["compile_ratio"] = round(f["service_compile_ms"] / f["bare_compile_ms"], 3)
            out[n] = f
        return out
    finally:
        w.close()
        shutil.rmtree(scratch, ignore_errors=True)


def render(figures):
    head = ("runtime", "version", "what", "service", "bare", "ratio")
    lines = []
    for n, f in figures.items():
        if "unavailable" in f:
            lines.append((n, f["version"] or "-", "unavailable: " + f["unavailable"][:60], "-",
                          "-", "-"))
            continue
        what = "hello world, call" + (" (compile + run)" if "compile_ratio" in f else "")
        lines.append((n, f["version"], what, f"{f['service_ms']:.1f} ms",
                      f"{f['bare_ms']:.1f} ms", f"{f['ratio']:.2f}"))
        if "compile_ratio" in f:
            lines.append(("", "", "compile (CompileResult.wall_time_ms)",
                          f"{f['service_compile_ms']:.1f} ms", f"{f['bare_compile_ms']:.1f} ms",
                          f"{f['compile_ratio']:.2f}"))
    w = [max(len(x[i]) for x in [head, *lines]) for i in range(len(head))]
    text = [" | ".join(h.ljust(w[i]) for i, h in enumerate(head)).rstrip(),
            "-+-".join("-" * x for x in w)]
    for line in lines:
        text.append(" | ".join(c.rjust(w[i]) if i >= 3 else c.ljust(w[i])
                               for i, c in enumerate(line)).rstrip())
    return "\n".join(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(REPO, "build", "bin"))
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--url", help="a running server's tcp://127.0.0.1:PORT (else one is started)")
    ap.add_argument("--uid-base", type=int, help="the started server's (default: allocated)")
    ap.add_argument("--port", type=int, help="the started server's TCP port (default: a free one)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    a = ap.parse_args()
    if a.rounds < 1:
        sys.exit("runtimes.py: --rounds must be at least 1")
    bin_dir = os.path.abspath(a.bin_dir)
    server = None
    if a.url:
        if not a.url.startswith("tcp://127.0.0.1:"):
            sys.exit("runtimes.py: --url must be tcp://127.0.0.1:PORT")
        port = int(a.url.rsplit(":", 1)[1])
    else:
        if os.geteuid() != 0:
            sys.exit("runtimes.py: needs root to start sandboxd (or --url)")
        if a.port:
            harness.free_port = lambda: a.port  # the one port this run may use
        flags = ("--workers", "2")
        server = (harness.Server(bin_dir, a.uid_base, *flags) if a.uid_base
                  else harness.Server(bin_dir, *flags))
        port = server.port
    load_before = os.getloadavg()
    t0 = time.monotonic()
    status = 0
    try:
        figures = measure(bin_dir, port, a.rounds,
                          lambda m: print(f"runtimes: {m}", file=sys.stderr, flush=True))
    finally:
        if server is not None:
            status = server.stop()
            harness.clean_scratch(keep=status != 0)
    load_after = os.getloadavg()
    head = (f"bench/runtimes.py: {a.rounds} rounds, medians; {os.cpu_count()} CPUs, load "
            f"{'/'.join(f'{x:.2f}' for x in load_before)} before, "
            f"{'/'.join(f'{x:.2f}' for x in load_after)} after, "
            f"{time.monotonic() - t0:.0f} s; service: RunCode by runtime name over one "
            f"connection (sandboxd --workers 2); bare: the command on the host")
    print(head + "\n\n" + render(figures))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"header": head, "rounds": a.rounds, "load_before": load_before,
                       "load_after": load_after, "runtimes": figures}, f, indent=1)
    return 0 if status == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
