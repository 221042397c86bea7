"""Waiting for a condition in tests: poll with a deadline, never a fixed sleep.

The one `wait_for` of the test tree; every test and rig polls through it. It never sleeps
past its deadline by more than one interval.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol


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


class Closable(Protocol):
    def close(self) -> None: ...


def read_to_end(stream: Closable, timeout: float = 10.0, *, read: Callable[[], bytes] | None = None) -> bytes:
    """Read `stream` to its end on a thread (with `read`, default `stream.read`: a process's
    `read_stdout`, say), so a stream that never ends fails the test (with what it gave)
    instead of hanging it."""
    out = bytearray()
    reader: Callable[[], bytes] = read or stream.read  # type: ignore[attr-defined]

    def pump() -> None:
        while chunk := reader():
            out.extend(chunk)

    thread = threading.Thread(target=pump)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        stream.close()
        thread.join()
        raise AssertionError(f"the stream did not end; got {bytes(out)!r}")
    return bytes(out)
