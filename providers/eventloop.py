"""`LoopThread`: one private asyncio event loop on one daemon thread, for providers whose
callers are synchronous threads (the kubelet API's workers) but whose I/O multiplexes.

Used by `providers.ssh.loop` (every SSH connection of the process) and by
`providers.fake.forward` (every detached echo connection). Started on first use; never runs
caller code other than the coroutines it is handed; its threads are its own and a fixed pool.
Tests: tests/providers/ssh/test_ssh.py, tests/providers/fake/test_fake_forward.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import select
import socket
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """One event loop on one daemon thread; `run` blocks the calling thread for a result.

    The loop's default executor (what `run_in_executor(None, ...)` uses: asyncssh builds each
    connection's options there) is a fixed pool of `executor_threads`, so no burst of
    connections adds threads beyond it."""

    def __init__(self, name: str, *, executor_threads: int = 2) -> None:
        self._name = name
        self._executor_threads = executor_threads
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                pool = concurrent.futures.ThreadPoolExecutor(self._executor_threads, f"{self._name}-executor")
                loop.set_default_executor(pool)
                ready = threading.Event()
                thread = threading.Thread(target=self._serve, args=(loop, ready), name=self._name, daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule `coro` on the loop; the caller may wait on the future or not."""
        return asyncio.run_coroutine_threadsafe(coro, self._ensure())

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the loop and wait for its result; TimeoutError cancels it."""
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer in {timeout} s") from None

    def stop(self) -> None:
        """Cancel what still runs, stop the loop and join its thread. A later use starts a new one."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(_cancel_all(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()  # also shuts the default executor down


async def _cancel_all() -> None:
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def hung_up(sock: socket.socket) -> bool:
    """Whether the peer of a connected stream socket has closed it entirely (POLLHUP), as
    opposed to only shutting down its writing (which reads as EOF too). Never waits."""
    try:
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLOUT)
        return any(events & (select.POLLHUP | select.POLLERR) for _fd, events in poller.poll(0))
    except (OSError, ValueError):
        return True
