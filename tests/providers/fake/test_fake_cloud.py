"""The fake cloud's rules with an injected clock: delays, capacity, each fault kind, exits,
restarts, retention after terminate, the call log, reset, and the state snapshot."""

from __future__ import annotations

from typing import Any

import pytest

from providers import errors
from providers.base import ClaimName, InstanceId, InstanceState, ProvisionRequest, Tier
from providers.fake.cloud import FakeCloud
from providers.fake.scenario import load_scenario
from tests.support.clock import ManualClock
from tests.support.factories import make_pod_spec

H100 = {"accelerator": "h100", "gpu_count": 8}
OWNER = "c1.fake"  # the Owner.key every provider call carries


def scenario(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "regions": {"us": ["us-east-1", "us-west-2"]},
        "offerings": [
            {"accelerator": None, "tier": "OnDemand", "region": "us-east-1", "hourly_price": 0.1},
            {
                "accelerator": "H100",
                "gpu_count": 8,
                "tiers": ["Spot", "OnDemand"],
                "regions": ["us-east-1", "us-west-2"],
                "capacity": 1,
                "provisioning_delay": 30,
            },
        ],
    }
    data.update(overrides)
    return data


def make_cloud(clock: ManualClock, sleeps: list[float] | None = None, **overrides: Any) -> FakeCloud:
    sink = sleeps if sleeps is not None else []
    return FakeCloud(load_scenario(scenario(**overrides)), clock=clock, sleep=sink.append)


def request(claim: str = "claim-1", tier: Tier | None = None, region: str | None = None) -> ProvisionRequest:
    return ProvisionRequest(claim=ClaimName(claim), capacity_type=tier, region=region, env={"TOKEN": "hunter2"})


def state_of(cloud: FakeCloud, instance_id: str) -> InstanceState | None:
    instance = cloud.get(instance_id, owner=OWNER)
    return None if instance is None else instance.state


def test_an_instance_with_a_delay_is_provisioning_until_the_delay_passes() -> None:
    clock = ManualClock(1_700_000_000.0)
    cloud = make_cloud(clock)
    result = cloud.provision(make_pod_spec(**H100), request(tier=Tier.SPOT, region="us-west-2"), owner=OWNER)
    assert result.reserved and result.credential is not None and result.endpoint == f"fake://{result.instance_id}"
    assert state_of(cloud, result.instance_id) is InstanceState.PROVISIONING
    clock.advance(29.9)
    assert state_of(cloud, result.instance_id) is InstanceState.PROVISIONING
    clock.advance(0.2)
    instance = cloud.get(result.instance_id, owner=OWNER)
    assert instance is not None and instance.state is InstanceState.RUNNING
    assert instance.region == "us-west-2" and instance.capacity_type is Tier.SPOT
    assert instance.started_at is not None and instance.started_at > instance.created_at


def test_a_cpu_pod_without_delay_runs_at_once_in_the_first_matching_offering() -> None:
    cloud = make_cloud(ManualClock(1_700_000_000.0))
    result = cloud.provision(make_pod_spec(), request(), owner=OWNER)
    instance = cloud.get(result.instance_id, owner=OWNER)
    assert instance is not None and instance.state is InstanceState.RUNNING
    assert (instance.region, instance.capacity_type) == ("us-east-1", Tier.ON_DEMAND)


def test_provision_is_idempotent_on_the_claim_and_mints_a_credential_once() -> None:
    cloud = make_cloud(ManualClock(1_700_000_000.0))
    first = cloud.provision(make_pod_spec(), request("c"), owner=OWNER)
    again = cloud.provision(make_pod_spec(), request("c"), owner=OWNER)
    assert again.instance_id == first.instance_id and again.credential is None
    assert first.credential is not None and set(first.credential.data) == {"token"}
    assert len(cloud.list(owner=OWNER)) == 1


def test_ids_count_up_and_are_never_reused_after_reset() -> None:
    cloud = make_cloud(ManualClock(1_700_000_000.0))
    assert cloud.provision(make_pod_spec(), request("a"), owner=OWNER).instance_id == "fake-1"
    cloud.reset()
    assert cloud.list(owner=OWNER) == []
    assert cloud.provision(make_pod_spec(), request("b"), owner=OWNER).instance_id == "fake-2"


