"""Shutdown joins share one deadline and name the threads that overstay it."""

from __future__ import annotations

import threading
import time

from vnode.threads import describe, join_within


def _stuck_in_a_call(release: threading.Event) -> None:
    release.wait(30)


def test_join_within_bounds_the_whole_join_not_each_thread() -> None:
    release = threading.Event()
    stuck = [threading.Thread(target=_stuck_in_a_call, args=(release,), name=f"w{i}", daemon=True) for i in range(5)]
    quick = threading.Thread(target=lambda: None, name="quick")
    for thread in [*stuck, quick]:
        thread.start()
    try:
        started = time.monotonic()
        busy = join_within([*stuck, quick], 0.5)
        elapsed = time.monotonic() - started
        assert busy == stuck
        assert elapsed < 2.5  # five threads, one shared half-second, not five
        parts = describe(busy).split(", ")
        assert [part.split(" (")[0] for part in parts] == ["w0", "w1", "w2", "w3", "w4"]
        assert all("threading.py:" in part and " in wait)" in part for part in parts)  # Event.wait
    finally:
        release.set()
    assert join_within(stuck, 5) == []


def test_join_within_skips_threads_never_started() -> None:
    assert join_within([threading.Thread(target=lambda: None)], 1) == []
