"""stream.py: a run's output while it runs, and its cancel (docs/STREAMING.md).

RunStream (Client.stream) and AsyncRunStream (AsyncClient.stream) are the
loop of docs/STREAMING.md around _core's start_run, watch_run and cancel_run:
StartRun through the client's usual endpoint choice, then WatchRun long polls
to that same endpoint from the offsets received so far, until a reply is
complete; CancelRun to that endpoint from any thread or task. _Progress is the
loop's bookkeeping, shared by both; it does no I/O.

A stream holds its endpoint (Fleet.acquire) from StartRun to its end, so that
an endpoint leaving a resolved fleet keeps its socket for the run's watches.

Leaving a `with` block before the stream reached its end (an exception, a
break, a return) cancels the run. The choice: whoever stopped reading has
stopped wanting the output, and a run left going would hold a worker until
its own limits end it with nobody to read the result. A stream iterated
without `with` and abandoned is not cancelled (no network call from a
finalizer); its run ends by itself and the server drops its outcome after
--run-result-ttl-s.
"""
from __future__ import annotations

import asyncio
import codecs
import threading
from collections import deque
from typing import Deque, Dict, Optional

from . import errors
from .types import Chunk, RunResult, RunUpdate, StartedRun

STREAMS = ("stdout", "stderr")


class _Progress:
    """What a stream has received: offsets, decoders, chunks not yet taken,
    and the outcome once a reply was complete."""

    def __init__(self) -> None:
        self.offset: Dict[str, int] = {n: 0 for n in STREAMS}
        self.truncated: Dict[str, bool] = {n: False for n in STREAMS}
        self.decoders = {n: codecs.getincrementaldecoder("utf-8")("replace") for n in STREAMS}
        self.pending: Deque[Chunk] = deque()
        self.state = "unstarted"
        self.complete = False
        self.result: Optional[RunResult] = None
        self.error: Optional[Exception] = None

    def apply(self, u: RunUpdate) -> None:
        self.state = u.state
        for name in STREAMS:
            data: bytes = getattr(u, name)
            start: int = getattr(u, name + "_offset")
            have = self.offset[name]
            # A reply starts at the offset asked, or before it when the
            # offset was past the end; bytes before `have` were yielded.
            new = data[max(0, have - start):]
            at = max(have, start)
            self.offset[name] = max(have, start + len(data))
            text = self.decoders[name].decode(new, final=u.complete)
            if new or text:  # text alone: the stream ended inside a sequence
                self.pending.append(Chunk(stream=name, data=new, text=text, offset=at))
            self.truncated[name] = self.truncated[name] or getattr(u, name + "_truncated")
        if u.complete:
            self.complete = True
            self.result, self.error = u.result, u.error

    def outcome(self) -> RunResult:
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


class _Base:
    _p: _Progress

    @property
    def state(self) -> str:
        """The run's state at the last reply: "unstarted" (async, before
        StartRun), "queued", "running", "done"."""
        return self._p.state

    @property
    def complete(self) -> bool:
        """The outcome is here: .result returns or raises without waiting."""
        return self._p.complete

    @property
    def stdout_truncated(self) -> bool:
        """stdout reached the run's output limit: no more of it will come."""
        return self._p.truncated["stdout"]

    @property
    def stderr_truncated(self) -> bool:
        return self._p.truncated["stderr"]

    @property
    def offsets(self):
        """(stdout, stderr) bytes received so far."""
        return self._p.offset["stdout"], self._p.offset["stderr"]

    _end_raised: bool

    def _unpin(self) -> None:
        raise NotImplementedError

    def _waited(self) -> RunResult:
        """wait()'s end, the run complete: drops the chunks not iterated,
        lets the endpoint go, returns the outcome or raises it."""
        self._p.pending.clear()
        self._unpin()
        return self._p.outcome()

    def _at_end(self) -> None:
        """Iteration reached the outcome: lets the endpoint go, and raises
        the run's error once (the first time the end is reached); the
        caller then stops iterating."""
        self._unpin()
        p = self._p
        if p.error is not None and not self._end_raised:
            self._end_raised = True
            raise p.error


