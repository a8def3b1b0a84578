"""Fleets: calls spread over live servers, a dead server is skipped, nothing
runs twice, a draining server's calls move, sessions stay on their server.
Each run id's fate is read from the servers' own logs."""
import asyncio
import collections
import signal
import time

import sandboxd
from conftest import runs_of, wait_for

SLOW = "import time\ntime.sleep({s})\nprint('done')\n"


def total_runs(servers, run_id):
    return sum(runs_of(s, run_id) for s in servers)


def test_calls_spread_over_every_server(servers):
    fleet = [servers.start("--workers", "1") for _ in range(3)]
    with sandboxd.Client([s.tcp for s in fleet]) as c:
        assert c.wait_connected(3)
        results = [c.run_code("print(1)", run_id=f"spread-{i}") for i in range(9)]
    per = collections.Counter(r.endpoint for r in results)
    assert set(per) == {s.tcp for s in fleet} and set(per.values()) == {3}, per
    for i, r in enumerate(results):
        home = next(s for s in fleet if s.tcp == r.endpoint)
        assert runs_of(home, f"spread-{i}") == 1 and total_runs(fleet, f"spread-{i}") == 1


def test_a_server_killed_mid_load(servers):
    """Calls in flight to the killed server end Unknown (they may have run);
    none is sent anywhere else; later calls go to the others."""
    fleet = [servers.start("--workers", "2") for _ in range(3)]
    victim = fleet[1]

    async def main():
        async with sandboxd.AsyncClient([s.tcp for s in fleet], retries=3) as c:
            assert await c.wait_connected(3)
            load = [asyncio.ensure_future(c.run_code(SLOW.format(s=2), run_id=f"load-{i}",
                                                     limits={"timeout_ms": 10000}))
                    for i in range(12)]
            loop = asyncio.get_running_loop()
            ok = await loop.run_in_executor(None, lambda: wait_for(
                lambda: victim.log_text().count("event=run ") == 0
                and _running(victim) >= 1))
            assert ok, "the victim never ran a call"
            victim.proc.kill()
            outcomes = await asyncio.gather(*load, return_exceptions=True)
            later = [await c.run_code("print('later')", run_id=f"later-{i}") for i in range(6)]
            return outcomes, later, c.endpoints()

    outcomes, later, endpoints = asyncio.run(main())
    victim.proc.wait()
    lost = [(i, o) for i, o in enumerate(outcomes) if isinstance(o, Exception)]
    assert lost, "no call was in flight on the killed server"
    for i, e in lost:
        assert isinstance(e, sandboxd.Unknown), e
        assert e.endpoint == victim.tcp and not e.nothing_ran and e.attempts == 1
    for i, r in enumerate(outcomes):
        if not isinstance(r, Exception):
            assert r.stdout == b"done\n" and r.endpoint != victim.tcp
    assert len(lost) == 4, "round-robin over 3 servers: 4 of 12 calls went to the victim"
    assert all(r.stdout == b"later\n" and r.endpoint != victim.tcp for r in later)
    assert endpoints[victim.tcp] is False
    survivors = [s for s in fleet if s is not victim]
    for i, _ in enumerate(outcomes):
        # Each run id appears at most once in all the logs together; the
        # calls that may have run on the victim appear on no other server.
        assert total_runs(fleet, f"load-{i}") <= 1
    for i, _ in lost:
        assert sum(runs_of(s, f"load-{i}") for s in survivors) == 0
    for i in range(6):
        assert total_runs(fleet, f"later-{i}") == 1


def _running(server):
    """Runs in progress on server now, from a client of its own."""
    with sandboxd.Client(server.tcp, retries=0) as c:
        return c.info().running


def test_a_draining_server_sends_calls_elsewhere(servers):
    draining = servers.start("--workers", "1")
    serving = servers.start("--workers", "1")
    with sandboxd.Client(draining.tcp) as d:
        import threading
        long_box = {}
        t = threading.Thread(target=lambda: long_box.update(r=d.run_code(SLOW.format(s=3))))
        t.start()
        assert wait_for(lambda: d.info().running == 1)
        draining.proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: "event=draining" in draining.log_text())
        with sandboxd.Client([draining.tcp, serving.tcp], retries=3) as c:
            assert c.wait_connected(2)
            results = [c.run_code("print('moved')", run_id=f"moved-{i}") for i in range(4)]
        t.join(30)
    assert all(r.stdout == b"moved\n" and r.endpoint == serving.tcp for r in results)
    assert any(r.attempts == 2 for r in results), "no call met the draining server first"
    assert all(runs_of(draining, f"moved-{i}") == 0 for i in range(4))
    assert long_box["r"].stdout == b"done\n"


def test_a_session_stays_on_its_server(servers):
    fleet = [servers.start("--workers", "1") for _ in range(2)]
    with sandboxd.Client([s.tcp for s in fleet]) as c:
        assert c.wait_connected(2)
        first = c.run_code("open('n', 'w').write('1')\n", session_id="fleet-s")
        # The home is the cross-client rule's (docs/CLIENTS.md), computed here
        # on its own: FNV-1a 32 of "fleet-s\0<key>", highest wins.
        def fnv(data):
            h = 0x811C9DC5
            for b in data:
                h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
            return h
        rule = min((s.tcp for s in fleet), key=lambda k: (-fnv(f"fleet-s\0{k}".encode()), k))
        assert first.endpoint == rule
        homes = {c.run_code("print(open('n').read())", session_id="fleet-s").endpoint
                 for _ in range(4)}
        assert homes == {first.endpoint}
        assert [e.name for e in c.list_files("fleet-s")] == ["main.py", "n", "output"]
        assert c.read_file("fleet-s", "n").content == b"1"
        c.close_session("fleet-s")
    # A second client, knowing nothing, finds the same home by hashing.
    with sandboxd.Client([s.tcp for s in reversed(fleet)]) as c2:
        assert c2.wait_connected(2)
        r = c2.run_code("print(1)", session_id="fleet-s")
        assert r.endpoint == first.endpoint and r.session_created
