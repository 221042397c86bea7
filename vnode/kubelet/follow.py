"""Followed logs without a thread each (I7): one process-wide pool of POOL_THREADS threads
polls every `PolledLogStream` the containerLogs view streams, with back-off while idle.

Called by `views.serve_logs` (`follow()`); a stream without `read_nowait` never comes here.
The pool never reads faster than the client takes (at most QUEUED_CHUNKS per follower) and
never reads or closes a stream on the reactor. Tests: tests/vnode/kubelet/test_log_followers.py.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable

from providers.base import PolledLogStream

logger = logging.getLogger(__name__)

POOL_THREADS = 2  # a slow provider read delays the others, never stalls the listeners
READ_SIZE = 256 * 1024
QUEUED_CHUNKS = 2  # per follower: a slow client parks its follower, so memory is bounded
FIRST_DELAY = 0.05  # seconds before asking an idle stream again; doubles up to LAST_DELAY
LAST_DELAY = 1.0

# A follower's state, under the pool's lock: due (in the heap), polling (a pool thread reads
# it), parked (its queue is full: polled again once the client takes a chunk), done.
DUE, POLLING, PARKED, DONE = "due", "polling", "parked", "done"


async def until_end(take: Callable[[], Awaitable[bytes | BaseException]]) -> AsyncGenerator[bytes, None]:
    """The chunks `take` gives a log answer, until b"" (the end) or an exception (logged)."""
    while True:
        item = await take()
        if isinstance(item, BaseException):
            logger.warning("log stream failed: %s", item)
            return
        if not item:
            return
        yield item


class Follower:
    """One followed stream: the pool puts what it reads in a bounded queue; the view takes
    it on the event loop. `close()` (from the loop) ends it; the pool closes the stream."""

    def __init__(self, pool: FollowerPool, stream: PolledLogStream, loop: asyncio.AbstractEventLoop) -> None:
        self.stream = stream
        self.state = DUE
        self.closed = False
        self.read_bytes = 0  # what the pool has read from the stream so far
        self.delay = FIRST_DELAY
        self.generation = 0  # heap entries of an older generation are stale
        self._pool = pool
        self._loop = loop
        self._queue: deque[bytes | BaseException] = deque()
        self._ready = asyncio.Event()

    @property
    def queued_bytes(self) -> int:
        with self._pool.lock:
            return sum(len(item) for item in self._queue if isinstance(item, bytes))

    def full(self) -> bool:
        return len(self._queue) >= QUEUED_CHUNKS

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        """What the stream gives until its end, its failure (logged) or `close`."""
        try:
            async for chunk in until_end(self._next):
                yield chunk
        finally:
            self.close()

    async def _next(self) -> bytes | BaseException:
        while True:
            with self._pool.lock:
                if self.closed:
                    return b""
                if self._queue:
                    item = self._queue.popleft()
                    if self.state == PARKED and not self.full():
                        self._pool.schedule(self, time.monotonic())
                    return item
                self._ready.clear()
            await self._ready.wait()

    def deliver(self, item: bytes | BaseException) -> None:
        """From a pool thread, under the pool's lock: queue `item` and wake the view."""
        self._queue.append(item)
        try:
            self._loop.call_soon_threadsafe(self._ready.set)
        except RuntimeError:  # the event loop is gone (process shutdown)
            self.closed = True

    def close(self) -> None:
        """Stop following (idempotent; on the event loop): `chunks` ends at once and a pool
        thread closes the stream next (never on the loop)."""
        self._pool.close(self)
        self._ready.set()


class FollowerPool:
    """The pool threads (started on first use, daemons) and the schedule of every follower."""

    def __init__(self, threads: int = POOL_THREADS) -> None:
        self.lock = threading.Lock()
        self._wake = threading.Condition(self.lock)
        self._due: list[tuple[float, int, int, Follower]] = []
        self._order = itertools.count()
        self._following: set[Follower] = set()
        self._threads: list[threading.Thread] = []
        self._size = threads

    def follow(self, stream: PolledLogStream) -> Follower:
        """Start polling `stream` for the caller's event loop."""
        follower = Follower(self, stream, asyncio.get_running_loop())
        with self.lock:
            self._start_threads()
            self._following.add(follower)
            self.schedule(follower, time.monotonic())
        return follower

    def following(self) -> int:
        """Followers not yet closed and released."""
        with self.lock:
            return len(self._following)

    def snapshot(self) -> list[Follower]:
        """The followers not yet released (for tests and diagnostics)."""
        with self.lock:
            return list(self._following)

    def threads(self) -> int:
        return len(self._threads)

    def schedule(self, follower: Follower, when: float) -> None:
        """Under the lock: poll `follower` (parked or just polled) at `when`."""
        follower.state = DUE
        follower.generation += 1
        heapq.heappush(self._due, (when, next(self._order), follower.generation, follower))
        if self._due[0][3] is follower:
            self._wake.notify()

    def close(self, follower: Follower) -> None:
        with self.lock:
            if follower.closed:
                return
            follower.closed = True
            if follower.state in (DUE, PARKED):
                self.schedule(follower, 0.0)  # a pool thread closes the stream now
            elif follower.state == DONE:
                self._release(follower)
            # POLLING: the thread reading it sees `closed` when the read returns

    def _start_threads(self) -> None:
        while len(self._threads) < self._size:
            thread = threading.Thread(target=self._run, name=f"log-followers-{len(self._threads)}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _run(self) -> None:
        while True:
            follower = self._next_due()
            if follower.closed:
                self._finish(follower)
                continue
            try:
                data: bytes | BaseException | None = follower.stream.read_nowait(READ_SIZE)
            except Exception as exc:
                data = exc
            self._polled(follower, data)

    def _next_due(self) -> Follower:
        with self.lock:
            while True:
                now = time.monotonic()
                if self._due and self._due[0][0] <= now:
                    _, _, generation, follower = heapq.heappop(self._due)
                    if generation == follower.generation and follower.state == DUE:
                        follower.state = POLLING
                        return follower
                    continue
                self._wake.wait(self._due[0][0] - now if self._due else None)

    def _polled(self, follower: Follower, data: bytes | BaseException | None) -> None:
        with self.lock:
            if follower.closed:
                follower.state = POLLING
            elif data is None:  # nothing new: ask again later, less often while it stays idle
                follower.delay = min(follower.delay * 2, LAST_DELAY)
                self.schedule(follower, time.monotonic() + follower.delay)
                return
            else:
                if isinstance(data, bytes):
                    follower.read_bytes += len(data)
                follower.deliver(data)
                if data and not isinstance(data, BaseException) and not follower.closed:
                    follower.delay = FIRST_DELAY
                    if follower.full():
                        follower.state = PARKED  # the view schedules it when it takes a chunk
                    else:
                        self.schedule(follower, time.monotonic())
                    return
        self._finish(follower)  # ended, failed or closed: no more reads

    def _finish(self, follower: Follower) -> None:
        """On a pool thread: close the stream (a provider call, never on the loop)."""
        try:
            follower.stream.close()
        except Exception as exc:
            logger.warning("closing a followed log stream failed: %s", exc)
        with self.lock:
            follower.state = DONE
            if follower.closed:
                self._release(follower)

    def _release(self, follower: Follower) -> None:
        self._following.discard(follower)


_pool: FollowerPool | None = None
_pool_lock = threading.Lock()


def pool() -> FollowerPool:
    """The process's one pool (its threads start with the first follower)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = FollowerPool()
        return _pool


def follow(stream: PolledLogStream) -> Follower:
    """Follow `stream` on the process's pool; call from the event loop."""
    return pool().follow(stream)
