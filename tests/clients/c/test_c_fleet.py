"""The C client's fleets (libsandbox-client through sandbox-run and
sandbox-bench) against three real servers on 127.0.0.2, 127.0.0.3 and
127.0.0.4: calls spread over all of them, a server killed mid-load loses only
the calls it had (UNKNOWN, never sent anywhere else) and nothing runs twice,
a session's calls all go to the server the cross-client rule picks, and a
host name counts as one endpoint per address. Where each run really ran is
read from the servers' own logs."""
import collections
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import (BIN_DIR, bench_cmd, endpoints, records, run_ids, sandbox_run,
                      session_home, wait_for)

SLOW = "import time\ntime.sleep({s})\nprint('done')\n"


def where_ran(fleet, prefix):
    """{run_id: [keys of the servers whose log has it]} for runs named prefix*."""
    out = collections.defaultdict(list)
    for key, s in zip(fleet.keys, fleet.servers):
        for rid in run_ids(s, prefix):
            out[rid].append(key)
    return out


def test_calls_spread_over_every_server(make_fleet, tmp_path):
    fleet = make_fleet("--workers", "2")
    rc, eps = endpoints(*fleet.endpoint_flags())
    assert rc == 0 and eps == {k: True for k in fleet.keys}, eps
    cmd, rec = bench_cmd(tmp_path, "print('hi')\n", *fleet.endpoint_flags(), "--concurrency", "3",
                         "--requests", "30", "--run-id-prefix", "spread")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    calls = records(rec)
    assert len(calls) == 30 and {c["status"] for c in calls} == {"OK"}, calls
    ran = where_ran(fleet, "spread-")
    per_server = collections.Counter(keys[0] for keys in ran.values())
    assert set(per_server) == set(fleet.keys), per_server  # every server ran some
    assert min(per_server.values()) >= 5, per_server  # fewest in flight evens them out
    for c in calls:
        # Each ran once, on the endpoint the client says it went to.
        assert ran[c["run_id"]] == [c["endpoint"]], (c, ran[c["run_id"]])

    # sandbox-run with SANDBOX_URL holding the fleet as a comma-separated list.
    env = {"SANDBOX_URL": ",".join(fleet.keys)}
    for i in range(3):
        rc, out = sandbox_run(tmp_path, "print('env')\n", "--run-id", f"env-{i}", env=env)
        assert rc == 0 and out["stdout"] == "env\n" and out["endpoint"] in fleet.keys, out
        assert where_ran(fleet, f"env-{i}")[f"env-{i}"] == [out["endpoint"]]


def test_a_server_killed_mid_load(make_fleet, tmp_path):
    """Calls in flight to the killed server end UNKNOWN (they may have run)
    and are sent nowhere else, even with retries on; the other calls, and
    later ones, run on the two others; no run id is in two logs."""
    fleet = make_fleet("--workers", "2")
    victim_key = fleet.keys[1]
    victim = fleet.server_of(victim_key)
    cmd, rec = bench_cmd(tmp_path, SLOW.format(s=3), *fleet.endpoint_flags(), "--concurrency", "6",
                         "--requests", "12", "--timeout-ms", "15000", "--retries", "3",
                         "--run-id-prefix", "load")
    bench = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: _running(victim) == 2, 30), "the victim never ran two calls at once"
        victim.proc.kill()
        out, err = bench.communicate(timeout=120)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
    victim.proc.wait()
    calls = records(rec)
    assert len(calls) == 12, (out, err)
    lost = [c for c in calls if c["status"] != "OK"]
    # Fewest in flight over three connected endpoints: 2 of the first 6.
    assert len(lost) == 2, calls
    for c in lost:
        assert c["endpoint"] == victim_key and c["status"] == "UNKNOWN", c
        assert c["attempts"] == 1 and "may or may not have run" in c["error"], c
    ran = where_ran(fleet, "load-")
    for c in calls:
        if c["status"] == "OK":
            assert c["endpoint"] != victim_key and ran[c["run_id"]] == [c["endpoint"]], c
        assert len(ran.get(c["run_id"], [])) <= 1, (c, ran.get(c["run_id"]))
    for c in lost:  # may have run on the victim; ran on no survivor
        assert ran.get(c["run_id"], []) == [], (c, ran.get(c["run_id"]))

    # Later calls go to the survivors; the victim shows as not connected.
    rc, eps = endpoints(*fleet.endpoint_flags(), timeout_ms=1000)
    assert rc == 1 and eps == {k: k != victim_key for k in fleet.keys}, eps
    for i in range(4):
        rc, out = sandbox_run(tmp_path, "print('later')\n", *fleet.endpoint_flags(),
                              "--run-id", f"later-{i}")
        assert rc == 0 and out["stdout"] == "later\n" and out["endpoint"] != victim_key, out
        assert where_ran(fleet, f"later-{i}")[f"later-{i}"] == [out["endpoint"]]


