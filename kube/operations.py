"""A bounded pool for slow operations, behind a token-bucket rate limit.

Used by the pod controller (one pool per provider): a sync whose next step is a provider
call that may take seconds (a cloud's provision or terminate) hands that step off here
(`kube.worker.Handoff`), so the controller's few workers go on with other Pods. At most
`concurrency` operations run at once; each takes one token before it starts, from a
bucket of `burst` tokens refilled at `rate` per second (a cloud API's request quota, in
the shape clouds publish it). Operations start in the order they were submitted. Threads
start as work arrives, up to `concurrency`, and then stay. Stopping drops what has not
started and lets what runs finish. The clock and the wait are injected for tests.
Tests: tests/kube/test_operations.py.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kube.worker import join_within

logger = logging.getLogger(__name__)

Work = Callable[[], None]


@dataclass(frozen=True)
class OperationLimits:
    """How many slow operations run at once, and how fast they may start."""

    concurrency: int = 100
    rate: float = 50.0  # operations started per second, sustained
    burst: int = 100  # operations that may start at once after a quiet spell

    def __post_init__(self) -> None:
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise ValueError(f"concurrency={self.concurrency!r} must be a whole number of at least 1")
        if isinstance(self.rate, bool) or not isinstance(self.rate, int | float) or not self.rate > 0:
            raise ValueError(f"rate={self.rate!r} must be a number above 0 (operations per second)")
        if isinstance(self.burst, bool) or not isinstance(self.burst, int) or self.burst < 1:
            raise ValueError(f"burst={self.burst!r} must be a whole number of at least 1")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], base: OperationLimits | None = None) -> OperationLimits:
        """`values` (keys concurrency, rate, burst) over `base` (the defaults). ValueError names
        an unknown key or a bad value."""
        base = base if base is not None else cls()
        unknown = sorted(set(values) - {"concurrency", "rate", "burst"})
        if unknown:
            raise ValueError(f"unknown key {unknown[0]!r} (known: concurrency, rate, burst)")
        return cls(
            concurrency=values.get("concurrency", base.concurrency),
            rate=values.get("rate", base.rate),
            burst=values.get("burst", base.burst),
        )


class TokenBucket:
    """`burst` tokens, refilled at `rate` per second. Thread-safe."""

    def __init__(self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take a token; returns the seconds to wait before using it (0: use it now). Tokens
        taken ahead are owed in order, so waiters never starve each other."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
            self._at = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self._rate


class OperationPool:
    def __init__(
        self,
        limits: OperationLimits,
        *,
        name: str,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[threading.Event, float], bool] | None = None,
    ) -> None:
        self.limits = limits
        self._name = name
        self._bucket = TokenBucket(limits.rate, limits.burst, clock=clock)
        self._wait = wait if wait is not None else (lambda stop, seconds: stop.wait(seconds))
        self._cond = threading.Condition()
        self._pending: collections.deque[Work] = collections.deque()
        self._idle = 0  # threads waiting for work
        self._running = 0
        self._stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def submit(self, work: Work) -> bool:
        """Queue `work`; False (and nothing queued) once the pool is stopping."""
        with self._cond:
            if self._stop.is_set():
                return False
            self._pending.append(work)
            if self._idle > 0:
                self._cond.notify()
            elif len(self.threads) < self.limits.concurrency:
                self._spawn()
        return True

    def _spawn(self) -> None:
        thread = threading.Thread(target=self._serve, name=f"{self._name} operation {len(self.threads)}", daemon=True)
        self.threads.append(thread)
        thread.start()

    @property
    def running(self) -> int:
        """Operations running now."""
        return self._running

    @property
    def waiting(self) -> int:
        """Operations submitted and not yet started."""
        return len(self._pending)

    def _next(self) -> Work | None:
        with self._cond:
            while not self._pending and not self._stop.is_set():
                self._idle += 1
                self._cond.wait()
                self._idle -= 1
            if self._stop.is_set():
                return None
            self._running += 1
            return self._pending.popleft()

    def _serve(self) -> None:
        while (work := self._next()) is not None:
            try:
                delay = self._bucket.reserve()
                if delay > 0 and self._wait(self._stop, delay):
                    continue  # stopping while waiting for a token: the operation never starts
                work()
            except Exception:
                logger.exception("%s: an operation failed", self._name)
            finally:
                with self._cond:
                    self._running -= 1

    def stop(self, timeout: float) -> list[threading.Thread]:
        """No new operations; those not started are dropped, running ones finish (within
        `timeout`). Returns the threads still busy then."""
        with self._cond:
            self._stop.set()
            dropped = len(self._pending)
            self._pending.clear()
            self._cond.notify_all()
        if dropped:
            logger.info("%s: %d operations not started at stop (redone by the next start)", self._name, dropped)
        return join_within(self.threads, timeout)
