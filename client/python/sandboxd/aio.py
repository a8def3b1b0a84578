"""aio.py: the asyncio client. The same methods and rules as Client
(_core.py), as coroutines: nng's completion callbacks wake the event loop
with call_soon_threadsafe, so any number of calls can be in flight from one
client without a thread per call. Host names are looked up with the loop's
getaddrinfo."""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Optional, Union

from . import _core
from ._endpoint import addresses_from
from ._exchange import TransportFailure, exchange_async
from ._fleet import Fleet
from .stream import AsyncRunStream
from .types import (FileContent, FileList, Health, RunArgs, RunResult, RunUpdate, ServerInfo,
                    StartedRun)

if TYPE_CHECKING:  # PEP 692: typing.Unpack from Python 3.11, typing_extensions before
    from typing_extensions import Unpack

LIVE_POLL_S = 0.01


class AsyncClient(_core.ClientBase):
    """Client's asyncio twin; the arguments are Client's."""

    async def _drive(self, steps):
        outcome = None
        try:
            while True:
                outcome = await self._perform(steps.send(outcome))
        except StopIteration as stop:
            return stop.value

    async def _perform(self, step):
        fleet: Fleet = self._core.fleet
        if isinstance(step, _core.Exchange):
            fleet.acquire(step.endpoint)
            try:
                return await exchange_async(step.endpoint.sock, step.data, step.timeout_ms)
            except TransportFailure as f:
                return f
            finally:
                fleet.release(step.endpoint)
        if isinstance(step, _core.WaitLive):
            loop = asyncio.get_running_loop()
            deadline = loop.time() + step.timeout_s
            while not fleet.has_live(step.endpoint, step.pinned) and loop.time() < deadline:
                await asyncio.sleep(LIVE_POLL_S)
            return fleet.has_live(step.endpoint, step.pinned)
        if isinstance(step, _core.Sleep):
            await asyncio.sleep(step.seconds)
            return None
        if isinstance(step, _core.Resolve):
            return [await self._resolve(t) for t in step.targets]
        raise TypeError(f"unknown step {step!r}")

    @staticmethod
    async def _resolve(target):
        import socket
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
            return addresses_from(target, infos), ""
        except OSError as e:
            return None, str(e)

    async def run_code(self, code: str, **kw: Unpack[RunArgs]) -> RunResult:
        return await self._drive(self._core.run_code(code, **kw))

    def stream(self, code: str, **kw: Unpack[RunArgs]) -> AsyncRunStream:
        """Client.stream as an async iterator (not a coroutine: StartRun is
        sent when the stream is first iterated, entered or awaited):

            async with client.stream(code) as s:
                async for chunk in s:
                    print(chunk.text, end="")
            print(s.result.exit_code)

        The arguments are checked here, and the run id is made here when
        none is given."""
        return AsyncRunStream(self, self._core.start_request(code, **kw))

    async def start_run(self, code: str, **kw: Unpack[RunArgs]) -> StartedRun:
        req = self._core.start_request(code, **kw)
        return (await self._drive(self._core.start_run(req)))[0]

    async def watch_run(self, run: Union[StartedRun, str], stdout_offset: int = 0,
                        stderr_offset: int = 0, wait_ms: int = _core.WATCH_WAIT_MS, *,
                        endpoint: Optional[str] = None) -> RunUpdate:
        run_id, ep, attempts = self._core.run_endpoint(run, endpoint)
        return await self._drive(self._core.watch_run(ep, run_id, stdout_offset, stderr_offset,
                                                      wait_ms, attempts))

    async def cancel_run(self, run: Union[StartedRun, str], *,
                         endpoint: Optional[str] = None) -> str:
        run_id, ep, _ = self._core.run_endpoint(run, endpoint)
        return await self._drive(self._core.cancel_run(ep, run_id))

    async def health(self) -> Health:
        return await self._drive(self._core.health())

    async def info(self) -> ServerInfo:
        return await self._drive(self._core.info())

    async def close_session(self, session_id: str) -> None:
        return await self._drive(self._core.close_session(session_id))

    async def list_files(self, session_id: str, path: str = "") -> FileList:
        return await self._drive(self._core.list_files(session_id, path))

    async def read_file(self, session_id: str, path: str, offset: int = 0,
                        length: int = 0) -> FileContent:
        return await self._drive(self._core.read_file(session_id, path, offset, length))

    async def wait_connected(self, count: int = 1, timeout_s: float = 10.0) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while sum(self.endpoints().values()) < count:
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(LIVE_POLL_S)
        return True

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()
