"""providers.fake.serial: the fake cloud's routed calls run on its call thread and answer their
callers exactly as a call in the caller's thread did (results, errors, call counts), a slow
fault is slept in the caller's thread, a call made by a call runs in place, and the thread ends
when idle without ever stranding a call queued as it ends."""

from __future__ import annotations

import random
import threading
import time

import pytest

from providers import errors
from providers.base import ClaimName, ProvisionRequest
from providers.fake import serial
from providers.fake.cloud import FakeCloud
from providers.fake.scenario import load_scenario
from providers.fake.serial import CallThread
from tests.support.factories import make_pod_spec
from tests.support.polling import wait_for

OWNER = "c1.fake"
SCENARIO = {"offerings": [{"accelerator": None, "tier": "OnDemand", "region": "us-east-1", "hourly_price": 0.1}]}


def make_cloud(**kwargs: object) -> FakeCloud:
    return FakeCloud(load_scenario(SCENARIO), **kwargs)  # type: ignore[arg-type]


def request(claim: str) -> ProvisionRequest:
    return ProvisionRequest(claim=ClaimName(claim))


def test_routed_calls_answer_their_callers_from_many_threads_and_are_all_counted() -> None:
    cloud = make_cloud()
    ids = [cloud.provision(make_pod_spec(), request(f"c{i}"), owner=OWNER).instance_id for i in range(40)]
    seen: dict[str, str] = {}
    failures: list[BaseException] = []

    def work(instance_id: str) -> None:
        try:
            for _ in range(10):
                found = cloud.get(instance_id, owner=OWNER)
                assert found is not None and found.id == instance_id
            cloud.terminate(instance_id, owner=OWNER)
            after = cloud.get(instance_id, owner=OWNER)
            seen[instance_id] = "gone" if after is None else after.state.value
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures
    assert set(seen) == set(ids) and set(seen.values()) <= {"terminated", "terminating", "gone"}
    counts = cloud.call_counts()
    assert (counts["provision"], counts["get"], counts["terminate"]) == (40, 40 * 11, 40)


def test_a_routed_call_raises_in_its_caller_what_it_raised() -> None:
    cloud = make_cloud()
    with pytest.raises(errors.NotFound, match="no instance fake-404"):
        cloud.stop_container("fake-404", "main", owner=OWNER)
    with pytest.raises(errors.InvalidRequest, match="no claim"):
        cloud.provision(make_pod_spec(), request(""), owner=OWNER)


def test_a_slow_fault_is_slept_in_the_callers_thread_not_the_call_thread() -> None:
    sleepers: list[str] = []
    cloud = make_cloud(sleep=lambda seconds: sleepers.append(threading.current_thread().name))
    instance = cloud.provision(make_pod_spec(), request("c"), owner=OWNER).instance_id
    cloud.slow(2.5)
    caller = threading.current_thread().name
    cloud.get(instance, owner=OWNER)
    cloud.terminate(instance, owner=OWNER)
    cloud.list(owner=OWNER)  # not routed: slept in its caller's thread as before
    assert sleepers == [caller, caller, caller]


def test_a_call_runs_in_its_callers_thread_when_the_lock_is_free_else_on_the_call_thread() -> None:
    lock = threading.RLock()
    calls = CallThread(lock)
    where: list[str] = []
    calls.run(lambda: where.append(threading.current_thread().name))
    assert where == [threading.current_thread().name]  # free: in place, no thread woken
    assert not calls._alive
    held, release = threading.Event(), threading.Event()

    def hold() -> None:  # what a `list` of 10,000 instances does for a while
        with lock:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)

    def release_once_queued() -> None:
        wait_for(lambda: not calls._queue.empty() or calls._alive, timeout=30, what="the call queued")
        release.set()

    threading.Thread(target=release_once_queued).start()
    calls.run(lambda: where.append(threading.current_thread().name))
    holder.join(30)
    assert where[1] == "fake-cloud-calls"  # held: queued to the call thread, which waited for the lock


def test_a_call_made_by_a_call_runs_in_place() -> None:
    calls = CallThread(threading.RLock())
    threads: list[str] = []

    def inner() -> int:
        threads.append(threading.current_thread().name)
        return 7

    assert calls.run(lambda: calls.run(inner) * 6) == 42
    assert threads == [threading.current_thread().name]
    assert calls.run(lambda: calls.serving()) and not calls.serving()


def test_more_calls_than_a_batch_queued_at_once_all_run() -> None:
    lock = threading.RLock()
    calls = CallThread(lock)
    lock.acquire()  # held: every call below queues to the call thread
    results: list[int] = []
    threads = [
        threading.Thread(target=lambda n=n: results.append(calls.run(lambda: n))) for n in range(3 * serial.BATCH)
    ]
    for thread in threads:
        thread.start()
    wait_for(lambda: calls._alive, timeout=10)
    lock.release()
    for thread in threads:
        thread.join(60)
    assert sorted(results) == list(range(3 * serial.BATCH))


def test_the_call_thread_ends_when_idle_and_never_strands_a_call_queued_as_it_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(serial, "IDLE", 0.001)
    lock = threading.RLock()
    calls = CallThread(lock)
    stop = threading.Event()

    def busy() -> None:  # holds the lock now and then, so calls queue around the thread's idle end
        while not stop.is_set():
            with lock:
                time.sleep(0.0005)
            time.sleep(0.0005)

    threading.Thread(target=busy, daemon=True).start()
    done: list[int] = []

    def caller(n: int) -> None:
        rng = random.Random(n)
        for i in range(150):
            time.sleep(rng.random() * 0.002)
            done.append(calls.run(lambda i=i: i))

    threads = [threading.Thread(target=caller, args=(n,), daemon=True) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    stop.set()
    assert not any(thread.is_alive() for thread in threads), "a call was stranded in the queue"
    assert len(done) == 450
