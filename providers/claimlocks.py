"""One lock per key (a Pod's claim, a sampled run), held with `with locks.held(key):`.

Used by the providers to serialize provision of one claim, and by `usage.UsageSampler` per key.
A key's lock lives only while someone holds or waits for it, so the map never grows with the
number of keys ever seen. Never does I/O or blocks anything but the callers of one key.
Invariant: idle keys hold no lock (tests/providers/test_claimlocks.py::test_claim_locks_are_pruned_when_idle).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterator
from contextlib import contextmanager


class _Entry:
    """A key's lock and how many callers hold it or wait for it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0


class ClaimLocks:
    """Per-key locks, pruned when idle; thread-safe."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._entries: dict[Hashable, _Entry] = {}

    @contextmanager
    def held(self, key: Hashable) -> Iterator[None]:
        """Hold `key`'s lock for the block: one caller per key at a time; other keys never wait."""
        with self._guard:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry()
            entry.users += 1
        try:
            with entry.lock:
                yield
        finally:
            with self._guard:
                entry.users -= 1
                if entry.users == 0:
                    del self._entries[key]

    def __len__(self) -> int:
        """How many keys have a lock now (held or waited for)."""
        with self._guard:
            return len(self._entries)
