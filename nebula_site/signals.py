"""SIGINT and SIGTERM as an orderly stop for the management commands.

Used by `runvnode`, `devcluster` and `fakecloud`. The handler never touches the stop Event:
Python runs a handler in the main thread between two bytecodes, which may be inside that
very Event's `wait()` while it holds the Event's lock, and `Event.set()` there deadlocks the
main thread for good (seen: a manager that ignored SIGTERM until it was killed). The handler
only writes a byte to a pipe; a relay thread reads it and sets the Event.
Tests: tests/nebula_site/test_signals.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

_SIGNALLED, _DONE = b"s", b"d"


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM set `stop`; the previous handlers come back after."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        try:
            os.write(write_end, _SIGNALLED)
        except BlockingIOError:
            pass  # the pipe is full of earlier signals: the relay will set `stop` anyway

    def relay() -> None:
        while True:
            data = os.read(read_end, 64)
            if _SIGNALLED in data:
                stop.set()
            if not data or _DONE in data:
                return

    thread = threading.Thread(target=relay, name="signal relay", daemon=True)
    thread.start()
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.set_blocking(write_end, True)
        os.write(write_end, _DONE)
        thread.join()
        os.close(write_end)
        os.close(read_end)
