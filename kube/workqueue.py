"""A work queue of keys with per-key exponential backoff (client-go's semantics).

Used by the pod controller's workers. A key is waiting or being processed, never both,
and never processed by two workers at once; an enqueue while processing runs the key
once more afterwards; an enqueue of a waiting key only ever moves it earlier. Unlike
upstream, a failing key is never dropped: its backoff is capped and it keeps retrying.
Tested in tests/kube/test_workqueue.py.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable


class WorkQueue:
    """Thread-safe. `clock` is injected so tests never sleep for real backoff."""

    def __init__(
        self,
        *,
        base_delay: float = 0.005,
        max_delay: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._base = base_delay
        self._max = max_delay
        self._clock = clock
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, str]] = []
        self._due: dict[str, float] = {}  # waiting keys -> when they are due
        self._processing: set[str] = set()
        self._redirty: dict[str, float] = {}  # processing keys enqueued again meanwhile
        self._failures: dict[str, int] = {}
        self._seq = itertools.count()
        self._closed = False

    def add(self, key: str, *, delay: float = 0.0) -> None:
        """Queue `key` to run after `delay` (or earlier, if it is already due sooner)."""
        with self._cond:
            due = self._clock() + delay
            if key in self._processing:
                self._redirty[key] = min(due, self._redirty.get(key, due))
                return
            self._push(key, due)

    def _push(self, key: str, due: float) -> None:
        current = self._due.get(key)
        if current is not None and current <= due:
            return
        self._due[key] = due
        heapq.heappush(self._heap, (due, next(self._seq), key))
        self._cond.notify()

    def get(self, timeout: float | None = None) -> str | None:
        """The next due key (now being processed), or None on timeout or close."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while not self._closed:
                while self._heap and self._due.get(self._heap[0][2]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # superseded by an earlier entry
                now = self._clock()
                if self._heap and self._heap[0][0] <= now:
                    _, _, key = heapq.heappop(self._heap)
                    del self._due[key]
                    self._processing.add(key)
                    return key
                waits = [self._heap[0][0] - now] if self._heap else []
                if deadline is not None:
                    if now >= deadline:
                        return None
                    waits.append(deadline - now)
                self._cond.wait(min(waits) if waits else None)
            return None

    def done(self, key: str, *, failed: bool = False, retry_in: float | None = None) -> int:
        """Finish processing `key`. A failure re-queues it with backoff (or after `retry_in`
        when the failure says when); returns how many times in a row it has failed (0 after
        a success)."""
        with self._cond:
            self._processing.discard(key)
            redirty = self._redirty.pop(key, None)
            if failed:
                failures = self._failures.get(key, 0) + 1
                self._failures[key] = failures
                delay = retry_in if retry_in is not None else min(self._max, self._base * (2 ** (failures - 1)))
                self._push(key, self._clock() + delay)
                if redirty is not None:  # an event during the failed run: retry at once
                    self._push(key, redirty)
                return failures
            self._failures.pop(key, None)
            if redirty is not None:
                self._push(key, redirty)
            return 0

    def failures(self, key: str) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    def close(self) -> None:
        """Wake every waiting worker; `get` returns None from now on."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