def test_a_full_offering_refuses_with_no_capacity_and_frees_on_terminate() -> None:
    cloud = make_cloud(ManualClock(1_700_000_000.0))
    spot_east: dict[str, Any] = {"tier": Tier.SPOT, "region": "us-east-1"}
    first = cloud.provision(make_pod_spec(**H100), request("a", **spot_east), owner=OWNER)
    with pytest.raises(errors.NoCapacity):
        cloud.provision(make_pod_spec(**H100), request("b", **spot_east), owner=OWNER)
    # Another offering of the same shape still has room.
    cloud.provision(make_pod_spec(**H100), request("c", tier=Tier.ON_DEMAND, region="us-east-1"), owner=OWNER)
    cloud.terminate(first.instance_id, owner=OWNER)
    cloud.provision(make_pod_spec(**H100), request("b", **spot_east), owner=OWNER)


def test_without_tier_or_region_a_full_offering_is_skipped_for_the_next() -> None:
    cloud = make_cloud(ManualClock(1_700_000_000.0))
    ids = [cloud.provision(make_pod_spec(**H100), request(f"c{i}"), owner=OWNER).instance_id for i in range(4)]
    placed = {(i.capacity_type, i.region) for i in cloud.list(owner=OWNER) if i.id in ids}
    assert len(placed) == 4
    with pytest.raises(errors.NoCapacity):
        cloud.provision(make_pod_spec(**H100), request("c5"), owner=OWNER)


def test_a_shape_nobody_offers_is_an_invalid_request_and_a_missing_region_no_capacity() -> None:
    cloud = make_cloud(ManualClock(1_700_000_000.0))
    with pytest.raises(errors.InvalidRequest):
        cloud.provision(make_pod_spec(accelerator="b200", gpu_count=8), request(), owner=OWNER)
    with pytest.raises(errors.InvalidRequest):
        cloud.provision(make_pod_spec(gpu_count=2), request(), owner=OWNER)
    with pytest.raises(errors.NoCapacity):
        cloud.provision(make_pod_spec(**H100), request(region="eu-west-1"), owner=OWNER)


@pytest.mark.parametrize(
    ("reason", "error"),
    [
        ("capacity", errors.NoCapacity),
        ("auth", errors.Unauthorized),
        ("quota", errors.QuotaExceeded),
        ("invalid", errors.InvalidRequest),
        ("unsupported", errors.NotSupported),
    ],
)
def test_a_refuse_fault_raises_its_kind_only_for_matching_offerings(reason: str, error: type[Exception]) -> None:
    cloud = make_cloud(ManualClock(1_700_000_000.0))
    cloud.refuse(reason, accelerator="h100", tier="Spot", region="us-east-1")
    with pytest.raises(error):
        cloud.provision(make_pod_spec(**H100), request("a", tier=Tier.SPOT, region="us-east-1"), owner=OWNER)
    cloud.provision(make_pod_spec(**H100), request("b", tier=Tier.SPOT, region="us-west-2"), owner=OWNER)
    cloud.provision(make_pod_spec(), request("c"), owner=OWNER)
    assert [f.reason for f in cloud.faults()] == [reason]


@pytest.mark.parametrize(
    ("reason", "error"), [("invalid", errors.InvalidRequest), ("unsupported", errors.NotSupported)]
)
def test_an_invalid_or_unsupported_refusal_names_the_shape_and_is_no_refusal_for_the_blocklist(
    reason: str, error: type[errors.ProviderError]
) -> None:
    cloud = make_cloud(ManualClock(1_700_000_000.0))
    cloud.refuse(reason, accelerator="h100", count=1)
    with pytest.raises(error) as caught:
        cloud.provision(make_pod_spec(**H100), request("a", tier=Tier.SPOT, region="us-east-1"), owner=OWNER)
    assert not isinstance(caught.value, errors.Refused)
    assert "h100 x8 Spot in us-east-1" in str(caught.value)
    cloud.provision(make_pod_spec(**H100), request("a", tier=Tier.SPOT, region="us-east-1"), owner=OWNER)


def test_a_hide_fault_omits_the_instance_from_the_next_n_lists_while_get_still_returns_it() -> None:
    cloud = make_cloud(ManualClock(1_700_000_000.0))
    hidden = cloud.provision(make_pod_spec(), request("hidden"), owner=OWNER).instance_id
    shown = cloud.provision(make_pod_spec(), request("shown"), owner=OWNER).instance_id
    cloud.hide(hidden, count=2)
    for _ in range(2):
        assert [i.id for i in cloud.list(owner=OWNER)] == [shown]
        instance = cloud.get(hidden, owner=OWNER)
        assert instance is not None and instance.state is InstanceState.RUNNING
    assert [i.id for i in cloud.list(owner=OWNER)] == [hidden, shown]
    assert cloud.faults() == []