class RunStream(_Base):
    """A started run's output as it arrives (Client.stream).

    Iterate it for Chunk(stream, data, text, offset) objects; the iteration
    ends when the run has ended and all of its output came, and then raises
    the exception run_code would have raised when the outcome is not OK.
    .result is the RunResult (the same as run_code's; reading it before the
    end waits for the end, and the chunks not yet iterated are dropped: the
    result holds all of the output). .cancel() stops the run, from any
    thread. With `with`, leaving the block before the end cancels the run.
    One thread iterates; any thread may cancel.
    """

    def __init__(self, client, started: StartedRun, ep) -> None:
        self._client = client
        self._core = client._core
        self._ep = ep
        self.started = started
        self.run_id = started.run_id
        self.endpoint = started.endpoint
        self._p = _Progress()
        self._p.state = "queued"
        self._end_raised = False
        self._cancelled = False
        self._lock = threading.Lock()
        self._pinned = True
        self._core.fleet.acquire(ep)

    def __iter__(self) -> "RunStream":
        return self

    def __next__(self) -> Chunk:
        p = self._p
        while not p.pending:
            if p.complete:
                self._at_end()
                raise StopIteration
            self._watch()
        return p.pending.popleft()

    def _watch(self) -> None:
        p = self._p
        p.apply(self._client._drive(self._core.watch_run(
            self._ep, self.run_id, p.offset["stdout"], p.offset["stderr"],
            start_attempts=self.started.attempts)))

    def wait(self) -> RunResult:
        """Waits for the end; returns the RunResult or raises run_code's
        exception. Chunks not yet iterated are dropped."""
        p = self._p
        while not p.complete:
            self._watch()
            p.pending.clear()
        return self._waited()

    @property
    def result(self) -> RunResult:
        """The run's RunResult (waits for its end: see wait())."""
        return self.wait()

    def cancel(self) -> str:
        """Cancels the run (CancelRun to the server it runs on) and returns
        the run's state once the server answers: "done" when it has ended,
        its whole process tree gone (the server answers "running" only when
        --max-watchers calls already wait; the kill is on its way then).
        The stream then ends with result.killed_by == "cancelled", or raises
        Cancelled (nothing ran) when the run was still queued. Safe from
        another thread while the iteration waits for output. Nothing is sent
        once the stream has its outcome."""
        if self._p.complete:
            return "done"
        state = self._client._drive(self._core.cancel_run(self._ep, self.run_id))
        self._cancelled = True
        return state

    def close(self) -> None:
        """Cancels the run unless the stream reached its end or was
        cancelled, and lets go of its endpoint."""
        self.__exit__(None, None, None)

    def _unpin(self) -> None:
        with self._lock:
            pinned, self._pinned = self._pinned, False
        if pinned:
            self._core.fleet.release(self._ep)

    def __enter__(self) -> "RunStream":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if not self._p.complete and not self._cancelled:
                try:
                    self.cancel()
                except errors.NotFound:
                    pass  # the run is gone already (its outcome expired): nothing to cancel
                except errors.SandboxError:
                    if exc_type is None:
                        raise  # else the block's own exception is the one to see
        finally:
            self._unpin()


