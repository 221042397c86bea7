"""The worker pool over a work queue, with one retry vocabulary, and joining threads within a deadline.

Every controller (the pod controller, placement) runs its `sync(key)` here: N daemon
threads take keys from a `WorkQueue`, never two at once for one key. A sync says what
comes next in one of two ways, and only these: it *raises* `Retry(delay)` when the work
failed and must be tried again (with the queue's backoff, or after `delay`), or it
*returns* `Requeue(after)` when it succeeded but wants another look later. Returning None
means done. Any other exception is logged and retried with backoff. A sync whose next
step is slow (a cloud's provision or terminate) returns `Handoff(work)` instead: `work`
runs on the pool's `operations` (`kube.operations.OperationPool`), the worker goes on with
other keys, and the key stays in progress (so never synced twice at once) until `work`
returns or raises, which is then handled as the sync's own outcome.

Shutdown waits for in-flight work, but never longer than the caller's deadline: a thread
still inside a provider or API call by then is abandoned (every thread here is a daemon,
and an interrupted provider call is safe to redo: claims make provisioning idempotent).
Tested in tests/kube/test_worker.py.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from kube.workqueue import WorkQueue

logger = logging.getLogger(__name__)


class Retry(Exception):
    """The work for this key failed and must be tried again: after `delay` seconds, or
    with the queue's exponential backoff when `delay` is None."""

    def __init__(self, message: str, *, delay: float | None = None) -> None:
        super().__init__(message)
        self.delay = delay


@dataclass(frozen=True)
class Requeue:
    """The work for this key succeeded; look at it again after `after` seconds."""

    after: float


@dataclass(frozen=True)
class Handoff:
    """The rest of this key's work is slow: run `work` on the operations pool; what it
    returns or raises is the sync's outcome."""

    work: Callable[[], Requeue | None]


class Operations(Protocol):
    """Where handed-off work runs (kube.operations.OperationPool): False once stopping."""

    def submit(self, work: Callable[[], None]) -> bool: ...


Sync = Callable[[str], "Requeue | Handoff | None"]
OnRetry = Callable[[str, Retry, int], None]


class WorkerPool:
    """`workers` threads running `sync` over `queue`. Constructing it starts nothing;
    `start()` does. `on_retry(key, error, failures_in_a_row)` hears every Retry. Without
    `operations`, handed-off work runs on the worker itself."""

    def __init__(
        self,
        queue: WorkQueue,
        sync: Sync,
        *,
        name: str,
        workers: int = 8,
        on_retry: OnRetry | None = None,
        operations: Operations | None = None,
    ) -> None:
        self.queue = queue
        self._operations = operations
        self._sync = sync
        self._name = name
        self._workers = workers
        self._on_retry = on_retry
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        for index in range(self._workers):
            thread = threading.Thread(target=self._work, name=f"{self._name} worker {index}", daemon=True)
            self.threads.append(thread)
            thread.start()

    def stop(self, timeout: float) -> list[threading.Thread]:
        """Close the queue (workers end after their current key); returns the threads
        still busy after `timeout` seconds."""
        self.queue.close()
        return join_within(self.threads, timeout)

    def _work(self) -> None:
        while True:
            key = self.queue.get()
            if key is None:
                return
            self.process(key)

    def process(self, key: str) -> None:
        """Run `sync` for one key taken from the queue, and tell the queue how it went."""
        self._settle(key, lambda: self._sync(key))

    def _settle(self, key: str, step: Callable[[], Requeue | Handoff | None]) -> None:
        try:
            outcome = step()
        except Retry as exc:
            failures = self.queue.done(key, failed=True, retry_in=exc.delay)
            logger.info("%s %s: retrying (%d in a row): %s", self._name, key, failures, exc)
            if self._on_retry is not None:
                self._on_retry(key, exc, failures)
            return
        except Exception:
            logger.exception("%s %s: unexpected error; retrying with backoff", self._name, key)
            self.queue.done(key, failed=True)
            return
        if isinstance(outcome, Handoff):
            work = outcome.work
            if self._operations is None:
                return self._settle(key, work)
            if not self._operations.submit(lambda: self._settle(key, work)):
                self.queue.done(key)  # stopping: the work is left for the next start
            return
        self.queue.done(key)
        if outcome is not None:
            self.queue.add(key, delay=max(0.0, outcome.after))


def join_within(threads: Iterable[threading.Thread], timeout: float) -> list[threading.Thread]:
    """Join every thread within `timeout` seconds in all (not per thread); returns those
    still running at the end."""
    threads = list(threads)
    deadline = time.monotonic() + max(0.0, timeout)
    for thread in threads:
        if thread.ident is not None:  # a thread never started has nothing to wait for
            thread.join(max(0.0, deadline - time.monotonic()))
    return [thread for thread in threads if thread.is_alive()]


def describe(threads: Iterable[threading.Thread]) -> str:
    """`name (file:line in function)` for each thread, where it is right now."""
    frames = sys._current_frames()
    described = []
    for thread in threads:
        frame = frames.get(thread.ident) if thread.ident is not None else None
        where = f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}" if frame else "?"
        described.append(f"{thread.name} ({where})")
    return ", ".join(described)
