"""WorkQueue: backoff, no concurrent processing of a key, redirty, earlier-only moves."""

from __future__ import annotations

import threading

from kube.workqueue import WorkQueue
from tests.support.clock import ManualClock


def test_a_key_is_handed_out_once_until_done() -> None:
    queue = WorkQueue(clock=ManualClock(1000.0))
    queue.add("a")
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    assert queue.get(timeout=0) is None


def test_enqueue_while_processing_runs_the_key_exactly_once_more() -> None:
    queue = WorkQueue(clock=ManualClock(1000.0))
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.add("a")
    queue.add("a")
    assert queue.get(timeout=0) is None, "never handed to a second worker while processing"
    queue.done("a")
    assert queue.get(timeout=0) == "a"
    queue.done("a")
    assert queue.get(timeout=0) is None


def test_failures_back_off_exponentially_up_to_the_cap_and_never_drop_the_key() -> None:
    clock = ManualClock(1000.0)
    queue = WorkQueue(base_delay=1.0, max_delay=8.0, clock=clock)
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    delays = []
    for _ in range(25):
        start = clock.now
        queue.done("a", failed=True)
        while queue.get(timeout=0) is None:
            clock.now += 0.5
        delays.append(clock.now - start)
    assert delays[:5] == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert max(delays) == 8.0
    assert queue.failures("a") == 25, "still retrying after more than 20 failures"


def test_an_event_pulls_a_backing_off_key_forward() -> None:
    clock = ManualClock(1000.0)
    queue = WorkQueue(base_delay=60.0, clock=clock)
    queue.add("a")
    queue.get(timeout=0)
    queue.done("a", failed=True)
    assert queue.get(timeout=0) is None
    queue.add("a")
    assert queue.get(timeout=0) == "a"


def test_a_later_enqueue_never_delays_a_waiting_key() -> None:
    clock = ManualClock(1000.0)
    queue = WorkQueue(clock=clock)
    queue.add("a", delay=1.0)
    queue.add("a", delay=100.0)
    clock.now += 1.0
    assert queue.get(timeout=0) == "a"


def test_success_resets_the_backoff() -> None:
    clock = ManualClock(1000.0)
    queue = WorkQueue(base_delay=1.0, clock=clock)
    queue.add("a")
    queue.get(timeout=0)
    assert queue.done("a", failed=True) == 1
    clock.now += 1.0
    queue.get(timeout=0)
    assert queue.done("a") == 0
    assert queue.failures("a") == 0


def test_close_wakes_a_blocked_worker() -> None:
    queue = WorkQueue()
    got: list[str | None] = []
    worker = threading.Thread(target=lambda: got.append(queue.get()))
    worker.start()
    queue.close()
    worker.join(5)
    assert got == [None]
