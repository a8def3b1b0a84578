#!/usr/bin/python3
"""What requirements cost, measured in one run against its own sandboxd.

Warm: the same hello-world script through sandbox-run without requirements
and with a requirement whose environment is already in the store,
alternating, so machine noise hits both alike. Printed: both medians and the
difference (goal: at most +10 ms), the median of the paired differences, and
the same from the server's own log (receive to reply, `duration_ms`), which
leaves the client's start out. Cold: the time of runs whose requirement set
is new (each a pip install in the sandbox from a local wheelhouse, then the
copy into the store), median of --cold runs.

Offline: the wheels are written by this script (tests/integration/service/
wheelhouse.py). Starts its own sandboxd (needs root).
"""
import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
from wheelhouse import make_module_wheel  # noqa: E402


def timed(cmd):
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - t0) * 1e3


def server_durations(log_path):
    """duration_ms of OK runs from the log: (without requirements, with)."""
    plain, warm = [], []
    with open(log_path, errors="replace") as f:
        for line in f:
            m = re.search(r"event=run .*status=OK .* env=(\S+) env_ms=(\d+) .*duration_ms=(\d+)",
                          line)
            if m:
                (plain if m.group(1) == "-" else warm).append(int(m.group(3)))
    return plain, warm


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "build", "bin"))
    ap.add_argument("--iterations", type=int, default=40, help="warm samples of each kind")
    ap.add_argument("--cold", type=int, default=3, help="cold builds")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("requirements.py: starting sandboxd needs root")
    bin_dir = os.path.abspath(a.bin_dir)
    tmp = tempfile.mkdtemp(prefix="sbx-bench-req-")
    os.chmod(tmp, 0o755)
    wh = os.path.join(tmp, "wheels")
    os.mkdir(wh)
    make_module_wheel(wh, "sbx-bench-warm", "1.0", "warm")
    for i in range(a.cold):
        make_module_wheel(wh, f"sbx-bench-cold-{i}", "1.0", "cold")
    script = os.path.join(HERE, "hello.py")

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"tcp://127.0.0.1:{port}"
    log_path = os.path.join(tmp, "sandboxd.log")
    log = open(log_path, "wb")
    server = subprocess.Popen([f"{bin_dir}/sandboxd", "--listen", url, "--state-dir",
                               os.path.join(tmp, "state"), "--offline", "1", "--wheelhouse",
                               wh],
                              stdout=log, stderr=log)
    try:
        for _ in range(200):
            if subprocess.run([f"{bin_dir}/sandbox-run", "-e", url, "--health"],
                              capture_output=True).returncode == 0:
                break
            time.sleep(0.05)
        run = [f"{bin_dir}/sandbox-run", "-e", url]
        cold = [timed(run + ["--requirement", f"sbx-bench-cold-{i}", script])
                for i in range(a.cold)]
        warm_cmd = run + ["--requirement", "sbx-bench-warm", script]
        first = timed(warm_cmd)  # builds the warm set
        for _ in range(3):
            timed(run + [script]), timed(warm_cmd)
        with open(log_path, "rb") as f:
            skip = f.read().count(b"event=run ")
        plain, warm = [], []
        for _ in range(a.iterations):
            plain.append(timed(run + [script]))
            warm.append(timed(warm_cmd))
        mp, mw = statistics.median(plain), statistics.median(warm)
        paired = statistics.median(w - p for p, w in zip(plain, warm))
        # Only the measured runs' log lines.
        with open(log_path, errors="replace") as f:
            lines = [l for l in f if "event=run " in l][skip:]
        with open(log_path + ".measured", "w") as f:
            f.writelines(lines)
        sp, sw = server_durations(log_path + ".measured")

        print(f"iterations={a.iterations} cold_builds={a.cold} wheelhouse=local (offline)")
        print(f"warm (sandbox-run CLI, hello.py): without requirements {mp:.2f} ms, "
              f"with a stored environment {mw:.2f} ms, {mw - mp:+.2f} ms "
              f"(paired median {paired:+.2f} ms; goal <= +10 ms)")
        if sp and sw:
            print(f"warm (server log, receive to reply): without {statistics.median(sp):.1f} ms, "
                  f"with {statistics.median(sw):.1f} ms, "
                  f"{statistics.median(sw) - statistics.median(sp):+.1f} ms")
        print(f"cold (new set: pip in the sandbox + store): median {statistics.median(cold):.0f} ms "
              f"(each: {', '.join(f'{c:.0f}' for c in cold)} ms; first warm-set build "
              f"{first:.0f} ms)")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)


if __name__ == "__main__":
    main()
