"""Freed heap goes back to the system once an ephemeral container's process ends: glibc keeps
what threads freed in their arenas (the 64 KiB reads of 30 debug containers' pumps left about
20 MiB behind after they ended); `malloc_trim(0)` returns the free pages of every arena.

Called by `vnode.ephemeral.streams.Fanout` when its process ends and when its Pod goes (a few
milliseconds each, on the pump's or the caller's thread), never while holding a lock. A no-op
without glibc's `malloc_trim`. Tests: tests/vnode/test_ephemeral_budget.py.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_TRIM = _malloc_trim()


def give_back_freed() -> bool:
    """Return the heap's free pages to the system; False where there is no `malloc_trim`."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True
