"""A clear stays cleared (I6): a clear seen through the watch withdraws every older record's write
on every replica, a refusal after our own clear is written, a sweep never replaces a queued clear,
and the Blocklist tells its sink of records and clears in the order memory took them. Replicas on
one devcluster over HTTP, the API server cut with the TCP relay (tests/placement/blockrelay.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from devcluster import DevCluster
from kube.client import Kube
from placement.blocklist import BlockEntry, Blocklist, entry_id
from placement.blockobject import ENTRIES, encode, entry_path
from placement.blockwriter import BlockWriter
from tests.placement.blockrelay import HeldRelay, Relay, relayed
from tests.placement.blockreplicas import Replica, objects, offering, start_replicas
from tests.support.clock import ManualClock
from tests.support.fixtures import ROOT, kube_for
from tests.support.polling import wait_for

NAME = entry_id("gpu-a", offering())


@pytest.fixture
def replicas(cluster: DevCluster) -> Iterator[Callable[..., Replica]]:
    yield from start_replicas(cluster)


def test_I6_a_clear_elsewhere_drops_the_pending_write_of_an_older_record_on_every_replica(
    replicas: Callable[..., Replica], cluster: DevCluster, kube: Kube, tmp_path: Path
) -> None:
    clock = ManualClock(time.time())
    with relayed(cluster, tmp_path, Relay) as (relay, down):
        a = replicas("clear-a", clock=clock, default_ttl=100.0)
        b = replicas("clear-b", clock=clock, default_ttl=100.0, writer_kube=down, max_backoff=0.3)
        a.blocklist.record("gpu-a", offering())
        wait_for(b.blocked, what="b holds a's refusal")
        clock.advance(50.0)
        b.blocklist.record("gpu-a", offering())  # later than the object: its write waits out the outage
        wait_for(lambda: b.store.writer.failures >= 1, what="b's write fails and waits to be retried")
        assert b.store.writer.holds_record(NAME)
        assert a.blocklist.clear(NAME)  # before the object's expiry: a clear, not a sweep
        wait_for(lambda: not b.blocked(), what="b drops the cleared entry")
        assert not b.store.writer.holds_record(NAME), "the older record's write is withdrawn"
        relay.up()
        other = offering(region="us-west-2")  # a new refusal: queued behind anything b still held
        b.blocklist.record("gpu-a", other)
        wait_for(lambda: [o["metadata"]["name"] for o in objects(kube)] == [entry_id("gpu-a", other)], what="written")
        wait_for(b.store.writer.idle, what="b's writer has nothing left")
        assert [o["metadata"]["name"] for o in objects(kube)] == [entry_id("gpu-a", other)], "the clear stayed"
        assert not a.blocked() and not b.blocked()
        b.blocklist.record("gpu-a", offering())  # recorded after b saw the clear: a new refusal, written
        wait_for(a.blocked, what="a new refusal after the clear reaches every replica")


@contextmanager
def held_write_cleared(
    replicas: Callable[..., Replica], cluster: DevCluster, kube: Kube, tmp_path: Path, prefix: str
) -> Iterator[tuple[HeldRelay, Replica, Replica]]:
    """b's write of a record (newer than a's) held in a relay while a's clear is seen by b: the
    write is under way and withdrawn, not yet landed; the relay not released."""
    clock = ManualClock(time.time())
    with relayed(cluster, tmp_path, HeldRelay, timeout=60.0) as (relay, held):
        relay.up()
        a = replicas(f"{prefix}-a", clock=clock, default_ttl=100.0)
        b = replicas(f"{prefix}-b", clock=clock, default_ttl=100.0, writer_kube=held)
        a.blocklist.record("gpu-a", offering())
        wait_for(b.blocked, what="b holds a's refusal")
        clock.advance(50.0)
        b.blocklist.record("gpu-a", offering())  # its write goes out and is held in the relay
        wait_for(lambda: relay.held >= 1 and b.store.writer.pending() == 0, what="b's write is under way")
        assert a.blocklist.clear(NAME)
        wait_for(lambda: not b.blocked() and not objects(kube), what="b sees the clear while its write is held")
        yield relay, a, b


def test_a_write_under_way_when_a_clear_is_seen_is_deleted_again_once_it_lands(
    replicas: Callable[..., Replica], cluster: DevCluster, kube: Kube, tmp_path: Path
) -> None:
    with held_write_cleared(replicas, cluster, kube, tmp_path, "flight") as (relay, a, b):
        assert not b.store.writer.holds_record(NAME), "the write under way is withdrawn"
        relay.released.set()  # the stale write lands now...
        wait_for(b.store.writer.idle, what="b's write and its undoing are done")
        wait_for(lambda: not objects(kube) and not a.blocked() and not b.blocked(), what="...and is deleted again")


def test_a_write_that_lands_late_and_is_undone_before_its_own_watch_event_blocks_nothing(
    replicas: Callable[..., Replica], cluster: DevCluster, kube: Kube, tmp_path: Path
) -> None:
    """The race of the test above, in its other order: the withdrawn write lands and is deleted
    again before the writer's own watch shows the object it wrote. That ADDED is not a record:
    the replica stays unblocked (its DELETED is our own deletion, which clears nothing)."""
    with held_write_cleared(replicas, cluster, kube, tmp_path, "late") as (relay, a, b):
        events = b.store.reflector._on_change

        def after_the_undoing(name: str, obj: dict[str, object] | None) -> None:
            if obj is not None:  # the landed write's ADDED: let the write and its undoing end first
                wait_for(b.store.writer.idle, what="b's write and its undoing are done")
            events(name, obj)

        b.store.reflector._on_change = after_the_undoing
        relay.released.set()
        wait_for(b.store.writer.idle, what="b's write and its undoing are done")
        wait_for(lambda: not objects(kube), what="deleted again")
        wait_for(lambda: not b.store.writer._undone, what="b's watch showed the deletion")
        assert not a.blocked() and not b.blocked()


def test_a_refusal_recorded_right_after_our_own_clear_is_written(replicas: Callable[..., Replica], kube: Kube) -> None:
    a, b = replicas("own-a"), replicas("own-b")

    def caught_up() -> bool:  # a's watch delivered the last write (so its own DELETED before it)
        found, seen = objects(kube), a.store.reflector.snapshot()
        versions = [o["metadata"]["resourceVersion"] for o in found]
        return a.store.writer.idle() and versions == [o["metadata"]["resourceVersion"] for o in seen]

    for _ in range(5):
        a.blocklist.record("gpu-a", offering())
        wait_for(lambda: b.blocked() and caught_up() and len(objects(kube)) == 1, what="the entry is written")
        assert a.blocklist.clear(NAME)
        a.blocklist.record("gpu-a", offering())  # at once: our own clear's delete is queued or in flight
        wait_for(lambda: caught_up() and len(objects(kube)) == 1, what="the refusal after the clear is written")
        assert a.blocked(), "our own clear's DELETED does not drop what was recorded after it"
        wait_for(b.blocked, what="every replica holds the refusal made after the clear")
        assert a.blocklist.clear(NAME)
        wait_for(lambda: caught_up() and not objects(kube) and not b.blocked(), what="cleared before the next round")


def _written_entry(cluster: DevCluster, kube: Kube) -> tuple[BlockEntry, dict[str, Any]]:
    cluster.load_manifests((ROOT / "deploy/crds/blocklistentry.yaml").read_text())
    blocklist = Blocklist(uniform=lambda: 0.0)
    blocklist.record("gpu-a", offering())
    (entry,) = blocklist.entries()
    return entry, kube.create(ENTRIES, encode(entry, created=time.time()))


def test_a_sweeps_conditional_delete_never_replaces_a_queued_clear(cluster: DevCluster, kube: Kube) -> None:
    entry, created = _written_entry(cluster, kube)
    stale = str(created["metadata"]["resourceVersion"])
    kube.replace(entry_path(NAME), dict(created, spec=dict(created["spec"], reason="again")))
    writer = BlockWriter(kube_for(cluster))  # not started: the queue only fills
    writer.delete(NAME)  # an operator's clear
    writer.delete(NAME, resource_version=stale)  # a sweep read an older version
    assert writer.pending() == 1 and writer.clearing(NAME), "the clear is what stays queued"
    writer.start()
    wait_for(lambda: not objects(kube), what="the clear deletes the object whatever its version")
    assert writer.stop(5.0) == []


def test_a_write_queued_after_our_own_clear_deletes_the_object_then_creates_it(cluster: DevCluster, kube: Kube) -> None:
    entry, created = _written_entry(cluster, kube)
    writer = BlockWriter(kube_for(cluster))  # not started
    writer.seen(NAME, entry.expires_at.timestamp())  # the cluster holds this expiry
    writer.delete(NAME)
    writer.put(entry)  # the same expiry: skipped were the object not going
    assert writer.pending() == 1 and writer.holds_record(NAME) and writer.clearing(NAME)
    writer.start()
    old_uid = created["metadata"]["uid"]

    def recreated() -> bool:
        found = objects(kube)
        return len(found) == 1 and found[0]["metadata"]["uid"] != old_uid

    wait_for(recreated, what="deleted (every replica sees the clear), then written anew")
    assert writer.stop(5.0) == []


def test_a_withdrawn_record_is_not_written_and_a_later_one_is(cluster: DevCluster, kube: Kube) -> None:
    entry, _ = _written_entry(cluster, kube)
    kube.delete(entry_path(NAME))
    writer = BlockWriter(kube_for(cluster))  # not started
    writer.put(entry)
    writer.withdraw(NAME)  # a clear seen elsewhere after this record
    assert writer.pending() == 0
    writer.put(entry)  # recorded after the clear was seen
    assert writer.pending() == 1
    writer.start()
    wait_for(lambda: len(objects(kube)) == 1, what="the later record is written")
    assert writer.stop(5.0) == []


class _Sink:
    def __init__(self) -> None:
        self.last: dict[str, str] = {}

    def recorded(self, entry: BlockEntry) -> None:
        self.last[entry.id] = "recorded"

    def cleared(self, entry_id: str) -> None:
        self.last[entry_id] = "cleared"


def _race_a_record_and_a_clear() -> None:
    blocklist, sink = Blocklist(uniform=lambda: 0.0), _Sink()
    blocklist.attach(sink)
    blocklist.record("gpu-a", offering())
    start = threading.Barrier(2)
    record = threading.Thread(target=lambda: (start.wait(), blocklist.record("gpu-a", offering())))
    clear = threading.Thread(target=lambda: (start.wait(), blocklist.clear(NAME)))
    for thread in (record, clear):
        thread.start()
    for thread in (record, clear):
        thread.join()
    held = blocklist.get(NAME) is not None
    assert sink.last[NAME] == ("recorded" if held else "cleared"), "the cluster's copy ends as memory does"


def test_the_sink_hears_records_and_clears_in_the_order_memory_took_them() -> None:
    for _ in range(300):
        _race_a_record_and_a_clear()
