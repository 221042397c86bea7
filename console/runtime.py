"""The process-wide registry of running machinery the console reads: Handlers, the Blocklist,
placement (pool cache included).

The process wiring (`nebula_site.process`) fills it (`install`) once Runners and placement
run, and empties it (`clear`) on the way out; the REST API and the admin read it (`current`).
Read-only views of memory, but for the one operator action both offer,
`Runtime.clear_block`: nothing here starts or stops anything.
Tests: tests/console/test_console_units.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from placement.blocklist import Blocklist
from placement.wiring import Placement
from vnode.handler import Handler

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Runtime:
    handlers: tuple[Handler, ...] = ()
    blocklist: Blocklist | None = None
    placement: Placement | None = None

    def clear_block(self, entry_id: str, *, actor: str) -> bool:
        """Clear one blocklist entry in memory; False if there is none. Placement, when it
        runs, logs it and records the Event."""
        if self.placement is not None:
            return self.placement.clear_block(entry_id, actor=actor)
        if self.blocklist is None or not self.blocklist.clear(entry_id):
            return False
        logger.info("blocklist entry %s cleared by %s", entry_id, actor)
        return True


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
