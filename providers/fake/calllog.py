"""The fake cloud's call log: what was asked of it and how it answered, for tests, demos
and benchmarks (calls per kind: provision, get, list, terminate, restart, logs, exec, attach).

Written by `FakeCloud` under its lock, read through `FakeCloud.call_log()` /
`call_counts()` and the HTTP service's `/v1/calls` / `/v1/call-counts`. Summaries name
env keys and counts, never their values (I4).
Tests: tests/providers/fake/test_fake_provider.py.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import asdict, dataclass
from typing import Any

MAX_CALLS = 10_000


class Call:
    """One call while it runs: its time, and the outcome it will be logged with."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.outcome = "ok"


@dataclass(frozen=True)
class CallRecord:
    at: float  # clock time
    method: str
    args: str
    outcome: str  # "ok ...", or "<ErrorType>: <message>"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class CallLog:
    """The latest `MAX_CALLS` calls, oldest first, and the count of every call by method
    since the last clear (never truncated, so a long benchmark counts right). Not
    thread-safe on its own."""

    def __init__(self) -> None:
        self._calls: deque[CallRecord] = deque(maxlen=MAX_CALLS)
        self._counts: Counter[str] = Counter()

    def add(self, at: float, method: str, args: str, outcome: str) -> None:
        self._calls.append(CallRecord(at, method, args, outcome))
        self._counts[method] += 1

    def records(self, method: str | None = None) -> list[CallRecord]:
        return [c for c in self._calls if method is None or c.method == method]

    def counts(self) -> dict[str, int]:
        return dict(self._counts)

    def clear(self) -> None:
        self._calls.clear()
        self._counts.clear()
