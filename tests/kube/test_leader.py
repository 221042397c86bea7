"""The leader elector's rules on a real Lease (the embedded API server) with fake clocks:
a free Lease is acquired, the holder renews it, another holder's unexpired Lease is
respected, an expired one is taken (a transition), and a released one is free at once;
"expired" is judged by the observer's monotonic clock, whatever the holder's wall clock wrote."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kube import leases
from kube.client import Kube
from kube.leader import LeaderElector
from kube.leases import Holder, LeaseReader, Seen
from kube.times import micro_time

LEASE = leases.lease_path("default", "nebula-test")
T0 = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
DURATION = 15.0


@dataclass
class FakeClock:
    """One machine's clocks: `monotonic` seconds since the test began, and a wall clock
    `skew` seconds off T0 then."""

    seconds: float = 0.0
    skew: float = 0.0

    def now(self) -> datetime:
        return T0 + timedelta(seconds=self.skew + self.seconds)

    def monotonic(self) -> float:
        return self.seconds

    def set(self, seconds: float) -> None:
        self.seconds = seconds


def elector(kube: Kube, identity: str, clock: FakeClock, **extra: Any) -> LeaderElector:
    return LeaderElector(
        kube,
        namespace="default",
        name="nebula-test",
        identity=identity,
        lease_duration=DURATION,
        now=clock.now,
        clock=clock.monotonic,
        **extra,
    )


def lease_spec(kube: Kube) -> dict[str, Any]:
    return dict(kube.get(LEASE)["spec"])


@pytest.mark.parametrize(
    ("held_by", "at", "wins", "holder", "transitions"),
    [
        pytest.param(None, 0.0, True, "me", 0, id="a free Lease is acquired"),
        pytest.param("me", 5.0, True, "me", 0, id="the holder renews its own Lease"),
        pytest.param("other", DURATION - 1, False, "other", 0, id="another holder's unexpired Lease is respected"),
        pytest.param("other", DURATION + 1, True, "me", 1, id="an expired Lease is taken, one transition"),
    ],
)
def test_try_acquire_or_renew_follows_the_lease_rules(
    kube: Kube, held_by: str | None, at: float, wins: bool, holder: str, transitions: int
) -> None:
    clock = FakeClock()
    me = elector(kube, "me", clock)
    if held_by is not None:
        assert elector(kube, held_by, clock).try_acquire_or_renew()
        me.holder()  # "me" sees the Lease written: its clock for that renewal starts now
    before = lease_spec(kube) if held_by is not None else None
    clock.set(at)
    assert me.try_acquire_or_renew() is wins
    spec = lease_spec(kube)
    assert spec["holderIdentity"] == holder
    assert spec["leaseTransitions"] == transitions
    assert spec["leaseDurationSeconds"] == int(DURATION)
    if wins:
        assert spec["renewTime"] == micro_time(clock.now())
        if holder == held_by:  # a renewal keeps the acquisition time
            assert before is not None and spec["acquireTime"] == before["acquireTime"]
        else:
            assert spec["acquireTime"] == micro_time(clock.now())
    else:
        assert spec == before


def test_a_released_lease_is_taken_by_a_standby_at_once(kube: Kube) -> None:
    clock = FakeClock()
    leader = elector(kube, "leader", clock)
    assert leader.acquire(threading.Event())
    assert leader.is_leader
    leader.release()
    assert not leader.is_leader
    assert lease_spec(kube)["holderIdentity"] == ""
    clock.set(1.0)  # long before the leader's lease_duration would have run out
    standby = elector(kube, "standby", clock)
    assert standby.try_acquire_or_renew()
    spec = lease_spec(kube)
    assert spec["holderIdentity"] == "standby" and spec["leaseTransitions"] == 1


def test_release_without_leading_writes_nothing(kube: Kube) -> None:
    clock = FakeClock()
    holder = elector(kube, "holder", clock)
    assert holder.try_acquire_or_renew()
    before = lease_spec(kube)
    elector(kube, "bystander", clock).release()
    assert lease_spec(kube) == before


def test_the_holders_annotations_are_written_on_acquire_and_renew_and_removed_on_release(kube: Kube) -> None:
    clock = FakeClock()
    published = {"nebula.io/console-url": "https://10.0.0.7:8443"}
    leader = elector(kube, "leader", clock, annotations=published)
    assert leader.acquire(threading.Event())
    assert kube.get(LEASE)["metadata"]["annotations"] == published
    lease = kube.get(LEASE)
    lease["metadata"]["annotations"] = {"someone.else/note": "kept"}  # another writer's annotation
    kube.replace(LEASE, lease)
    clock.set(5.0)
    assert leader.try_acquire_or_renew()
    assert kube.get(LEASE)["metadata"]["annotations"] == {"someone.else/note": "kept", **published}
    leader.release()
    assert kube.get(LEASE)["metadata"]["annotations"] == {"someone.else/note": "kept"}


def test_current_holder_names_the_unexpired_holder_and_what_it_published(kube: Kube) -> None:
    clock = FakeClock()
    reader = LeaseReader(kube, namespace="default", clock=clock.monotonic)
    assert reader.holder("nebula-test") is None  # no Lease yet
    published = {"nebula.io/console-url": "http://10.0.0.7:8000"}
    leader = elector(kube, "leader", clock, annotations=published)
    assert leader.try_acquire_or_renew()
    assert reader.holder("nebula-test") == Holder("leader", published)  # seen renewed at 0
    clock.set(DURATION - 1)
    assert reader.holder("nebula-test") == Holder("leader", published)
    clock.set(DURATION)
    assert reader.holder("nebula-test") is None  # expired


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({}, id="never held"),
        pytest.param({"holderIdentity": "", "renewTime": micro_time(T0), "leaseDurationSeconds": 15}, id="released"),
        pytest.param({"holderIdentity": "x", "leaseDurationSeconds": 15}, id="no renew time"),
    ],
)
def test_holder_of_a_free_lease_is_none(spec: dict[str, Any]) -> None:
    assert Seen.of({"spec": spec}, 0.0).holder_at(0.0) is None


@pytest.mark.parametrize("skew", [3600.0, -3600.0], ids=["holder's wall clock an hour ahead", "an hour behind"])
def test_a_leader_is_judged_by_the_observers_monotonic_clock_not_its_renew_time(kube: Kube, skew: float) -> None:
    """The renewTime a leader writes is in the future or the past of the standby's wall clock:
    the standby respects a leader that keeps renewing, and takes over a full duration (by its
    own monotonic clock) after it last saw a renewal; the console's reader agrees."""
    leader_clock, standby_clock = FakeClock(skew=skew), FakeClock(seconds=500.0)  # unrelated clocks
    leader, standby = elector(kube, "leader", leader_clock), elector(kube, "standby", standby_clock)
    reader = LeaseReader(kube, namespace="default", clock=standby_clock.monotonic)
    assert leader.try_acquire_or_renew()
    assert lease_spec(kube)["renewTime"] == micro_time(T0 + timedelta(seconds=skew))
    assert not standby.try_acquire_or_renew()  # first sight: alive for a full duration from now
    assert reader.holder("nebula-test") == Holder("leader")
    standby_clock.set(500.0 + DURATION - 1)
    assert not standby.try_acquire_or_renew()
    leader_clock.set(DURATION - 1)
    assert leader.try_acquire_or_renew()  # a renewal: the standby's wait starts again when it sees it
    standby_clock.set(500.0 + DURATION - 0.5)
    assert not standby.try_acquire_or_renew()
    assert reader.holder("nebula-test") == Holder("leader")
    standby_clock.set(500.0 + 2 * DURATION - 1)
    assert not standby.try_acquire_or_renew()
    assert reader.holder("nebula-test") == Holder("leader")
    standby_clock.set(500.0 + 2 * DURATION - 0.5)  # a full duration since the renewal was seen
    assert reader.holder("nebula-test") is None
    assert standby.try_acquire_or_renew()
    spec = lease_spec(kube)
    assert spec["holderIdentity"] == "standby" and spec["leaseTransitions"] == 1
    assert leader.fence.valid()  # by its own clock it still could write...
    assert not leader.try_acquire_or_renew()
    assert not leader.fence.valid()  # ...until it saw the Lease taken


def test_the_leaders_fence_ends_renew_deadline_after_its_last_renewal_began(kube: Kube) -> None:
    clock = FakeClock()
    leader = elector(kube, "leader", clock, renew_deadline=10.0)
    assert not leader.fence.valid()  # not held yet
    assert leader.try_acquire_or_renew()
    clock.set(9.99)
    assert leader.fence.valid()
    leader.fence.check()
    clock.set(10.0)
    assert not leader.fence.valid()
    assert leader.try_acquire_or_renew()  # nobody else wrote: renewed, valid again
    assert leader.fence.valid()
    leader.is_leader = True
    leader.release()
    assert not leader.fence.valid()  # released: its writers stop first
