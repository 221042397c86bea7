"""The process-wide registry of running machinery the console reads: Handlers, the Blocklist,
placement (pool cache included).

`manage.py runvnode` fills it (`install`) once its Runners and placement run, and empties it
(`clear`) on the way out; the REST API reads it (`current`). Read-only views of memory: nothing
here starts, stops or changes operational state.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from placement.blocklist import Blocklist
from placement.wiring import Placement
from vnode.handler import Handler


@dataclass(frozen=True)
class Runtime:
    handlers: tuple[Handler, ...] = ()
    blocklist: Blocklist | None = None
    placement: Placement | None = None


_lock = threading.Lock()
_current = Runtime()


def install(
    *, handlers: Sequence[Handler] = (), blocklist: Blocklist | None = None, placement: Placement | None = None
) -> None:
    """Publish what this process runs (the blocklist defaults to placement's)."""
    global _current
    if blocklist is None and placement is not None:
        blocklist = placement.blocklist
    with _lock:
        _current = Runtime(tuple(handlers), blocklist, placement)


def current() -> Runtime:
    with _lock:
        return _current


def clear() -> None:
    global _current
    with _lock:
        _current = Runtime()
