"""The one bound on Events waiting to be written in a process, shared by its EventRecorders.

Called only by `kube.events`, always under the lock it hands out (`EventBudget.lock`, the lock
of every recorder sharing the budget). Does no I/O and never logs: the recorder tells its drops.
Tests: tests/kube/test_events_bound.py::test_I7_one_event_bound_per_process_across_recorders.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

# client-go's `maxQueuedEvents` (tools/record): the kubelet's broadcaster drops Events past a
# queue of 1000 (DropIfChannelFull), one queue per kubelet process, whatever it records about.
MAX_QUEUED = 1000
DROP_LOG_INTERVAL = 60.0  # seconds between two "dropped" WARNINGs of one process


class Waiting(Protocol):
    """A series waiting to be written, as the budget sees it."""

    writing: bool


class EventBudget:
    """At most `max_queued` series wait to be written across every recorder using this budget
    (`PROCESS_BUDGET` unless a recorder is given another): past it, the oldest one not being
    written, whichever recorder holds it, is dropped by that recorder's `drop` callback."""

    def __init__(self, max_queued: int = MAX_QUEUED, *, clock: Callable[[], float] = time.monotonic) -> None:
        if max_queued < 1:
            raise ValueError(f"max_queued must be at least 1, not {max_queued}")
        self.max_queued = max_queued
        self._clock = clock  # its own: recorders sharing it may each have another (tests' fakes)
        self.lock = threading.Lock()
        # Every waiting series, oldest first: id -> (the series, its recorder's drop callback).
        self._waiting: OrderedDict[int, tuple[Waiting, Callable[[Waiting], int]]] = OrderedDict()
        self._unlogged: tuple[int, int] = (0, 0)  # (series, occurrences) dropped since the last WARNING
        self._logged_at = float("-inf")

    def waiting(self) -> int:
        """The series waiting across every recorder (the lock need not be held: a snapshot)."""
        return len(self._waiting)

    def enter(self, series: Waiting, drop: Callable[[Waiting], int]) -> None:
        """Under the lock: `series` waits from now on (a no-op if it waits already)."""
        self._waiting.setdefault(id(series), (series, drop))

    def leave(self, series: Waiting) -> None:
        """Under the lock: `series` waits no more (written, or dropped)."""
        self._waiting.pop(id(series), None)

    def drop_past_bound(self) -> int:
        """Under the lock: drop the oldest waiting series not being written until at most
        `max_queued` wait; the occurrences lost."""
        lost = 0
        while len(self._waiting) > self.max_queued:
            oldest = next((i for i, (s, _) in self._waiting.items() if not s.writing), None)
            if oldest is None:  # cannot happen: the series just added is not being written
                break
            series, drop = self._waiting.pop(oldest)
            occurrences = drop(series)
            lost += occurrences
            self._unlogged = (self._unlogged[0] + 1, self._unlogged[1] + occurrences)
        return lost

    def drop_report(self) -> tuple[int, int]:
        """Under the lock: the (series, occurrences) to tell in a WARNING now, (0, 0) if none
        were dropped since the last one or it is less than DROP_LOG_INTERVAL ago (by the
        budget's own clock)."""
        now = self._clock()
        if self._unlogged == (0, 0) or now - self._logged_at < DROP_LOG_INTERVAL:
            return 0, 0
        report, self._unlogged, self._logged_at = self._unlogged, (0, 0), now
        return report


PROCESS_BUDGET = EventBudget()  # the process's one bound: every recorder's unless told otherwise
