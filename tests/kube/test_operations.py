"""The operation pool: bounded concurrency, start order, a token-bucket rate, and a stop that
drops what has not started."""

from __future__ import annotations

import threading

import pytest

from kube.operations import OperationLimits, OperationPool, TokenBucket
from kube.worker import join_within
from tests.support.clock import ManualClock
from tests.support.polling import wait_for


def test_at_most_concurrency_operations_run_at_once_and_the_rest_wait_in_order() -> None:
    release = threading.Event()
    lock = threading.Lock()
    started: list[int] = []
    peak = [0, 0]  # running now, most at once

    def operation(n: int) -> None:
        with lock:
            started.append(n)
            peak[0] += 1
            peak[1] = max(peak[1], peak[0])
        release.wait(30)
        with lock:
            peak[0] -= 1

    pool = OperationPool(OperationLimits(concurrency=3, rate=1000.0, burst=1000), name="test")
    try:
        for n in range(10):
            assert pool.submit(lambda n=n: operation(n))
        wait_for(lambda: pool.running == 3, what="three operations running")
        assert sorted(started) == [0, 1, 2]
        assert pool.waiting == 7
        assert len(pool.threads) == 3  # never more threads than the concurrency
        release.set()
        wait_for(lambda: len(started) == 10 and pool.running == 0, what="every operation run")
        assert sorted(started) == list(range(10))
        assert peak[1] == 3
    finally:
        release.set()
        assert pool.stop(10) == []


def test_operations_start_in_the_order_submitted() -> None:
    order: list[int] = []
    gate = threading.Event()

    def first() -> None:
        gate.wait(30)
        order.append(0)

    pool = OperationPool(OperationLimits(concurrency=1, rate=1000.0, burst=1000), name="test")
    try:
        pool.submit(first)
        for n in range(1, 6):
            pool.submit(lambda n=n: order.append(n))
        gate.set()
        wait_for(lambda: len(order) == 6, what="six operations run")
        assert order == [0, 1, 2, 3, 4, 5]
    finally:
        gate.set()
        assert pool.stop(10) == []


def test_a_burst_starts_at_once_then_the_rate_spaces_the_rest() -> None:
    clock = ManualClock()
    bucket = TokenBucket(rate=2.0, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.5)  # owed in order: half a second, then one
    assert bucket.reserve() == pytest.approx(1.0)
    clock.advance(10.0)  # a quiet spell refills the bucket, but never past the burst
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.5)


def test_the_pool_waits_for_a_token_before_each_operation() -> None:
    clock = ManualClock()
    waits: list[float] = []

    def wait(stop: threading.Event, seconds: float) -> bool:
        waits.append(seconds)
        clock.advance(seconds)
        return stop.is_set()

    done: list[int] = []
    pool = OperationPool(OperationLimits(concurrency=1, rate=4.0, burst=2), name="test", clock=clock, wait=wait)
    try:
        for n in range(5):
            pool.submit(lambda n=n: done.append(n))
        wait_for(lambda: len(done) == 5, what="five operations run")
        assert done == [0, 1, 2, 3, 4]
        assert waits == [pytest.approx(0.25)] * 3  # two from the burst, then one every 1/rate
    finally:
        assert pool.stop(10) == []


def test_stop_drops_operations_not_started_and_lets_the_running_one_finish() -> None:
    release = threading.Event()
    ran: list[int] = []

    def slow() -> None:
        release.wait(30)
        ran.append(0)

    pool = OperationPool(OperationLimits(concurrency=1, rate=1000.0, burst=1000), name="test")
    pool.submit(slow)
    for n in range(1, 4):
        pool.submit(lambda n=n: ran.append(n))
    wait_for(lambda: pool.running == 1, what="the slow operation running")
    busy = pool.stop(0.2)
    assert [thread.name for thread in busy] == ["test operation 0"]
    assert pool.waiting == 0
    assert not pool.submit(lambda: ran.append(99))  # refused once stopping
    release.set()
    assert join_within(pool.threads, 10) == []
    assert ran == [0]


def test_an_operation_that_raises_is_logged_and_the_pool_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    ran: list[str] = []

    def broken() -> None:
        raise RuntimeError("cloud said no")

    pool = OperationPool(OperationLimits(concurrency=1), name="test")
    try:
        pool.submit(broken)
        pool.submit(lambda: ran.append("next"))
        wait_for(lambda: ran == ["next"], what="the next operation run")
        assert "test: an operation failed" in caplog.text
    finally:
        assert pool.stop(10) == []


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"concurrency": 0}, "concurrency=0 must be a whole number of at least 1"),
        ({"concurrency": 2.5}, "concurrency=2.5 must be a whole number"),
        ({"concurrency": True}, "concurrency=True must be a whole number"),
        ({"rate": 0}, "rate=0 must be a number above 0"),
        ({"rate": "fast"}, "rate='fast' must be a number above 0"),
        ({"burst": -1}, "burst=-1 must be a whole number of at least 1"),
        ({"parallel": 4}, "unknown key 'parallel' (known: concurrency, rate, burst)"),
    ],
)
def test_bad_limits_are_refused_with_the_key_named(values: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        OperationLimits.from_mapping(values)


def test_limits_from_a_mapping_override_only_the_keys_given() -> None:
    base = OperationLimits(concurrency=10, rate=5.0, burst=20)
    assert OperationLimits.from_mapping({"rate": 1.5}, base) == OperationLimits(concurrency=10, rate=1.5, burst=20)
    assert OperationLimits.from_mapping({}) == OperationLimits()
