"""Watch fan-out: the per-watcher bounded queue and the selector transitions of one event.

The store calls `Watcher.offer` under its lock for every change; the watch hub
(`watchstream.py`) drains the queue with `take`. A writer never blocks on a watcher: a watcher that
falls more than `max_queue` events behind is marked expired and ends with 410.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Matcher = Callable[[Mapping[str, Any]], bool]


@dataclass
class Change:
    """One stored change; `obj` and `old` are snapshots the store never mutates."""

    type: str
    storage_key: str
    namespace: str
    name: str
    rv: int
    obj: dict[str, Any]
    old: dict[str, Any] | None = None
    _encoded: dict[str, bytes] = field(default_factory=dict, repr=False)

    def encoded(self, event_type: str, encode: Callable[[str, dict[str, Any]], bytes]) -> bytes:
        """The NDJSON line for this change, computed once and shared by every plain watcher."""
        line = self._encoded.get(event_type)
        if line is None:
            line = encode(event_type, self.obj)
            self._encoded[event_type] = line
        return line


class Watcher:
    """A bounded queue of changes for one open watch of one resource (optionally one namespace)."""

    def __init__(self, storage_key: str, namespace: str | None, *, max_queue: int) -> None:
        self.storage_key = storage_key
        self.namespace = namespace
        self.max_queue = max_queue
        self.expired = False
        self.closed = False
        self._queue: deque[Change] = deque()
        self._cond = threading.Condition(threading.Lock())
        self.on_ready: Callable[[], None] | None = None  # called after each offer and on close

    def wants(self, change: Change) -> bool:
        return change.storage_key == self.storage_key and (self.namespace is None or change.namespace == self.namespace)

    def offer(self, change: Change) -> None:
        """Called by the store under its lock; O(1), never blocks on the consumer."""
        with self._cond:
            if self.closed or self.expired:
                return
            if len(self._queue) >= self.max_queue:
                self.expired = True
                self._queue.clear()
            else:
                self._queue.append(change)
            self._cond.notify()
        if self.on_ready is not None:
            self.on_ready()

    def take(self, timeout: float) -> list[Change]:
        """Every queued change, waiting up to `timeout` for one; empty on timeout, close or expiry."""
        with self._cond:
            if not self._queue and not self.closed and not self.expired:
                self._cond.wait(timeout)
            if self.expired or self.closed:
                return []
            items = list(self._queue)
            self._queue.clear()
            return items

    def empty(self) -> bool:
        with self._cond:
            return not self._queue

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()
        if self.on_ready is not None:
            self.on_ready()


def transition(change: Change, matches: Matcher) -> tuple[str, dict[str, Any]] | None:
    """What a selector-filtered watcher sees for `change`, as the real server computes it.

    An object that stops matching is sent as DELETED, one that starts matching as ADDED;
    a change invisible before and after is dropped (None).
    """
    now = matches(change.obj)
    before = change.old is not None and matches(change.old)
    if change.type == "ADDED":
        return ("ADDED", change.obj) if now else None
    if change.type == "DELETED":
        return ("DELETED", change.obj) if (now or before) else None
    if now and before:
        return ("MODIFIED", change.obj)
    if now:
        return ("ADDED", change.obj)
    if before:
        return ("DELETED", change.obj)
    return None
