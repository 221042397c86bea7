"""Leases held by strangers (kube/holders.py `stranger`, kube/leases.py, kube/sharing.py), on the
embedded API server with a hand-moved clock: a live holder that is known not to be a replica of
this install (no such Pod by a list begun after it was first seen) is taken over, and the taker
writes for it only a full duration later, so even a wrong judgement cannot let two replicas
write at once; a replica's Lease is never taken, nor one whose holder cannot be judged; a node
Lease taken from a stranger is served (its Runner built) once its fence is valid."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest

from kube.client import Kube, UnreachableError, path_for
from kube.holders import ANY, REFRESH, PodHolders, pod_identity
from kube.leases import NODE, SharedLeases, node_lease
from kube.sharing import Sharing, Term
from tests.support.clock import ManualClock
from tests.support.spoofing import manager_pod, spoof

NS = "default"
DURATION, MARGIN = 15.0, 5.0
SPOOFED = 30.0  # the strangers' Leases' leaseDurationSeconds (tests.support.spoofing): a taker waits the longer
NAME = node_lease("gpu")


class Lists:
    """A Kube whose lists fail while `down`."""

    def __init__(self, kube: Kube) -> None:
        self.kube, self.down = kube, False

    def list(self, path: str, **selectors: str) -> Any:
        if self.down:
            raise UnreachableError(0, "Unreachable", "the API server does not answer")
        return self.kube.list(path, **selectors)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kube, name)


def replica(kube: Kube, pod: str, clock: ManualClock) -> SharedLeases:
    own = manager_pod(kube, pod)
    holders = PodHolders(kube, namespace=NS, own=own, clock=clock)
    return SharedLeases(
        kube, namespace=NS, identity=own, duration=DURATION, margin=MARGIN, clock=clock, holders=holders
    )


def holder_of(kube: Kube, name: str = NAME) -> str:
    lease = kube.get(path_for("leases", namespace=NS, name=name, group="coordination.k8s.io"))
    return str(lease["spec"].get("holderIdentity") or "")


def test_a_stranger_is_known_only_by_a_list_of_the_pods_begun_after_it_was_seen(kube: Kube) -> None:
    clock = ManualClock(100.0)
    own = manager_pod(kube, "manager-a")
    other = manager_pod(kube, "manager-b")
    holders = PodHolders(kube, namespace=NS, own=own, clock=clock)
    made_up = pod_identity("mallory", str(uuid.uuid4()))
    assert holders.trusted(own)  # a list, begun at 100
    assert holders.stranger("mallory", since=100.0) == "not of the form <pod>-<uid>"  # no list needed
    assert holders.stranger(made_up, since=100.0) == ""  # the list began at the sighting, not after it
    clock.now += REFRESH
    assert holders.stranger(made_up, since=100.0) == "no Pod default/mallory"  # listed again, after
    assert holders.stranger(other, since=100.0) == "" and holders.stranger(own, since=100.0) == ""
    assert holders.stranger("", since=100.0) == ""
    assert ANY.stranger("mallory", since=0.0) == ""  # not running as a Pod: nobody is judged


def test_a_holder_is_no_stranger_while_the_pods_cannot_be_listed(kube: Kube) -> None:
    clock = ManualClock(100.0)
    lists = Lists(kube)
    holders = PodHolders(lists, namespace=NS, own=manager_pod(kube, "manager-a"), clock=clock)  # type: ignore[arg-type]
    lists.down = True
    clock.now += REFRESH
    assert holders.stranger(pod_identity("mallory", str(uuid.uuid4())), since=50.0) == ""


def test_a_lease_held_by_a_live_stranger_is_taken_over_and_written_for_only_a_full_duration_later(
    kube: Kube, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock(1000.0)
    me = replica(kube, "manager-a", clock)
    made_up = pod_identity("mallory", str(uuid.uuid4()))
    spoof(kube, NAME, made_up, NODE)  # renewed now, for 30 s
    me.refresh()  # first sight of the stranger, at 1000
    assert not me.hold(NAME, NODE)  # no list begun after the sighting yet: cannot tell
    assert holder_of(kube) == made_up
    clock.now += REFRESH
    me.refresh()
    with caplog.at_level(logging.WARNING, logger="kube.leases"):
        assert me.hold(NAME, NODE)
    assert holder_of(kube) == me.identity
    assert any("was held by" in r.getMessage() and "no Pod default/mallory" in r.getMessage() for r in caplog.records)
    fence = me.fence(NAME)
    assert fence.pending() and not fence.valid()  # the stranger might have been a replica: wait its duration
    taken_at = clock.now
    for _ in range(12):  # renewed meanwhile, as the sharing loop does
        clock.now += 3.0
        me.refresh()
        assert me.hold(NAME, NODE)
        assert fence.valid() == (clock.now >= taken_at + SPOOFED)
    assert fence.valid() and not fence.pending()


def test_a_live_replicas_lease_is_never_taken_however_it_is_judged_over_time(kube: Kube) -> None:
    clock = ManualClock(1000.0)
    me, other = replica(kube, "manager-a", clock), replica(kube, "manager-b", clock)
    other.refresh()
    assert other.hold(NAME, NODE)
    for _ in range(4):
        clock.now += REFRESH
        me.refresh()
        assert not me.hold(NAME, NODE)
        other.refresh()
        assert other.hold(NAME, NODE)
    assert holder_of(kube) == other.identity and other.fence(NAME).valid()


def test_a_stranger_that_writes_the_lease_again_ends_the_takers_fence_and_is_taken_over_again(kube: Kube) -> None:
    clock = ManualClock(1000.0)
    me = replica(kube, "manager-a", clock)
    made_up = pod_identity("mallory", str(uuid.uuid4()))
    spoof(kube, NAME, made_up, NODE)
    me.refresh()
    clock.now += REFRESH
    me.refresh()
    assert me.hold(NAME, NODE)
    for _ in range(int(SPOOFED // 3) + 1):
        clock.now += 3.0
        me.refresh()
        assert me.hold(NAME, NODE)
    assert me.fence(NAME).valid()
    spoof(kube, NAME, made_up, NODE)  # written again
    me.refresh()
    assert not me.fence(NAME).held()  # every change of holder ends a fence
    clock.now += REFRESH
    me.refresh()
    assert me.hold(NAME, NODE)
    assert me.fence(NAME).pending()  # and the wait starts again


class Runner:
    def __init__(self, alias: str, term: Term) -> None:
        self.alias, self.term, self.started, self.stopped = alias, term, False, False
        self.handler = type("Handler", (), {"node_name": f"nebula-{alias}"})()

    def start(self) -> None:
        assert self.term.valid(), "a Runner is started only with a valid fence"
        self.started = True

    def stop(self, timeout: float) -> list[Any]:
        self.stopped = True
        return []


def test_a_spoofed_node_lease_is_served_once_the_fence_taken_from_the_stranger_is_valid(kube: Kube) -> None:
    clock = ManualClock(1000.0)
    me = replica(kube, "manager-a", clock)
    spoof(kube, NAME, pod_identity("mallory", str(uuid.uuid4())), NODE)
    built: list[Runner] = []

    def build(alias: str, term: Term) -> Runner:
        built.append(Runner(alias, term))
        return built[-1]

    sharing = Sharing(me, ["gpu"], build, retry=1.0, stop_timeout=1.0)
    for _ in range(3):  # the member round, the sighting, then a list after it: taken
        sharing.tick()
        clock.now += REFRESH
    assert holder_of(kube) == me.identity
    assert built == [] and sharing.serving() == []  # held, not yet served
    while clock.now < 1000.0 + 3 * REFRESH + SPOOFED:
        sharing.tick()
        clock.now += REFRESH
    sharing.tick()
    assert [r.alias for r in built] == ["gpu"] and built[0].started
    assert sharing.serving() == ["gpu"]
    sharing.stop(1.0)
    assert holder_of(kube) == ""  # released on stop


def test_this_replicas_identity_written_by_someone_else_is_taken_as_from_a_live_holder(kube: Kube) -> None:
    """A live Lease naming this replica that this process did not write last (a restart under
    the same identity, or a forgery while another replica held it) is written for only after
    the wait, as one taken from a stranger."""
    clock = ManualClock(1000.0)
    me = replica(kube, "manager-a", clock)
    spoof(kube, NAME, me.identity, NODE)
    me.refresh()
    assert me.hold(NAME, NODE)
    assert me.fence(NAME).pending()
    clock.now += SPOOFED
    me.refresh()
    assert me.hold(NAME, NODE) and me.fence(NAME).valid()  # renewed since: its own write now


def test_the_wait_is_the_holders_duration_when_longer_and_never_more_than_four_of_ours(kube: Kube) -> None:
    clock = ManualClock(1000.0)
    me = replica(kube, "manager-a", clock)
    spoof(kube, NAME, "mallory", NODE)
    me.refresh()
    seen = me.view.get(NAME)
    assert seen is not None and me.takeover_wait(seen) == SPOOFED
    lease = kube.get(path_for("leases", namespace=NS, name=NAME, group="coordination.k8s.io"))
    lease["spec"]["leaseDurationSeconds"] = 100_000
    kube.replace(path_for("leases", namespace=NS, name=NAME, group="coordination.k8s.io"), lease)
    me.refresh()
    seen = me.view.get(NAME)
    assert seen is not None and me.takeover_wait(seen) == 4 * DURATION


def test_a_lease_taken_from_a_stranger_and_given_up_before_it_is_served_is_not_written_free(kube: Kube) -> None:
    """Released, it could be taken at once by any replica, before the wait that makes the
    takeover safe has passed: it is only no longer renewed."""
    clock = ManualClock(1000.0)
    me = replica(kube, "manager-a", clock)
    spoof(kube, NAME, "mallory", NODE)
    sharing = Sharing(me, ["gpu"], lambda alias, term: Runner(alias, term), retry=1.0, stop_timeout=1.0)
    for _ in range(2):
        sharing.tick()
        clock.now += REFRESH
    assert holder_of(kube) == me.identity and me.fence(NAME).pending()
    sharing.stop(1.0)
    assert holder_of(kube) == me.identity  # not written free
    assert not me.fence(NAME).held()
