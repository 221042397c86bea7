"""The leader elector's rules on a real Lease (the embedded API server) with a fake clock:
a free Lease is acquired, the holder renews it, another holder's unexpired Lease is
respected, an expired one is taken (a transition), and a released one is free at once."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kube.client import Kube, path_for
from kube.leader import Holder, LeaderElector, current_holder, holder_of
from kube.times import micro_time

LEASE = path_for("leases", namespace="default", name="nebula-test", group="coordination.k8s.io")
T0 = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
DURATION = 15.0


@dataclass
class FakeClock:
    at: datetime = T0

    def now(self) -> datetime:
        return self.at

    def set(self, seconds: float) -> None:
        self.at = T0 + timedelta(seconds=seconds)


def elector(kube: Kube, identity: str, clock: FakeClock) -> LeaderElector:
    return LeaderElector(
        kube, namespace="default", name="nebula-test", identity=identity, lease_duration=DURATION, now=clock.now
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
    if held_by is not None:
        assert elector(kube, held_by, clock).try_acquire_or_renew()
    before = lease_spec(kube) if held_by is not None else None
    clock.set(at)
    assert elector(kube, "me", clock).try_acquire_or_renew() is wins
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
    leader = LeaderElector(
        kube, namespace="default", name="nebula-test", identity="leader", now=clock.now, annotations=published
    )
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
    assert current_holder(kube, namespace="default", name="nebula-test", now=clock.now) is None  # no Lease yet
    published = {"nebula.io/console-url": "http://10.0.0.7:8000"}
    leader = LeaderElector(
        kube, namespace="default", name="nebula-test", identity="leader", now=clock.now, annotations=published
    )
    assert leader.try_acquire_or_renew()
    clock.set(DURATION - 1)
    assert current_holder(kube, namespace="default", name="nebula-test", now=clock.now) == Holder("leader", published)
    clock.set(DURATION)
    assert current_holder(kube, namespace="default", name="nebula-test", now=clock.now) is None  # expired


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({}, id="never held"),
        pytest.param({"holderIdentity": "", "renewTime": micro_time(T0), "leaseDurationSeconds": 15}, id="released"),
        pytest.param({"holderIdentity": "x", "leaseDurationSeconds": 15}, id="no renew time"),
    ],
)
def test_holder_of_a_free_lease_is_none(spec: dict[str, Any]) -> None:
    assert holder_of({"spec": spec}, T0) is None