def test_a_hide_fault_by_claim_is_one_shot_by_default_and_spent_only_by_lists_that_would_show_it() -> None:
    cloud = make_cloud(ManualClock(1_700_000_000.0))
    hidden = cloud.provision(make_pod_spec(), request("hidden"), owner=OWNER).instance_id
    cloud.hide(claim="hidden")
    assert cloud.list(owner="c2.fake") == []  # another owner's list does not see it, so does not spend it
    assert cloud.list(owner=OWNER) == []
    assert [i.id for i in cloud.list(owner=OWNER)] == [hidden]


def test_two_hide_faults_on_one_instance_are_each_spent_by_the_list_they_hid_it_from() -> None:
    cloud = make_cloud(ManualClock(1_700_000_000.0))
    hidden = cloud.provision(make_pod_spec(), request("hidden"), owner=OWNER).instance_id
    cloud.hide(hidden)
    cloud.hide(claim="hidden")
    assert cloud.list(owner=OWNER) == []
    assert [i.id for i in cloud.list(owner=OWNER)] == [hidden] and cloud.faults() == []


def test_a_timed_hide_fault_hides_from_every_list_until_it_ends() -> None:
    clock = ManualClock(1_700_000_000.0)
    cloud = make_cloud(clock)
    hidden = cloud.provision(make_pod_spec(), request("hidden"), owner=OWNER).instance_id
    cloud.hide(hidden, seconds=10)
    for _ in range(3):
        assert cloud.list(owner=OWNER) == []
    clock.advance(10)
    assert [i.id for i in cloud.list(owner=OWNER)] == [hidden]


def test_a_counted_refusal_stops_after_count_and_a_timed_one_after_its_seconds() -> None:
    clock = ManualClock(1_700_000_000.0)
    cloud = make_cloud(clock)
    cloud.refuse("capacity", count=2)
    for _ in range(2):
        with pytest.raises(errors.NoCapacity):
            cloud.provision(make_pod_spec(), request("a"), owner=OWNER)
    cloud.provision(make_pod_spec(), request("a"), owner=OWNER)
    cloud.refuse("quota", seconds=10)
    with pytest.raises(errors.QuotaExceeded):
        cloud.provision(make_pod_spec(), request("b"), owner=OWNER)
    clock.advance(10)
    cloud.provision(make_pod_spec(), request("b"), owner=OWNER)
    assert cloud.faults() == []


def test_an_existing_claim_is_adopted_even_while_refusals_are_injected() -> None:
    cloud = make_cloud(ManualClock(1_700_000_000.0))
    first = cloud.provision(make_pod_spec(), request("a"), owner=OWNER)
    cloud.refuse("auth")
    assert cloud.provision(make_pod_spec(), request("a"), owner=OWNER).instance_id == first.instance_id


def test_an_outage_makes_every_call_unavailable_until_it_ends_or_is_cleared() -> None:
    clock = ManualClock(1_700_000_000.0)
    cloud = make_cloud(clock)
    result = cloud.provision(make_pod_spec(), request("a"), owner=OWNER)
    cloud.outage(seconds=30)
    for call in (
        lambda: cloud.list(owner=OWNER),
        lambda: cloud.get(result.instance_id, owner=OWNER),
        lambda: cloud.terminate(result.instance_id, owner=OWNER),
        lambda: cloud.provision(make_pod_spec(), request("b"), owner=OWNER),
        lambda: cloud.offerings(),
    ):
        with pytest.raises(errors.Unavailable) as caught:
            call()
        assert caught.value.retry_after == pytest.approx(30)
    clock.advance(30)
    assert [i.id for i in cloud.list(owner=OWNER)] == [result.instance_id]
    cloud.outage()
    with pytest.raises(errors.Unavailable):
        cloud.list(owner=OWNER)
    assert cloud.clear() == 1
    cloud.list(owner=OWNER)


def test_a_slow_fault_sleeps_through_the_injected_sleep_on_every_call() -> None:
    clock = ManualClock(1_700_000_000.0)
    sleeps: list[float] = []
    cloud = make_cloud(clock, sleeps)
    cloud.slow(2.5, seconds=60)
    cloud.list(owner=OWNER)
    cloud.provision(make_pod_spec(), request(), owner=OWNER)
    assert sleeps == [2.5, 2.5]
    clock.advance(60)
    cloud.list(owner=OWNER)
    assert sleeps == [2.5, 2.5]