def sessions_with_homes(keys):
    """One session id per endpoint, each held there by the rule."""
    found = {}
    i = 0
    while len(found) < len(keys):
        sid = f"cfleet-{i}"
        found.setdefault(session_home(sid, keys), sid)
        i += 1
    return {sid: home for home, sid in found.items()}


def test_a_session_stays_on_the_rule_home(make_fleet, tmp_path):
    fleet = make_fleet("--workers", "1")
    homes = sessions_with_homes(fleet.keys)
    assert set(homes.values()) == set(fleet.keys)
    for sid, home in homes.items():
        for i in range(3):
            # Each sandbox-run is a new client: only the rule can find the home.
            order = fleet.keys if i % 2 == 0 else list(reversed(fleet.keys))
            rc, out = sandbox_run(tmp_path, "open('n', 'a').write('x')\nprint(open('n').read())\n",
                                  *fleet.endpoint_flags(order), "--session", sid, "--run-id",
                                  f"{sid}-{i}")
            assert rc == 0 and out["endpoint"] == home, (sid, home, out)
            assert out["stdout"] == "x" * (i + 1) + "\n" and out["session_created"] == (i == 0)
        ran = where_ran(fleet, f"{sid}-")
        assert all(keys == [home] for keys in ran.values()) and len(ran) == 3, (home, ran)
        p = subprocess.run([f"{BIN_DIR}/sandbox-run", *fleet.endpoint_flags(), "--session", sid,
                            "--read-file", "n"], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and p.stdout == "xxx", p

    # A server that holds none of them goes: the sessions stay where they are.
    sid, home = next(iter(homes.items()))
    other = next(k for k in fleet.keys if k != home)
    fleet.server_of(other).proc.kill()
    fleet.server_of(other).proc.wait()
    rc, out = sandbox_run(tmp_path, "print(open('n').read())\n", *fleet.endpoint_flags(),
                          "--session", sid, "--run-id", f"{sid}-after")
    assert rc == 0 and out["endpoint"] == home and out["stdout"] == "xxx\n", out
    other_sid = next(s for s, h in homes.items() if h == other)
    # The session of the server that went is not moved to another: it fails,
    # nothing sent, naming the server that holds it.
    rc, out = sandbox_run(tmp_path, "print(1)\n", *fleet.endpoint_flags(), "--session", other_sid,
                          "--run-id", f"{other_sid}-moved", "--connect-timeout-ms", "1000")
    assert rc == 125 and out["status"] == "UNAVAILABLE", out
    assert f"lives on {other}" in out["error"] and "nothing was sent" in out["error"], out
    assert where_ran(fleet, f"{other_sid}-moved") == {}
    p = subprocess.run([f"{BIN_DIR}/sandbox-run", *fleet.endpoint_flags(), "--json",
                        "--close-session", sid], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and json.loads(p.stdout) == {"status": "OK"}, p


NAME = "sbx-cfleet.test"

# Runs in a private mount namespace where /etc/hosts is the test's file.
NAMESPACE_SCRIPT = """
set -e
mount --bind "$HOSTS" /etc/hosts
[ "$(stat -c %i /etc/hosts)" = "$(stat -c %i "$HOSTS")" ] || exit 97
"$BIN/sandbox-run" -e "$URL" --endpoints --connect-timeout-ms 3000 > "$OUT/endpoints.json"
"$BIN/sandbox-bench" -e "$URL" --concurrency 3 --requests 12 --run-id-prefix host \\
    --record "$OUT/spread.jsonl" "$SCRIPT" > /dev/null
touch "$OUT/phase2"
"$BIN/sandbox-bench" -e "$URL" --concurrency 1 --duration 7 --resolve-interval-ms 300 \\
    --run-id-prefix moving --record "$OUT/moving.jsonl" "$SCRIPT" > /dev/null
"""


def test_a_host_name_counts_once_per_address(make_fleet, tmp_path):
    """A name resolving to 127.0.0.2-4 is three endpoints; looked up again,
    it follows the name to one address, and a failed look-up (the name
    gone) keeps the address it had."""
    fleet = make_fleet("--workers", "1")
    hosts = tmp_path / "hosts"

    def write_hosts(*addresses):
        with open(hosts, "w") as f:  # in place: the bind mount keeps the inode
            f.write("".join(f"{a} {NAME}\n" for a in addresses))
    write_hosts("127.0.0.2", "127.0.0.3", "127.0.0.4")
    script = tmp_path / "hello.py"
    script.write_text("print('hi')\n")
    env = dict(os.environ, HOSTS=str(hosts), BIN=BIN_DIR, URL=f"tcp://{NAME}:{fleet.port}",
               OUT=str(tmp_path), SCRIPT=str(script))
    child = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                              NAMESPACE_SCRIPT], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: (tmp_path / "phase2").exists() or child.poll() is not None, 60)
        time.sleep(2)
        t_one = time.monotonic() * 1000
        write_hosts("127.0.0.3")
        time.sleep(2)
        t_gone = time.monotonic() * 1000
        write_hosts()  # the look-up fails now
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err[-3000:]
    eps = json.loads((tmp_path / "endpoints.json").read_text())
    assert eps == {k: True for k in fleet.keys}, eps
    spread = records(tmp_path / "spread.jsonl")
    assert {c["status"] for c in spread} == {"OK"} and len(spread) == 12, spread
    assert {c["endpoint"] for c in spread} == set(fleet.keys), spread
    ran = where_ran(fleet, "host-")
    assert all(ran[c["run_id"]] == [c["endpoint"]] for c in spread), ran

    moving = records(tmp_path / "moving.jsonl")
    assert {c["status"] for c in moving} == {"OK"}, [c for c in moving if c["status"] != "OK"]
    before = {c["endpoint"] for c in moving if c["start_ms"] < t_one}
    one = {c["endpoint"] for c in moving if t_one + 1000 < c["start_ms"] < t_gone}
    gone = [c for c in moving if c["start_ms"] > t_gone + 1000]
    assert before == set(fleet.keys), before
    assert one == {fleet.keys[1]}, one
    assert gone and {c["endpoint"] for c in gone} == {fleet.keys[1]}, gone
    ran = where_ran(fleet, "moving-")
    assert all(ran[c["run_id"]] == [c["endpoint"]] for c in moving)
    with open("/etc/hosts") as f:
        assert NAME not in f.read(), "the host's /etc/hosts was touched"


