"""Joining worker threads within one shared deadline, and naming the ones that overstay.

Shutdown waits for in-flight work, but never longer than the manager's grace: a thread
still inside a provider or API call by then is abandoned (every thread here is a daemon,
and an interrupted provider call is safe to redo: claims make provisioning idempotent).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable


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