class AsyncRunStream(_Base):
    """RunStream for asyncio (AsyncClient.stream): `async for chunk in
    client.stream(...)`. StartRun is sent by the first iteration, `async
    with`, or `await stream` (which returns the stream); .run_id is known
    before (the client makes it). Cancelling the task that iterates
    (asyncio.CancelledError, a timeout) sends CancelRun and waits for its
    answer before the CancelledError goes on. `await s.cancel()` cancels from
    any task; .result is the outcome once the stream has reached its end
    (`await s.wait()` waits for it)."""

    def __init__(self, client, request) -> None:
        self._client = client
        self._core = client._core
        self._request = request  # the checked RunCodeRequest, run_id set
        self.run_id: str = request.run_id
        self.endpoint: Optional[str] = None
        self.started: Optional[StartedRun] = None
        self._ep = None
        self._start_task: Optional[asyncio.Future] = None
        self._p = _Progress()
        self._end_raised = False
        self._cancelled = False
        self._cancelled_unstarted = False
        self._pinned = False

    # -- starting --

    async def start(self) -> "AsyncRunStream":
        """Sends StartRun once; later calls wait for that one's answer."""
        if self._ep is None:
            if self._start_task is None:
                if self._cancelled_unstarted:
                    raise errors.Cancelled(f"run {self.run_id} was cancelled before it started; "
                                           "nothing was sent", nothing_ran=True,
                                           run_id=self.run_id)
                self._start_task = asyncio.ensure_future(
                    self._client._drive(self._core.start_run(self._request)))
            # Shielded: a cancelled caller leaves StartRun to finish, so
            # that the run it may have started can be cancelled.
            self._adopt(*await asyncio.shield(self._start_task))
        return self

    def _adopt(self, started: StartedRun, ep) -> None:
        if self._ep is None:
            self._core.fleet.acquire(ep)
            self._pinned = True
            self._ep, self.started = ep, started
            self.run_id, self.endpoint = started.run_id, started.endpoint
            self._p.state = "queued"

    def __await__(self):
        return self.start().__await__()

    # -- iterating --

    def __aiter__(self) -> "AsyncRunStream":
        return self

    async def __anext__(self) -> Chunk:
        p = self._p
        while not p.pending:
            if p.complete:
                self._at_end()
                raise StopAsyncIteration
            await self._step()
        return p.pending.popleft()

    async def _step(self) -> None:
        """Starts the run or watches it once; a cancelled task cancels the run."""
        try:
            await self.start()
            p = self._p
            if not p.complete:
                p.apply(await self._client._drive(self._core.watch_run(
                    self._ep, self.run_id, p.offset["stdout"], p.offset["stderr"],
                    start_attempts=self.started.attempts)))
        except asyncio.CancelledError:
            await self._cancel_shielded(quiet=True)
            raise

    async def wait(self) -> RunResult:
        """Waits for the end; returns the RunResult or raises run_code's
        exception. Chunks not yet iterated are dropped."""
        p = self._p
        while not p.complete:
            await self._step()
            p.pending.clear()
        return self._waited()

    @property
    def result(self) -> RunResult:
        """The RunResult once the stream reached its end (or the exception
        run_code would raise); RuntimeError before: await wait() for it."""
        if not self._p.complete:
            raise RuntimeError(f"run {self.run_id} is {self._p.state}: iterate the stream to its "
                               "end or await stream.wait() for the result")
        return self._p.outcome()

    # -- cancelling --

    async def cancel(self) -> str:
        """Cancels the run and returns its state once the server answers
        (RunStream.cancel). Before StartRun was sent, nothing is sent
        ("unstarted") and the stream raises Cancelled (nothing ran); while
        StartRun is in flight, its answer is awaited first."""
        if self._p.complete:
            return "done"
        if self._ep is None:
            if self._start_task is None:
                self._cancelled_unstarted = True
                return "unstarted"
            try:
                await self.start()
            except errors.SandboxError:
                return "unstarted"  # it did not start: the stream raises why
        state = await self._client._drive(self._core.cancel_run(self._ep, self.run_id))
        self._cancelled = True
        return state

    async def _cancel_shielded(self, quiet: bool) -> None:
        """cancel(), carried through even if the caller is cancelled (again)
        meanwhile. quiet: its failure is dropped (a CancelledError, or the
        block's own exception, is what the caller must see)."""
        if self._p.complete or self._cancelled:
            return
        job = asyncio.ensure_future(self.cancel())
        job.add_done_callback(_retrieve)
        try:
            await asyncio.shield(job)
        except asyncio.CancelledError:
            if not quiet:
                raise
        except errors.NotFound:
            pass  # the run is gone already: nothing to cancel
        except errors.SandboxError:
            if not quiet:
                raise

    def _unpin(self) -> None:
        if self._pinned:
            self._pinned = False
            self._core.fleet.release(self._ep)

    async def __aenter__(self) -> "AsyncRunStream":
        return await self.start()

    async def __aexit__(self, exc_type, exc, tb) -> None:
        try:
            await self._cancel_shielded(quiet=exc_type is not None)
        finally:
            self._unpin()


def _retrieve(fut: asyncio.Future) -> None:
    """Marks a background job's exception as seen (it was reported or is moot)."""
    if not fut.cancelled():
        fut.exception()