def test_a_draining_server_sends_calls_elsewhere(make_fleet, tmp_path):
    """A server that answered UNAVAILABLE (draining after SIGTERM, nothing
    ran) is retried elsewhere at once, and avoided by the next calls for a
    second."""
    fleet = make_fleet("--workers", "1")
    draining_key = fleet.keys[0]
    draining = fleet.server_of(draining_key)
    slow = tmp_path / "slow.py"
    slow.write_text(SLOW.format(s=6))
    keep_busy = subprocess.Popen([f"{BIN_DIR}/sandbox-run", "-e", draining.tcp, "--json",
                                  "--timeout-ms", "20000", str(slow)], stdout=subprocess.PIPE,
                                 text=True)
    try:
        assert wait_for(lambda: _running(draining) == 1, 30), "the long run never started"
        draining.proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: "event=draining" in draining.log_text(), 10)
        two = fleet.endpoint_flags(fleet.keys[:2])
        cmd, rec = bench_cmd(tmp_path, "print('moved')\n", *two, "--concurrency", "1",
                             "--requests", "8", "--retries", "3", "--run-id-prefix", "moved")
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr
    finally:
        out, _ = keep_busy.communicate(timeout=60)
    assert json.loads(out)["stdout"] == "done\n", out
    calls = records(rec)
    assert {c["status"] for c in calls} == {"OK"} and len(calls) == 8, calls
    assert {c["endpoint"] for c in calls} == {fleet.keys[1]}, calls
    assert run_ids(draining, "moved-") == []
    retried = sorted((c["start_ms"], c["attempts"]) for c in calls if c["attempts"] > 1)
    # Round-robin reaches the draining server by the second call at the
    # latest; after its UNAVAILABLE it is skipped for a second.
    assert retried and all(a == 2 for _, a in retried), calls
    for (t1, _), (t2, _) in zip(retried, retried[1:]):
        assert t2 - t1 >= 900, retried


def _running(server):
    p = subprocess.run([f"{BIN_DIR}/sandbox-run", "-e", server.tcp, "--info"],
                       capture_output=True, text=True, timeout=30)
    return json.loads(p.stdout)["running"] if p.returncode == 0 else -1


@pytest.mark.parametrize("tool", ["sandbox-run", "sandbox-bench", "sandbox-mcp"])
def test_the_endpoint_list_is_capped_and_checked(tool):
    """Every tool takes -e and $SANDBOX_URL alike (client/cli_endpoints.c):
    at most 64 endpoints either way, and a SANDBOX_URL with none in it is
    a usage error (exit 2) naming where the list came from."""
    extra = {"sandbox-run": ["--health"], "sandbox-bench": ["-n", "1", "/dev/null"],
             "sandbox-mcp": []}[tool]
    many = ["tcp://127.0.0.1:1"] * 65
    cases = [
        ([a for u in many for a in ("-e", u)], {}, "-e: at most 64 endpoints"),
        ([], {"SANDBOX_URL": ",".join(many)}, "SANDBOX_URL: at most 64 endpoints"),
        ([], {"SANDBOX_URL": ",,"}, "SANDBOX_URL: no endpoint in"),
    ]
    for flags, env, want in cases:
        p = subprocess.run([f"{BIN_DIR}/{tool}", *flags, *extra], capture_output=True, text=True,
                           env=dict(os.environ, **env), stdin=subprocess.DEVNULL, timeout=30)
        assert p.returncode == 2 and f"{tool}: {want}" in p.stderr, (flags[:2], env, p.stderr)
