"""Waiting for a condition in tests: poll with a deadline, never a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(
    condition: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05, *, what: str = "condition"
) -> Any:
    """Poll until `condition()` is truthy and return its value; AssertionError naming `what`
    at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        time.sleep(interval)
