"""The blocklist in the cluster (I6): replicas, each a Blocklist with its Blockstore, on one
embedded API server over HTTP. A record on any replica reaches every other through a
BlocklistEntry; a fresh replica rebuilds memory from the list; a clear or a delete clears all;
the leader sweeps expired objects; writes wait out an unreachable API server; bounds hold.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devcluster import DevCluster
from kube.client import Kube
from placement import blocklist as blocklist_module
from placement import blockstore as blockstore_module
from placement.blocklist import Blocklist, entry_id
from placement.blockobject import ENTRIES, encode, entry_path, expires_of
from placement.blockstore import SWEEP_GRACE
from placement.blockwriter import BlockWriter
from tests.placement.blockrelay import Relay, relayed
from tests.placement.blockreplicas import Replica, objects, offering, start_replicas
from tests.support.clients.kubectl import KUBECTL_137, run_kubectl
from tests.support.clock import ManualClock
from tests.support.fixtures import ROOT, kube_for
from tests.support.polling import wait_for


@pytest.fixture
def replicas(cluster: DevCluster) -> Iterator[Callable[..., Replica]]:
    yield from start_replicas(cluster)


def test_I6_a_refusal_seen_by_any_replica_is_honoured_by_the_leader(replicas: Callable[..., Replica]) -> None:
    follower, leader = replicas("follower"), replicas("leader")
    follower.blocklist.record("gpu-a", offering())
    assert follower.blocked()  # at once on the replica that saw it, before any write
    wait_for(leader.blocked, what="the leader's blocklist holds the follower's refusal")
    (mine,), (theirs,) = follower.blocklist.entries(), leader.blocklist.entries()
    assert theirs.id == mine.id == entry_id("gpu-a", offering())
    assert theirs.expires_at == mine.expires_at and theirs.reason == "NoCapacity: full"
    (obj,) = objects(leader.kube)
    assert obj["metadata"]["name"] == mine.id and obj["spec"]["scope"] == "gpu-a h100 Spot us-east-1"


def test_a_fresh_replica_after_failover_sees_the_entry_until_its_ttl(replicas: Callable[..., Replica]) -> None:
    clock = ManualClock(time.time())
    first = replicas("first", clock=clock, default_ttl=120.0)
    first.blocklist.record("gpu-a", offering())
    wait_for(lambda: objects(first.kube), what="the entry is written")
    first.store.stop(5.0)

    fresh = replicas("fresh", clock=clock)  # a new process: empty memory, the same cluster
    assert fresh.blocked(), "the initial list rebuilt memory"
    clock.advance(119.0)
    assert fresh.blocked()
    clock.advance(2.0)
    assert not fresh.blocked(), "lapsed at its TTL"


def test_a_clear_on_one_replica_clears_it_on_every_replica(replicas: Callable[..., Replica]) -> None:
    a, b = replicas("a"), replicas("b")
    a.blocklist.record("gpu-a", offering())
    wait_for(b.blocked, what="b holds a's refusal")
    assert b.blocklist.clear(entry_id("gpu-a", offering()))
    assert not b.blocked()
    wait_for(lambda: not a.blocked(), what="a's entry is cleared through the watch")
    wait_for(lambda: not objects(a.kube), what="the object is deleted")
    assert a.told, "a's placement is told an entry disappeared"


def test_deleting_the_object_clears_every_replica_and_tells_placement(
    replicas: Callable[..., Replica], kube: Kube
) -> None:
    a, b = replicas("a"), replicas("b")
    a.blocklist.record("gpu-a", offering())
    wait_for(b.blocked, what="b holds a's refusal")
    kube.delete(entry_path(entry_id("gpu-a", offering())))  # what `kubectl delete nbl <id>` does
    wait_for(lambda: not a.blocked() and not b.blocked(), what="both replicas drop it")
    assert a.told and b.told
    wait_for(lambda: a.store.writer.idle() and b.store.writer.idle(), what="no write left on either replica")
    assert objects(kube) == [], "no replica wrote it again"


def test_the_same_scope_from_two_replicas_coalesces_into_one_object_with_the_later_expiry(
    replicas: Callable[..., Replica],
) -> None:
    short, long = replicas("short", default_ttl=100.0), replicas("long", default_ttl=1000.0)
    short.blocklist.record("gpu-a", offering())
    long.blocklist.record("gpu-a", offering())
    (later,) = long.blocklist.entries()

    def settled() -> bool:
        found = objects(short.kube)
        return len(found) == 1 and expires_of(found[0]) == pytest.approx(later.expires_at.timestamp(), abs=1e-3)

    wait_for(settled, what="one object, with the later expiry")
    wait_for(lambda: short.blocklist.entries()[0].expires_at == later.expires_at, what="short learns the later expiry")
    short.blocklist.record("gpu-a", offering())  # a shorter TTL again: never shortens
    wait_for(short.store.writer.idle, what="short's writer is done")
    assert settled()


def test_the_leader_sweeps_an_expired_object_and_a_follower_does_not(
    replicas: Callable[..., Replica], cluster: DevCluster
) -> None:
    clock = ManualClock(time.time())
    follower = replicas("sweep-follower", clock=clock, default_ttl=10.0, sweep_interval=0.2, sweep_grace=1.0)
    leader = replicas("sweep-leader", clock=clock, sweep_interval=0.2, sweep_grace=1.0)
    follower.blocklist.record("gpu-a", offering())
    wait_for(leader.blocked, what="the leader holds it")
    clock.advance(12.0)
    assert not follower.blocked() and not leader.blocked()
    assert len(objects(leader.kube)) == 1, "memory ignores an expired entry; the object waits for the sweep"
    leader.store.lead(True)
    wait_for(lambda: not objects(leader.kube), what="the expired object is swept")
    deletes = {r.user_agent for r in cluster.request_log.snapshot() if r.verb == "delete"}
    assert deletes == {"sweep-leader/1"}


def test_with_the_api_server_down_memory_holds_and_the_write_lands_later(
    replicas: Callable[..., Replica], cluster: DevCluster, tmp_path: Path
) -> None:
    with relayed(cluster, tmp_path, Relay) as (relay, down):
        cut = replicas("cut", writer_kube=down, max_backoff=0.3)
        other = replicas("other")
        cut.blocklist.record("gpu-a", offering())
        assert cut.blocked()
        wait_for(lambda: cut.store.writer.failures >= 2, what="writes fail and are retried")
        assert cut.blocked() and objects(other.kube) == [] and not other.blocked()
        relay.up()
        wait_for(other.blocked, what="the write lands once the API server answers")
        assert len(objects(other.kube)) == 1 and cut.store.writer.pending() == 0


def test_a_sweep_does_not_drop_a_later_record_not_yet_written(
    replicas: Callable[..., Replica], cluster: DevCluster, kube: Kube, tmp_path: Path
) -> None:
    clock = ManualClock(time.time())
    name = entry_id("gpu-a", offering())
    with relayed(cluster, tmp_path, Relay) as (relay, down):
        writer = replicas("writer", clock=clock, default_ttl=100.0)
        cut = replicas("late", clock=clock, default_ttl=300.0, writer_kube=down, max_backoff=0.3)
        writer.blocklist.record("gpu-a", offering())
        wait_for(cut.blocked, what="the late replica holds the entry")
        clock.advance(50.0)
        cut.blocklist.record("gpu-a", offering())  # expires later (t+350): its write cannot land yet
        assert cut.store.writer.holds_record(name)
        clock.advance(60.0)  # the object (t+100) expired, past the sweep's grace
        assert writer.store.sweep() == 1
        wait_for(lambda: not objects(kube), what="the expired object is swept")
        wait_for(lambda: not cut.store.reflector.snapshot(), what="the late replica saw the deletion")
        assert cut.blocked(), "the later record survives the sweep"
        relay.up()
        wait_for(writer.blocked, what="the later record is written again and reaches every replica")


def test_the_writers_queue_is_bounded_and_memory_keeps_what_it_drops(cluster: DevCluster, kube: Kube) -> None:
    cluster.load_manifests((ROOT / "deploy/crds/blocklistentry.yaml").read_text())
    blocklist = Blocklist(uniform=lambda: 0.0)
    writer = BlockWriter(kube_for(cluster), max_pending=3)  # not started: the queue only fills
    scopes = [offering(region=f"r{i}") for i in range(5)]
    for scope in scopes:
        blocklist.record("gpu-a", scope)
        writer.put(next(e for e in blocklist.entries() if e.id == entry_id("gpu-a", scope)))
    assert (writer.pending(), writer.dropped) == (3, 2)
    assert len(blocklist.entries()) == 5
    writer.start()
    wait_for(lambda: len(objects(kube)) == 3, what="the queued three are written")
    assert writer.stop(5.0) == []


def test_memory_honours_at_most_max_entries_objects(
    replicas: Callable[..., Replica], kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(blocklist_module, "MAX_ENTRIES", 20)
    writer = replicas("many")
    for i in range(30):
        writer.blocklist.record("gpu-b", offering("gpu-b", region=f"r{i}"))  # 20 kept, so 20 written
    wait_for(lambda: len(objects(kube)) == 20, what="the writer's twenty are written")
    assert len(writer.blocklist.entries()) == 20
    reader = replicas("reader")  # its memory fills with the twenty from the list
    assert len(reader.blocklist.entries()) == 20
    extra = Blocklist(uniform=lambda: 0.0)
    for i in range(10):
        extra.record("gpu-c", offering("gpu-c", region=f"r{i}"))
    for entry in extra.entries():  # ten more objects, as a replica with room would write them
        kube.create(ENTRIES, encode(entry, created=time.time()))
    gone = entry_id("gpu-b", offering("gpu-b", region="r0"))
    kube.delete(entry_path(gone))  # the watch delivers in order: once this lands, so did the ten
    wait_for(lambda: len(reader.blocklist.entries()) == 19, what="the reader drops the deleted one")
    assert all(e.provider == "gpu-b" for e in reader.blocklist.entries()), "past the bound, nothing more is held"


def test_I7_the_expiries_a_store_remembers_are_bounded_and_expired_ones_make_room(
    replicas: Callable[..., Replica], kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(blockstore_module, "MAX_ENTRIES", 5)  # memory itself keeps its own 10,000
    clock = ManualClock(time.time())
    writer, reader = replicas("writer", clock=clock, default_ttl=60.0), replicas("reader", clock=clock)
    for i in range(8):
        writer.blocklist.record("gpu-b", offering("gpu-b", region=f"r{i}"))
    wait_for(lambda: len(reader.blocklist.entries()) == 8, what="the reader holds all eight")
    remembered = dict(reader.store._held)
    assert len(remembered) == 5, "past the bound, an expiry is not remembered"
    # Deleted, one whose expiry was not remembered counts as a clear: the reader drops it.
    (forgotten, *_) = [e.id for e in reader.blocklist.entries() if e.id not in remembered]
    kube.delete(entry_path(forgotten))
    wait_for(lambda: len(reader.blocklist.entries()) == 7, what="the reader drops the deleted one")
    assert forgotten not in {e.id for e in reader.blocklist.entries()}
    # Once the remembered ones are past their expiry and the sweep's grace, they make room.
    clock.advance(60.0 + SWEEP_GRACE + 1.0)
    writer.blocklist.record("gpu-b", offering("gpu-b", region="late"))
    late = entry_id("gpu-b", offering("gpu-b", region="late"))
    wait_for(lambda: late in reader.store._held, what="the new object's expiry is remembered")
    assert len(reader.store._held) <= 5


def test_kubectl_get_shows_scope_reason_and_time_left_and_kubectl_delete_clears_every_replica(
    replicas: Callable[..., Replica], cluster: DevCluster
) -> None:
    if not Path(KUBECTL_137).exists():
        pytest.skip(f"kubectl is not installed at {KUBECTL_137}")
    assert cluster.kubeconfig_path is not None
    a, b = replicas("a"), replicas("b")
    a.blocklist.record("gpu-a", offering())
    wait_for(b.blocked, what="b holds a's refusal")
    name = entry_id("gpu-a", offering())
    listed = run_kubectl(cluster.kubeconfig_path, "get", "nbl")
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split() == ["NAME", "PROVIDER", "SCOPE", "REASON", "TTL", "AGE", "EXPIRES"]
    assert row.startswith(name) and "gpu-a h100 Spot us-east-1" in row and "NoCapacity: full" in row
    assert 290 <= int(row.split()[-3]) <= 300  # TTL (from creation) minus AGE is the time left
    assert row.split()[-1].endswith("Z")
    deleted = run_kubectl(cluster.kubeconfig_path, "delete", "blocklistentry", name)
    assert deleted.returncode == 0, deleted.stderr
    wait_for(lambda: not a.blocked() and not b.blocked(), what="kubectl delete clears every replica")


def test_a_stop_with_the_api_server_down_tries_each_write_once_and_ends(cluster: DevCluster, tmp_path: Path) -> None:
    with relayed(cluster, tmp_path, Relay) as (relay, down):  # never up: connection refused
        blocklist = Blocklist(uniform=lambda: 0.0)
        writer = BlockWriter(down, max_backoff=0.3)
        for i in range(3):
            blocklist.record("gpu-a", offering(region=f"r{i}"))
        for entry in blocklist.entries():
            writer.put(entry)
        writer.start()
        wait_for(lambda: writer.failures >= 1, what="the first write fails")
        before = writer.failures
        assert writer.stop(60.0) == []
        assert writer.failures <= before + 4, "one more try of each write (and the one under way), no retries"
        assert writer.pending() == 0 and len(blocklist.entries()) == 3, "memory keeps them"
