"""The fake cloud's busiest calls, never queued on its lock: each runs in its caller's thread
when the lock is free, else on a call thread of the cloud's own, in batches under the lock.

Why: with every caller waiting for the cloud's lock itself, a contended lock under the GIL
queues its callers (a woken waiter holds the lock while it waits for the GIL), so the fake, not
the code under test, bounded `bench/sync.py` (four calls per deleted Pod each waited 50-110 ms).
A routed call takes the lock only without waiting, or on the call thread; the cloud's other
calls (`list`, `restart`, `notices`, the controls) wait for it as before. `FakeCloud` routes
`get`, `terminate`, `stop_container` and `provision` (`routed`); a slow fault's delay is slept
in the caller's thread first. The call thread ends after IDLE seconds without a call.
Tests: tests/providers/fake/test_fake_serial.py.
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar

IDLE = 2.0  # seconds the call thread waits for a call before it ends
BATCH = 64  # calls run under one hold of the lock at most, so a waiting `list` gets its turn

T = TypeVar("T")
P = ParamSpec("P")


class _Waiter(Generic[T]):
    __slots__ = ("done", "result", "error")

    def __init__(self) -> None:
        self.done = threading.Lock()
        self.done.acquire()  # released by the call thread once the call ran
        self.result: T | None = None
        self.error: BaseException | None = None


class CallThread:
    """Runs callables on one thread, `BATCH` at a time under `lock` (the cloud's RLock)."""

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any], _Waiter[Any]]] = queue.SimpleQueue()
        self._guard = threading.Lock()  # taken only to start or end the thread
        self._alive = False
        self._ident: int | None = None
        self._inline = threading.local()  # .active: this thread runs a call in place

    def run(self, call: Callable[[], T]) -> T:
        """`call()`'s result (or what it raised): run in the caller's thread when the lock is
        free (taken without waiting, so never queued on), else on the call thread."""
        if self.serving():  # a call made by a call: run it in place
            return call()
        if self._lock.acquire(blocking=False):
            self._inline.active = True
            try:
                return call()
            finally:
                self._inline.active = False
                self._lock.release()
        waiter: _Waiter[T] = _Waiter()
        self._queue.put((call, waiter))
        if not self._alive:
            with self._guard:
                if not self._alive:
                    self._alive = True
                    threading.Thread(target=self._serve, name="fake-cloud-calls", daemon=True).start()
        waiter.done.acquire()
        if waiter.error is not None:
            raise waiter.error
        return waiter.result  # type: ignore[return-value]  # set by the call: T

    def serving(self) -> bool:
        """Whether this thread is running a call now (the call thread, or a caller in place)."""
        return threading.get_ident() == self._ident or getattr(self._inline, "active", False)

    def _serve(self) -> None:
        self._ident = threading.get_ident()
        while True:
            try:
                first = self._queue.get(timeout=IDLE)
            except queue.Empty:
                if self._end():
                    return
                continue
            with self._lock:
                self._batch(first)

    def _end(self) -> bool:
        """End the thread unless a call came; True when it ended."""
        with self._guard:
            if not self._queue.empty():
                return False
            self._alive, self._ident = False, None
        # A `run` that read _alive just before it went False queued without starting a thread:
        # its call is in the queue, and this thread serves it unless a later `run` started one.
        if self._queue.empty():
            return True
        with self._guard:
            if self._alive:
                return True
            self._alive, self._ident = True, threading.get_ident()
            return False

    def _batch(self, item: tuple[Callable[[], Any], _Waiter[Any]]) -> None:
        for n in range(BATCH):
            call, waiter = item
            try:
                waiter.result = call()
            except BaseException as exc:  # the caller's to see, as if it had made the call
                waiter.error = exc
            waiter.done.release()
            if n == BATCH - 1:
                return  # the lock is let go: a caller waiting for it (a list) gets its turn
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return


class _Routed(Protocol):
    _serial: CallThread

    def _pause(self, method: str) -> None: ...


S = TypeVar("S", bound=_Routed)


def routed(method: str) -> Callable[[Callable[Concatenate[S, P], T]], Callable[Concatenate[S, P], T]]:
    """A cloud call run on the cloud's call thread, after its slow faults' delay in the caller's."""

    def wrap(fn: Callable[Concatenate[S, P], T]) -> Callable[Concatenate[S, P], T]:
        def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
            if not self._serial.serving():
                self._pause(method)
            return self._serial.run(lambda: fn(self, *args, **kwargs))

        functools.update_wrapper(call, fn)  # its name and docstring
        return call

    return wrap
