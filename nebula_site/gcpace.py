"""The cyclic garbage collector's pace for the long-running commands (`runvnode`, `devcluster`).

A manager holds every Pod of its nodes (dicts, acyclic, freed by refcounting); at CPython's
default pace (a young pass every 700 allocations, the whole heap every 100 of those) it spent
about 15% of its CPU at 10,000 Pods walking them (`bench/sync.py`). `paced_for_a_large_heap`
sets a slower pace for its block and puts it back after (commands also run in-process in tests).
Tests: tests/nebula_site/test_gcpace.py.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

THRESHOLDS = (20_000, 10, 100)  # gc.set_threshold: young passes 28x less often; no generation skipped


_depth = 0  # blocks open now: the outermost sets the pace and puts it back
_depth_lock = threading.Lock()
_saved: list[int] = []  # the pace before the outermost block


@contextmanager
def paced_for_a_large_heap() -> Iterator[None]:
    """The collector at `THRESHOLDS`, and what is alive now (modules, settings, the app
    registry) frozen out of its passes; the previous pace and an unfrozen heap once the last
    open block ends (blocks may overlap, in threads of their own)."""
    global _depth
    with _depth_lock:
        _depth += 1
        if _depth == 1:
            before = gc.get_threshold()
            gc.freeze()
            gc.set_threshold(*THRESHOLDS)
            _saved[:] = before
    try:
        yield
    finally:
        with _depth_lock:
            _depth -= 1
            if _depth == 0:
                gc.set_threshold(*_saved)
                gc.unfreeze()
