"""Waiting for a condition in tests: poll with a deadline, never a fixed sleep.

The one `wait_for` of the test tree; every test and rig polls through it. It never sleeps
past its deadline by more than one interval.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(
    condition: Callable[[], Any],
    timeout: float = 30.0,
    interval: float = 0.05,
    *,
    what: str = "condition",
    ignoring: tuple[type[BaseException], ...] = (),
) -> Any:
    """Poll until `condition()` is truthy and return its value; AssertionError naming `what`
    at the deadline. An exception of a type in `ignoring` counts as "not yet"."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except ignoring:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        time.sleep(interval)
