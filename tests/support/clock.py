"""A clock the test moves by hand: the one stand-in for `time.time` / `time.monotonic` where
code under test takes a clock (`now=`, `clock=`, `monotonic=`).

Imported by name (`from tests.support.clock import ManualClock`); nothing here is a test.
"""

from __future__ import annotations


class ManualClock:
    """Returns `now` (seconds) when called; the test sets it or calls `advance`."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