def test_losing_an_instance_makes_it_terminated_or_gone() -> None:
    cloud = make_cloud(ManualClock(1_700_000_000.0))
    kept = cloud.provision(make_pod_spec(), request("kept"), owner=OWNER).instance_id
    vanished = cloud.provision(make_pod_spec(), request("vanished"), owner=OWNER).instance_id
    cloud.lose(kept)
    cloud.lose(claim="vanished", vanish=True)
    instance = cloud.get(kept, owner=OWNER)
    assert instance is not None and instance.state is InstanceState.TERMINATED and instance.preempted
    assert instance.finished_at is not None and "interrupt" in instance.message
    assert cloud.get(vanished, owner=OWNER) is None and [i.id for i in cloud.list(owner=OWNER)] == [kept]
    with pytest.raises(errors.NotFound):
        cloud.lose("fake-99")


@pytest.mark.parametrize(
    ("code", "state", "reason"), [(0, InstanceState.SUCCEEDED, "Completed"), (3, InstanceState.FAILED, "Error")]
)
def test_an_exit_fault_reports_the_code_the_reason_and_when_the_run_started_and_ended(
    code: int, state: InstanceState, reason: str
) -> None:
    clock = ManualClock(1_700_000_000.0)
    cloud = make_cloud(clock)
    instance_id = cloud.provision(make_pod_spec(), request(), owner=OWNER).instance_id
    clock.advance(7)
    cloud.exit(instance_id, code=code)
    clock.advance(1)
    done = cloud.get(instance_id, owner=OWNER)
    assert done is not None and (done.state, done.exit_code, done.exit_reason, done.runs) == (state, code, reason, 1)
    assert done.started_at is not None and done.started_at.timestamp() == clock.now - 8
    assert done.finished_at is not None and done.finished_at.timestamp() == clock.now - 1
    assert cloud.list(owner=OWNER) == [done]


def test_a_scripted_run_length_ends_the_workload_on_its_own_at_the_scripted_time() -> None:
    clock = ManualClock(1_700_000_000.0)
    cloud = make_cloud(clock, workload={"run_seconds": 5, "exit_code": 2})
    result = cloud.provision(make_pod_spec(), request(), owner=OWNER)
    clock.advance(4.9)
    assert state_of(cloud, result.instance_id) is InstanceState.RUNNING
    clock.advance(3)
    instance = cloud.get(result.instance_id, owner=OWNER)
    assert instance is not None and (instance.state, instance.exit_code) == (InstanceState.FAILED, 2)
    assert instance.exit_reason == "Error" and instance.started_at is not None and instance.finished_at is not None
    assert (instance.finished_at - instance.started_at).total_seconds() == 5


def test_a_terminated_instance_is_terminating_for_the_delay_then_terminated_for_the_retention_then_gone() -> None:
    clock = ManualClock(1_700_000_000.0)
    cloud = make_cloud(clock, termination_delay=5, retention_seconds=100)
    result = cloud.provision(make_pod_spec(), request(), owner=OWNER)
    cloud.terminate(result.instance_id, owner=OWNER)
    assert state_of(cloud, result.instance_id) is InstanceState.TERMINATING
    clock.advance(5)
    assert state_of(cloud, result.instance_id) is InstanceState.TERMINATED
    assert [i.state for i in cloud.list(owner=OWNER)] == [InstanceState.TERMINATED]
    cloud.terminate(result.instance_id, owner=OWNER)  # idempotent: the retention does not restart
    clock.advance(99.9)
    assert state_of(cloud, result.instance_id) is InstanceState.TERMINATED
    clock.advance(0.1)
    assert cloud.get(result.instance_id, owner=OWNER) is None and cloud.list(owner=OWNER) == []
    cloud.terminate(result.instance_id, owner=OWNER)


def test_list_lag_hides_fresh_instances_from_list_but_not_from_get() -> None:
    clock = ManualClock(1_700_000_000.0)
    cloud = make_cloud(clock, list_lag=3)
    result = cloud.provision(make_pod_spec(), request(), owner=OWNER)
    assert cloud.list(owner=OWNER) == [] and cloud.get(result.instance_id, owner=OWNER) is not None
    clock.advance(3)
    assert [i.id for i in cloud.list(owner=OWNER)] == [result.instance_id]


