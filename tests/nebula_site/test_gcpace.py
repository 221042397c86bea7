"""nebula_site.gcpace: the collector's pace is set for the block only, with the objects alive at
its start frozen, and put back after it (a command run in-process by a test leaves the test
process as it found it), even when the block raises."""

from __future__ import annotations

import gc

import pytest

from nebula_site import gcpace


def test_the_pace_holds_inside_the_block_and_is_put_back_after_even_on_error() -> None:
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    with pytest.raises(RuntimeError, match="boom"), gcpace.paced_for_a_large_heap():
        assert gc.get_threshold() == gcpace.THRESHOLDS
        assert gc.get_freeze_count() > frozen
        assert gc.isenabled()  # slower, never off: cycles are still collected
        raise RuntimeError("boom")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_overlapping_blocks_keep_the_pace_until_the_last_ends() -> None:
    before = gc.get_threshold()
    outer = gcpace.paced_for_a_large_heap()
    inner = gcpace.paced_for_a_large_heap()
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)  # ended first: the other block is still open
    assert gc.get_threshold() == gcpace.THRESHOLDS
    inner.__exit__(None, None, None)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
