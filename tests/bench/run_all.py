"""bench/run-all's smoke test (ctest bench_run_all_smoke): the one bench
command runs end to end in its --quick mode and prints every row issue 28
asks for, each with a positive, finite ratio. It never asserts a goal: the
timings of a shared machine are noise, and the figures worth reading come
from a quiet machine's default run (README, "Performance").

The rows are listed here, not read from run-all, so that a row dropped
there fails the test.
"""
import json
import math
import os
import subprocess
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Issue 28's rows, and the engine's, the service's, the fronts' and the
# clients'.
ROWS = ["engine_cold", "engine_cell", "engine_zygote", "cold_hello", "cold_plot",
        "zygote_plot", "zygote_hello", "zygote_throughput", "cold_throughput",
        "interpreter_first", "interpreter_zygote", "front_piston", "front_mcp", "client_python",
        "client_ts", "runtime_bash", "runtime_node", "runtime_c", "runtime_c_compile",
        "runtime_cpp", "runtime_cpp_compile"]


def test_run_all_smoke(bin_dir, check):
    with tempfile.TemporaryDirectory(prefix="sbx-run-all-test-") as tmp:
        out_json = os.path.join(tmp, "run-all.json")
        t0 = time.monotonic()
        p = subprocess.run(["/usr/bin/python3", os.path.join(REPO, "bench", "run-all"), "--quick",
                            "--bin-dir", bin_dir, "--json", out_json],
                           capture_output=True, text=True, timeout=540)
        print(p.stdout)
        print(p.stderr[-3000:])
        print(f"bench/run-all --quick took {time.monotonic() - t0:.0f} s")
        check(p.returncode == 0, "run-all --quick exits 0", p.returncode)
        with open(out_json) as f:
            out = json.load(f)
    rows = {r["key"]: r for r in out["rows"]}
    check(sorted(rows) == sorted(ROWS), "the table has every row and no other", sorted(rows))
    table = p.stdout.splitlines()
    for key in ROWS:
        r = rows.get(key, {})
        ratio = r.get("ratio")
        check(isinstance(ratio, float) and math.isfinite(ratio) and ratio > 0,
              f"{key}: a positive ratio", r)
        check(r.get("service", 0) > 0 and r.get("bare", 0) > 0, f"{key}: both sides measured", r)
        line = next((x for x in table if r.get("what") and x.startswith(r["what"])), "")
        check(f"{ratio:.3f}" in line if ratio else False, f"{key}: its row in the printed table",
              line)
    head = out["header"]
    check(head["mode"] == "quick" and len(head["load_before"]) == 3
          and len(head["load_after"]) == 3 and head["cpus"] == os.cpu_count()
          and head["commit"] != "unknown" and head["kernel"], "the header: machine and load",
          head)
    check(table[0].startswith("run-all (quick)") and "load" in table[0],
          "the printed header line", table[:1])
