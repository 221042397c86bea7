"""Shutdown joins share one deadline and name the threads that overstay it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kube.worker import Handoff, OnRetry, Requeue, Retry, WorkerPool, describe, join_within
from kube.workqueue import WorkQueue
from tests.support.clock import ManualClock
from tests.support.polling import wait_for


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


def _pool(outcomes: dict[str, list[object]], **options: object) -> tuple[WorkerPool, WorkQueue, ManualClock, list[str]]:
    """A pool whose sync replays `outcomes[key]` (an exception is raised, anything else returned)."""
    clock = ManualClock()
    queue = WorkQueue(base_delay=1.0, max_delay=8.0, clock=clock)
    seen: list[str] = []

    def sync(key: str) -> Requeue | None:
        seen.append(key)
        outcome = outcomes[key].pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        assert outcome is None or isinstance(outcome, Requeue)
        return outcome

    return WorkerPool(queue, sync, name="test", **options), queue, clock, seen  # type: ignore[arg-type]


def _run_due(pool: WorkerPool, queue: WorkQueue) -> str | None:
    key = queue.get(timeout=0)
    if key is not None:
        pool.process(key)
    return key


def test_a_returned_requeue_looks_again_after_its_delay_without_counting_a_failure() -> None:
    pool, queue, clock, seen = _pool({"a": [Requeue(after=5.0), None]})
    queue.add("a")
    assert _run_due(pool, queue) == "a"
    assert queue.failures("a") == 0
    clock.now = 4.9
    assert _run_due(pool, queue) is None
    clock.now = 5.0
    assert _run_due(pool, queue) == "a"
    assert seen == ["a", "a"]


def test_a_raised_retry_with_a_delay_runs_again_then_and_is_counted() -> None:
    heard: list[tuple[str, str, int]] = []
    pool, queue, clock, _ = _pool(
        {"a": [Retry("not yet", delay=3.0), None]}, on_retry=lambda k, e, n: heard.append((k, str(e), n))
    )
    queue.add("a")
    _run_due(pool, queue)
    assert heard == [("a", "not yet", 1)]
    clock.now = 2.9
    assert _run_due(pool, queue) is None
    clock.now = 3.0
    assert _run_due(pool, queue) == "a"
    assert queue.failures("a") == 0  # a success forgets the failures


def test_a_retry_without_a_delay_and_an_unexpected_error_back_off_exponentially() -> None:
    pool, queue, clock, seen = _pool({"a": [Retry("down"), RuntimeError("bug"), None]})
    queue.add("a")
    _run_due(pool, queue)
    clock.now = 1.0  # base delay after the first failure
    assert _run_due(pool, queue) == "a"
    assert queue.failures("a") == 2
    clock.now = 2.9  # the second failure doubled it
    assert _run_due(pool, queue) is None
    clock.now = 3.0
    assert _run_due(pool, queue) == "a"
    assert seen == ["a", "a", "a"]


def test_stop_closes_the_queue_and_names_the_workers_still_busy() -> None:
    release = threading.Event()
    entered: list[str] = []

    def sync(key: str) -> Requeue | None:
        entered.append(threading.current_thread().name)
        release.wait(30)
        return None

    pool = WorkerPool(WorkQueue(), sync, name="slow", workers=2)
    pool.start()
    try:
        pool.queue.add("k")
        wait_for(lambda: entered, what="a worker inside its sync")
        busy = pool.stop(2.0)  # the idle worker ends at once; the busy one overstays
        assert [t.name for t in busy] == entered
    finally:
        release.set()
    assert join_within(pool.threads, 10) == []


class _Operations:
    """Handed-off work, held until the test runs it (the pool's threads, by hand)."""

    def __init__(self) -> None:
        self.pending: list[Callable[[], None]] = []
        self.refuse = False

    def submit(self, work: Callable[[], None]) -> bool:
        if self.refuse:
            return False
        self.pending.append(work)
        return True

    def run_next(self) -> None:
        self.pending.pop(0)()


def _handoff_pool(
    steps: list[object], operations: _Operations, on_retry: OnRetry | None = None
) -> tuple[WorkerPool, WorkQueue, ManualClock, list[str]]:
    """A pool whose sync for key "a" hands off each of `steps` in turn (raised if an
    exception, else returned by the handed-off work); `seen` records syncs and work."""
    clock = ManualClock()
    queue = WorkQueue(base_delay=1.0, max_delay=8.0, clock=clock)
    seen: list[str] = []

    def work() -> Requeue | None:
        seen.append("work")
        outcome = steps.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        assert outcome is None or isinstance(outcome, Requeue)
        return outcome

    def sync(key: str) -> Handoff:
        seen.append(f"sync {key}")
        return Handoff(work)

    return WorkerPool(queue, sync, name="test", operations=operations, on_retry=on_retry), queue, clock, seen


def test_a_handed_off_key_stays_in_progress_until_its_work_ends() -> None:
    operations = _Operations()
    pool, queue, _, seen = _handoff_pool([None, None], operations)
    queue.add("a")
    assert _run_due(pool, queue) == "a"
    assert seen == ["sync a"] and len(operations.pending) == 1
    queue.add("a")  # a change while the work runs: never a second sync at once
    assert _run_due(pool, queue) is None
    operations.run_next()
    assert seen == ["sync a", "work"]
    assert _run_due(pool, queue) == "a"  # the change is looked at once the work is done
    operations.run_next()
    assert seen == ["sync a", "work", "sync a", "work"]
    assert _run_due(pool, queue) is None


def test_a_retry_raised_by_handed_off_work_backs_off_like_a_syncs() -> None:
    operations = _Operations()
    heard: list[int] = []
    pool, queue, clock, seen = _handoff_pool(
        [Retry("cloud busy"), RuntimeError("bug"), None], operations, lambda _k, _e, failures: heard.append(failures)
    )
    queue.add("a")
    _run_due(pool, queue)
    operations.run_next()
    assert heard == [1] and queue.failures("a") == 1
    clock.now = 0.9
    assert _run_due(pool, queue) is None
    clock.now = 1.0
    assert _run_due(pool, queue) == "a"
    operations.run_next()
    assert queue.failures("a") == 2
    clock.now = 3.0
    assert _run_due(pool, queue) == "a"
    operations.run_next()
    assert queue.failures("a") == 0
    assert seen.count("work") == 3


def test_a_requeue_returned_by_handed_off_work_looks_again_later() -> None:
    operations = _Operations()
    pool, queue, clock, _ = _handoff_pool([Requeue(after=5.0), None], operations)
    queue.add("a")
    _run_due(pool, queue)
    operations.run_next()
    clock.now = 4.9
    assert _run_due(pool, queue) is None
    clock.now = 5.0
    assert _run_due(pool, queue) == "a"


def test_a_handoff_refused_at_shutdown_releases_the_key() -> None:
    operations = _Operations()
    operations.refuse = True
    pool, queue, _, seen = _handoff_pool([None], operations)
    queue.add("a")
    assert _run_due(pool, queue) == "a"
    assert seen == ["sync a"] and queue.failures("a") == 0
    queue.add("a")
    assert _run_due(pool, queue) == "a"  # not stuck in progress


def test_without_operations_handed_off_work_runs_on_the_worker() -> None:
    clock = ManualClock()
    queue = WorkQueue(clock=clock)
    seen: list[str] = []
    pool = WorkerPool(queue, lambda key: Handoff(lambda: seen.append(key) or None), name="test")
    queue.add("a")
    _run_due(pool, queue)
    assert seen == ["a"]
