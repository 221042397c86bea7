"""The request log: one record per API request, for tests and benchmarks that count calls.

The HTTP layer appends; readers (tests, `/debug/requests`) take snapshots. Thread-safe and
bounded (the oldest records go first); it never records bodies or credentials.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RequestRecord:
    time: float
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    user_agent: str
    code: int
    path: str

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))  # flat fields: no recursive asdict over 100,000 records


class RequestLog:
    """A thread-safe, bounded, list-like log of `RequestRecord`s."""

    def __init__(self, *, limit: int = 100000) -> None:
        self._records: deque[RequestRecord] = deque(maxlen=limit)
        self._lock = threading.Lock()

    def append(self, record: RequestRecord) -> None:
        with self._lock:
            self._records.append(record)

    def snapshot(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    def clear(self) -> None:
        with self._lock:
            self._records.clear()

    def count(self, *, verb: str | None = None, resource: str | None = None, subresource: str | None = None) -> int:
        """How many requests match every given field (`count(verb="patch", resource="pods")`)."""
        return sum(
            1
            for r in self.snapshot()
            if (verb is None or r.verb == verb)
            and (resource is None or r.resource == resource)
            and (subresource is None or r.subresource == subresource)
        )

    def counts(self) -> Counter[tuple[str, str]]:
        """Requests by (verb, resource)."""
        return Counter((r.verb, r.resource) for r in self.snapshot())

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def __iter__(self) -> Iterator[RequestRecord]:
        return iter(self.snapshot())

    def __getitem__(self, index: int) -> RequestRecord:
        return self.snapshot()[index]
