"""SIGINT and SIGTERM as an orderly stop for the management commands.

Used by `runvnode`, `devcluster` and `fakecloud`, from the main thread. Two traps, both seen
as a manager that ignored SIGTERM until it was killed:
- Setting the stop Event from the Python handler can deadlock: the handler runs in the main
  thread between two bytecodes, possibly inside that very Event's `wait()` while it holds the
  Event's lock.
- The Python handler may not run at all while the main thread sleeps: the kernel delivers a
  process-directed signal to any thread, and one that lands on a worker thread leaves a main
  thread blocked in `stop.wait()` asleep; the handler would run only when it next wakes.
So nothing here depends on the Python handler (a no-op): the C-level handler writes the
signal's number to a wakeup pipe (`signal.set_wakeup_fd`) in whichever thread the signal
lands, and a relay thread reading that pipe sets the Event.
Tests: tests/nebula_site/test_signals.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_DONE = 0xFF  # no signal has this number: the relay's own "stop reading"


def _noted(signum: int, frame: FrameType | None) -> None:
    """The Python-level handler: nothing to do, the wakeup pipe carried the signal already."""


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM set `stop`; the previous handlers and wakeup fd
    come back after. Must be entered from the main thread."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    wanted = {int(sig) for sig in STOP_SIGNALS}

    def relay() -> None:
        while True:
            data = os.read(read_end, 64)
            if wanted.intersection(data):
                stop.set()
            if not data or _DONE in data:
                return

    thread = threading.Thread(target=relay, name="signal relay", daemon=True)
    thread.start()
    previous_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    previous = {sig: signal.signal(sig, _noted) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(previous_fd)
        os.set_blocking(write_end, True)
        os.write(write_end, bytes([_DONE]))
        thread.join()
        os.close(write_end)
        os.close(read_end)