def test_offerings_report_prices_and_availability() -> None:
    cloud = make_cloud(ManualClock(1_700_000_000.0))
    cloud.provision(make_pod_spec(**H100), request("a", tier=Tier.SPOT, region="us-east-1"), owner=OWNER)
    cloud.refuse("capacity", tier="OnDemand", accelerator="cpu")
    offerings = {(o.accelerator, o.tier, o.region): o for o in cloud.offerings()}
    assert offerings[(None, Tier.ON_DEMAND, "us-east-1")].hourly_price == 0.1
    assert not offerings[(None, Tier.ON_DEMAND, "us-east-1")].available
    assert not offerings[("h100", Tier.SPOT, "us-east-1")].available
    assert offerings[("h100", Tier.SPOT, "us-west-2")].available


@pytest.mark.parametrize(
    ("reason", "error"), [("invalid", errors.InvalidRequest), ("unsupported", errors.NotSupported)]
)
def test_an_invalid_or_unsupported_refusal_does_not_sell_the_offering_out(
    reason: str, error: type[errors.ProviderError]
) -> None:
    """The shape cannot be served as asked, which is not "sold out": offerings still show it
    available (as a cloud's catalog does), while a capacity refusal of the same shape does not."""
    cloud = make_cloud(ManualClock(1_700_000_000.0))
    cloud.refuse(reason, accelerator="h100", tier="Spot", region="us-east-1")
    with pytest.raises(error):
        cloud.provision(make_pod_spec(**H100), request("a", tier=Tier.SPOT, region="us-east-1"), owner=OWNER)
    assert all(o.available for o in cloud.offerings())
    cloud.refuse("capacity", accelerator="h100", tier="Spot", region="us-east-1")
    sold_out = [(o.accelerator, o.tier, o.region) for o in cloud.offerings() if not o.available]
    assert sold_out == [("h100", Tier.SPOT, "us-east-1")]
    with pytest.raises(error):  # the first matching fault still answers the provision
        cloud.provision(make_pod_spec(**H100), request("a", tier=Tier.SPOT, region="us-east-1"), owner=OWNER)


def test_the_call_log_records_calls_and_outcomes_without_env_values() -> None:
    cloud = make_cloud(ManualClock(1_700_000_000.0))
    cloud.provision(make_pod_spec(), request("a"), owner=OWNER)
    cloud.refuse("capacity")
    with pytest.raises(errors.NoCapacity):
        cloud.provision(make_pod_spec(), request("b"), owner=OWNER)
    provisions = cloud.call_log("provision")
    assert [c.outcome.split()[0] for c in provisions] == ["ok", "NoCapacity:"]
    assert "claim=a" in provisions[0].args and "env_keys=1" in provisions[0].args
    assert all("hunter2" not in f"{c}" for c in cloud.call_log())
    cloud.reset()
    assert cloud.call_log() == [] and cloud.faults() == []


def test_malformed_faults_are_value_errors() -> None:
    cloud = make_cloud(ManualClock(1_700_000_000.0))
    malformed: list[dict[str, Any]] = [
        {"kind": "melt"},
        {"kind": "refuse", "reason": "mood"},
        {"kind": "lose"},
        {"kind": "hide"},
        {"kind": "hide", "instance": "fake-1", "count": 0},
        {"kind": "slow", "delay": 0},
    ]
    for bad in malformed:
        with pytest.raises(ValueError):
            cloud.inject(bad)
    with pytest.raises(errors.NotFound):
        cloud.clear("f-404")


def test_a_snapshot_restores_instances_faults_and_counters() -> None:
    clock = ManualClock(1_700_000_000.0)
    cloud = make_cloud(clock)
    first = cloud.provision(make_pod_spec(**H100), request("a", tier=Tier.SPOT, region="us-east-1"), owner=OWNER)
    cloud.refuse("quota", region="us-west-2")
    copy = make_cloud(clock)
    copy.restore(cloud.snapshot())
    assert copy.get(first.instance_id, owner=OWNER) == cloud.get(first.instance_id, owner=OWNER)
    assert copy.faults() == cloud.faults()
    assert copy.provision(make_pod_spec(), request("b"), owner=OWNER).instance_id == InstanceId("fake-2")
    with pytest.raises(ValueError):
        copy.restore({"version": 99})
