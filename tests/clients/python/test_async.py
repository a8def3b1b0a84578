"""AsyncClient: many calls in flight from one client, without a thread per
call."""
import asyncio
import threading
import time

import pytest

import sandboxd
from conftest import runs_of

RUN_S = 1.0
CALLS = 16
WORKERS = 2


def test_sixteen_calls_in_flight_overlap(servers):
    s = servers.start("--workers", str(WORKERS))
    seen = {"queue_depth": 0, "running": 0, "threads": 0}

    async def main():
        async with sandboxd.AsyncClient(s.tcp) as c:
            await c.health()  # connected, warm
            threads_before = threading.active_count()

            async def watch():
                while True:
                    info = await c.info()
                    seen["queue_depth"] = max(seen["queue_depth"], info.queue_depth)
                    seen["running"] = max(seen["running"], info.running)
                    seen["threads"] = max(seen["threads"],
                                          threading.active_count() - threads_before)
                    await asyncio.sleep(0.05)

            watcher = asyncio.ensure_future(watch())
            t0 = time.monotonic()
            results = await asyncio.gather(*[
                c.run_code(f"import time\ntime.sleep({RUN_S})\nprint({i})\n",
                           run_id=f"async-{i}", limits={"timeout_ms": 10000})
                for i in range(CALLS)])
            elapsed = time.monotonic() - t0
            watcher.cancel()
            return results, elapsed

    results, elapsed = asyncio.run(main())
    print(f"{CALLS} calls of {RUN_S} s on {WORKERS} workers: {elapsed:.2f} s, seen {seen}")
    assert [r.stdout for r in results] == [f"{i}\n".encode() for i in range(CALLS)]
    # 16 one-second runs on 2 workers: at least 8 s (they cannot overlap
    # more), far below the 16 s of one call at a time.
    assert CALLS / WORKERS * RUN_S * 0.95 <= elapsed < CALLS * RUN_S * 0.85, elapsed
    assert seen["running"] == WORKERS, seen
    assert seen["queue_depth"] >= CALLS - WORKERS - 4, f"calls were not all in flight: {seen}"
    assert seen["threads"] == 0, f"threads were started for calls: {seen}"
    assert all(runs_of(s, f"async-{i}") == 1 for i in range(CALLS))


def test_cancelling_a_call_leaves_the_client_usable(servers):
    s = servers.start("--workers", "1")

    async def main():
        async with sandboxd.AsyncClient(s.tcp) as c:
            task = asyncio.ensure_future(c.run_code("import time\ntime.sleep(3)\n"))
            await asyncio.sleep(0.5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return await c.run_code("print('after')")

    assert asyncio.run(main()).stdout == b"after\n"


def test_one_client_from_several_event_loops_in_threads(servers):
    """The AsyncClient belongs to no loop: each call wakes its own."""
    s = servers.start("--workers", "2")
    c = sandboxd.AsyncClient(s.tcp)
    out = []

    def loop_thread(i):
        out.append(asyncio.run(c.run_code(f"print({i})")).stdout)

    threads = [threading.Thread(target=loop_thread, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    c.close()
    assert sorted(out) == [b"0\n", b"1\n", b"2\n"]
