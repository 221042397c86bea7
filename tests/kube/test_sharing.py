"""The sharing loop's decisions, one `tick` at a time on the embedded API server with a fake
monotonic clock and stand-in Runners (the real ones run in tests/nebula_site/test_sharing_managers.py):
a share is ceil(M/N); preferences differ per replica; a replica's first round takes nothing
(replicas starting together count each other first); a replica over its share gives one
provider back per round, its Runner stopped before the Lease is released; a Runner whose
Lease ran out is stopped and its term ended for good, and a later take builds a new one; a
stop releases every Lease and deletes the member Lease; sharing without leader election is refused."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from kube.client import Kube
from kube.leases import KIND_LABEL, SharedLeases, lease_path, node_lease
from kube.sharing import Sharing, Term, preference, quota
from tests.support.clock import ManualClock

DURATION = 15.0


@dataclass
class StandIn:
    """What Sharing uses of a Runner: start, stop, handler.node_name."""

    alias: str
    term: Term
    holder_at_stop: list[str] = field(default_factory=list)
    kube: Kube | None = None
    started: bool = False
    stopped: bool = False

    @property
    def handler(self) -> Any:
        return type("H", (), {"node_name": f"nebula-{self.alias}"})()

    def start(self) -> None:
        self.started = True

    def stop(self, timeout: float) -> list[threading.Thread]:
        assert self.kube is not None
        self.holder_at_stop.append(holders(self.kube).get(self.alias, ""))
        self.stopped = True
        return []


def holders(kube: Kube) -> dict[str, str]:
    items, _ = kube.list(lease_path("default"), labelSelector=KIND_LABEL)
    return {
        i["metadata"]["name"].removeprefix("nebula-node-"): i["spec"].get("holderIdentity") or ""
        for i in items
        if i["metadata"]["labels"][KIND_LABEL] == "node"
    }


class Replica:
    def __init__(self, kube: Kube, identity: str, aliases: list[str], clock: ManualClock) -> None:
        self.built: list[StandIn] = []

        def build(alias: str, term: Term) -> StandIn:
            runner = StandIn(alias, term, kube=kube)
            self.built.append(runner)
            return runner

        leases = SharedLeases(
            kube, namespace="default", identity=identity, duration=DURATION, margin=DURATION / 3, clock=clock
        )
        self.sharing = Sharing(leases, aliases, build, retry=2.0, stop_timeout=1.0)

    def tick(self) -> None:
        self.sharing.tick()
        for served in list(self.sharing._served.values()):  # let the stops the round began finish
            if served.stopping is not None:
                served.stopping.join(5)


def test_a_share_is_ceil_m_over_n_and_preferences_differ_per_replica() -> None:
    assert [quota(6, n) for n in (0, 1, 2, 3, 4, 6, 7)] == [6, 6, 3, 2, 2, 1, 1]
    aliases = [f"p{i}" for i in range(6)]
    orders = {identity: preference(identity, aliases) for identity in ("a", "b", "c")}
    assert all(sorted(order) == aliases for order in orders.values())
    assert len({tuple(order) for order in orders.values()}) == 3
    assert preference("a", aliases) == orders["a"]  # stable


def test_a_replica_over_its_share_gives_one_back_per_round_stopping_its_runner_before_releasing(kube: Kube) -> None:
    aliases = ["a", "b", "c", "d"]
    clock = ManualClock(100.0)
    first = Replica(kube, "first", aliases, clock)
    first.tick()  # the first round only registers the member
    assert first.sharing.serving() == []
    first.tick()
    assert sorted(first.sharing.serving()) == aliases
    second = Replica(kube, "second", aliases, clock)
    second.tick()
    second.tick()  # counts two members: wants two, none free yet
    assert second.sharing.serving() == []
    first.tick()  # sees two members: begins giving one back (one at a time)
    assert len(first.sharing.serving()) == 3
    (given,) = [r for r in first.built if r.stopped]
    assert given.holder_at_stop == ["first"]  # its Runner stopped while the Lease was still held
    assert holders(kube)[given.alias] == "first"
    first.tick()  # that Runner is done: the Lease is released; the next give-back begins
    assert holders(kube)[given.alias] == ""
    assert len(first.sharing.serving()) == 2
    for _ in range(4):
        second.tick()
        first.tick()
    assert Counter(holders(kube).values()) == {"first": 2, "second": 2}
    assert sorted(first.sharing.serving() + second.sharing.serving()) == aliases


def test_a_runner_whose_lease_ran_out_is_stopped_for_good_and_a_later_take_builds_a_new_one(kube: Kube) -> None:
    clock = ManualClock(100.0)
    alone = Replica(kube, "alone", ["gpu"], clock)
    alone.tick()
    alone.tick()
    (old,) = alone.built
    assert old.term.valid()
    clock.now += DURATION  # no round for a whole duration (a pause): the fence ran out
    assert not old.term.valid()
    alone.tick()  # stops the lapsed Runner (nobody took the Lease, so it is held again: a fresh Runner)
    alone.tick()
    assert old.stopped and not old.term.valid()
    assert len(alone.built) == 2 and alone.built[1].started and alone.built[1].term.valid()
    assert not old.term.valid()  # the old term stays ended though the Lease is held again


def test_stop_releases_every_lease_and_deletes_the_member_lease(kube: Kube) -> None:
    clock = ManualClock(100.0)
    replica = Replica(kube, "leaving", ["x", "y"], clock)
    replica.tick()
    replica.tick()
    assert holders(kube) == {"x": "leaving", "y": "leaving"}
    assert replica.sharing.stop(5.0) == []
    assert all(r.stopped for r in replica.built)
    assert holders(kube) == {"x": "", "y": ""}
    items, _ = kube.list(lease_path("default"), labelSelector=KIND_LABEL)
    assert [i["metadata"]["name"] for i in items if i["metadata"]["labels"][KIND_LABEL] == "member"] == []
    assert node_lease("x") in {i["metadata"]["name"] for i in items}


@pytest.mark.parametrize("members", [1, 2, 3])
def test_replicas_split_six_providers_evenly(kube: Kube, members: int) -> None:
    aliases = [f"p{i}" for i in range(6)]
    clock = ManualClock(100.0)
    replicas = [Replica(kube, f"r{i}", aliases, clock) for i in range(members)]
    for replica in replicas:
        replica.tick()  # each one's member Lease is written
    for _ in range(12):
        for replica in replicas:
            replica.tick()
    assert sorted(Counter(holders(kube).values()).values()) == [6 // members] * members


def test_sharing_providers_without_leader_election_is_refused_before_anything_starts() -> None:
    with pytest.raises(CommandError, match="--share-providers needs leader election"):
        call_command("runvnode", "--share-providers", "--no-leader-election", "--provider", "fake")
