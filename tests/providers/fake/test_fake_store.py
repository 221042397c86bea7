"""The fake cloud's record index and its slow API: a call costs what it touches, the answers
stay those of a cloud that advances every record on every call, and `api_latency` slows
the calls it names."""

from __future__ import annotations

import pytest

from providers import errors
from providers.base import InstanceState, Tier
from providers.fake.cloud import FakeCloud
from providers.fake.records import InstanceRecord
from providers.fake.scenario import load_scenario
from providers.fake.store import Records
from tests.providers.fake.test_fake_cloud import H100, OWNER, make_cloud, request, scenario, state_of
from tests.support.clock import ManualClock
from tests.support.factories import make_pod_spec


def test_api_latency_slows_only_the_calls_it_names_through_the_injected_sleep() -> None:
    sleeps: list[float] = []
    cloud = make_cloud(ManualClock(1_700_000_000.0), sleeps, api_latency={"provision": 2.0, "terminate": 0.5})
    result = cloud.provision(make_pod_spec(), request(), owner=OWNER)
    cloud.list(owner=OWNER)
    cloud.get(result.instance_id, owner=OWNER)
    cloud.terminate(result.instance_id, owner=OWNER)
    assert sleeps == [2.0, 0.5]
    cloud.slow(1.0)
    cloud.provision(make_pod_spec(), request("claim-2"), owner=OWNER)
    assert sleeps == [2.0, 0.5, 3.0]  # a slow fault adds to the scenario's latency


@pytest.mark.parametrize(
    ("latency", "message"),
    [
        ({"provison": 1.0}, "api_latency.provison is not a call (calls: provision, terminate"),
        ({"provision": -1}, "api_latency.provision must be zero or more"),
        ({"provision": "slow"}, "api_latency.provision must be a number"),
        (["provision"], "'api_latency' maps a call"),
    ],
)
def test_a_bad_api_latency_names_what_is_wrong(latency: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        load_scenario(scenario(api_latency=latency))


def test_an_instance_nobody_looked_at_is_up_to_date_when_it_is_listed_or_read() -> None:
    clock = ManualClock(1_700_000_000.0)
    cloud = make_cloud(clock, workload={"run_seconds": 10})
    first = cloud.provision(make_pod_spec(), request("a"), owner=OWNER).instance_id
    for n in range(20):  # other calls meanwhile never touch the first record
        clock.advance(1)
        cloud.provision(make_pod_spec(), request(f"other-{n}"), owner=OWNER)
    assert state_of(cloud, first) is InstanceState.SUCCEEDED
    listed = {i.id: i.state for i in cloud.list(owner=OWNER)}
    assert listed[first] is InstanceState.SUCCEEDED
    latest = next(r["id"] for r in cloud.instances() if r["claim"] == "other-19")
    assert listed[latest] is InstanceState.RUNNING


def test_a_capacity_freed_by_time_alone_is_seen_by_the_next_provision() -> None:
    clock = ManualClock(1_700_000_000.0)
    cloud = make_cloud(clock, workload={"run_seconds": 40})
    where = {"tier": Tier.SPOT, "region": "us-east-1"}
    held = cloud.provision(make_pod_spec(**H100), request("a", **where), owner=OWNER).instance_id
    clock.advance(69)  # 30 s booting, then 39 of its 40 s run: the one H100 there is in use
    with pytest.raises(errors.NoCapacity):
        cloud.provision(make_pod_spec(**H100), request("b", **where), owner=OWNER)
    clock.advance(1)  # the workload ended on its own: nothing touched the record meanwhile
    assert cloud.provision(make_pod_spec(**H100), request("b", **where), owner=OWNER).instance_id != held


def test_retained_records_are_forgotten_in_the_order_their_retention_ends() -> None:
    clock = ManualClock(1_700_000_000.0)
    cloud = make_cloud(clock, retention_seconds=100)
    ids = [cloud.provision(make_pod_spec(), request(f"c{n}"), owner=OWNER).instance_id for n in range(3)]
    for instance_id in reversed(ids):
        cloud.terminate(instance_id, owner=OWNER)
        clock.advance(10)
    # terminated at +0 (c2), +10 (c1), +20 (c0); now +30
    clock.advance(75)  # +105: c2's retention ended
    assert sorted(i.id for i in cloud.list(owner=OWNER)) == sorted(ids[:2])
    clock.advance(10)  # +115: c1's too
    assert [i.id for i in cloud.list(owner=OWNER)] == [ids[0]]
    clock.advance(10)
    assert cloud.list(owner=OWNER) == [] and cloud.instances() == []


def test_a_claim_made_again_after_its_first_instance_went_is_a_new_instance_then_adopted() -> None:
    clock = ManualClock(1_700_000_000.0)
    cloud = make_cloud(clock, retention_seconds=100)
    first = cloud.provision(make_pod_spec(), request("c"), owner=OWNER).instance_id
    cloud.terminate(first, owner=OWNER)
    second = cloud.provision(make_pod_spec(), request("c"), owner=OWNER).instance_id
    assert second != first  # a going instance is never adopted
    assert cloud.provision(make_pod_spec(), request("c"), owner=OWNER).instance_id == second
    assert cloud.provision(make_pod_spec(), request("c"), owner="c2.fake").instance_id not in (first, second)


def test_the_index_survives_a_snapshot_and_a_vanishing_instance() -> None:
    clock = ManualClock(1_700_000_000.0)
    cloud = make_cloud(clock, retention_seconds=50)
    kept = cloud.provision(make_pod_spec(), request("kept"), owner=OWNER).instance_id
    going = cloud.provision(make_pod_spec(), request("going"), owner=OWNER).instance_id
    vanished = cloud.provision(make_pod_spec(), request("vanished"), owner=OWNER).instance_id
    cloud.terminate(going, owner=OWNER)
    cloud.lose(vanished, vanish=True)
    copy = FakeCloud(cloud.scenario, clock=clock, sleep=lambda _: None)
    copy.restore(cloud.snapshot())
    assert copy.provision(make_pod_spec(), request("kept"), owner=OWNER).instance_id == kept
    assert copy.provision(make_pod_spec(), request("vanished"), owner=OWNER).instance_id != vanished
    clock.advance(50)
    assert going not in {r["id"] for r in copy.instances()}  # the restored sweep still ends it


def test_records_with_claim_are_oldest_first() -> None:
    records = Records()
    for n in (9, 10, 11):
        record = InstanceRecord(
            id=f"fake-{n}", claim="c", state=InstanceState.RUNNING, created_at=0, ready_at=0,
            accelerator=None, gpu_count=0, tier=Tier.ON_DEMAND, region="us-east-1",
        )  # fmt: skip
        records.add(record)
    assert [r.id for r in records.with_claim("c", 0, load_scenario(None))] == ["fake-9", "fake-10", "fake-11"]
