"""An instance queued past its pool's provisioning timeout is given up (vnode.phases.giveup): a Runner
on the embedded cluster (over HTTP) and the fake cloud, whose H100 Spot offering takes an hour
to find capacity (`provisioning_delay`: PROVISIONING all along), and a Handler on a hand-moved
clock for the ten-minute timeout."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from kube import names
from kube.client import Kube, path_for
from providers.base import BlockBreadth, InstanceId, InstanceState, ProvisionRequest, Tier
from providers.claim import claim_name
from providers.egress import OPEN, Egress
from providers.fake import FakeProvider
from providers.podspec import pod_spec_from_dict
from tests.support.clock import ManualClock
from tests.support.factories import make_pod
from tests.support.pods import get_pod, phase_of
from tests.support.polling import wait_for
from tests.support.rigs.giveup import RecordingBlocklister, events_for, spot_pod
from tests.support.rigs.offline import KeptEvents, KeptPatches, offline_handler
from vnode.runner import Runner

QUEUED = {
    "poll_interval": 0.2,
    "offerings": [
        {"accelerator": None, "gpu_count": 0, "tier": "OnDemand", "region": "us-east-1", "hourly_price": 0.1},
        {
            "accelerator": "h100",
            "gpu_count": 8,
            "tier": "Spot",
            "region": "us-east-1",
            "hourly_price": 34.41,
            "provisioning_delay": 3600,  # no capacity: the provider queues it
        },
    ],
}


def instance_of(kube: Kube, name: str) -> str:
    def recorded() -> str | None:
        annotations = ((get_pod(kube, name) or {}).get("metadata") or {}).get("annotations") or {}
        return annotations.get(names.INSTANCE_ID_ANNOTATION)

    return str(wait_for(recorded, what=f"{name} has an instance"))


class Timeouts:
    """The PoolPolicies protocol: every pool's provisioning timeout is `seconds` (None: none)."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.asked: list[str | None] = []

    def egress_of(self, pool: str | None) -> Egress:
        return OPEN

    def provisioning_timeout_of(self, pool: str | None) -> float | None:
        self.asked.append(pool)
        return None if pool is None else self.seconds

    def replaces_on_rebalance(self, pool: str | None) -> bool:
        return False


def plain_pod(name: str) -> dict[str, Any]:
    """A CPU Pod of pool `train` (the OnDemand offering starts at once)."""
    return make_pod(name, "gpu", labels={names.POOL_LABEL: "train"})


def test_an_instance_queued_past_the_timeout_is_terminated_blocked_and_the_pod_fails(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name, "scenario": QUEUED})
    blocks = RecordingBlocklister()
    start_runner(provider, blocklister=blocks, pools=Timeouts(0.5))
    kube.create(path_for("pods", namespace="default"), spot_pod("queued", restartPolicy="Always"))
    instance = InstanceId(instance_of(kube, "queued"))

    wait_for(lambda: phase_of(kube, "queued") == "Failed", what="the queued Pod fails")
    pod = get_pod(kube, "queued") or {}
    assert pod["status"]["reason"] == names.REASON_QUEUED_TOO_LONG
    assert "0.5s" in pod["status"]["message"] and instance in pod["status"]["message"]
    assert "running" not in pod["status"]["containerStatuses"][0]["state"]  # it never ran (I9)
    warnings = [e for e in events_for(kube, "queued") if e["reason"] == names.EVENT_QUEUED_TOO_LONG]
    assert warnings and warnings[0]["type"] == "Warning" and "0.5s" in warnings[0]["message"]

    def terminated() -> bool:
        found = provider.get(instance)
        return found is None or found.state is InstanceState.TERMINATED

    wait_for(terminated, what="the fake shows the queued instance terminated")
    assert [c.args.split()[-1] for c in provider.cloud.call_log("terminate")] == [f"id={instance}"]
    ((who, scope, pool),) = blocks.records
    assert (who, pool) == ("gpu", "train")
    assert (scope.breadth, scope.tier, scope.accelerator, scope.region) == (
        BlockBreadth.OFFERING,
        Tier.SPOT,
        "h100",
        "us-east-1",
    )
    assert scope.reason.startswith("QueuedTooLong: ") and "0.5s" in scope.reason
    assert len(provider.cloud.call_log("provision")) == 1  # placement's replacement goes elsewhere


@pytest.mark.parametrize("pools", [None, Timeouts(None)], ids=["no-pools", "no-limit"])
def test_no_timeout_leaves_a_queued_instance_alone(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str, pools: Timeouts | None
) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name, "scenario": QUEUED})
    blocks = RecordingBlocklister()
    start_runner(provider, blocklister=blocks, pools=pools)
    kube.create(path_for("pods", namespace="default"), spot_pod("waits"))
    instance_of(kube, "waits")
    lists = len(provider.cloud.call_log("list"))
    wait_for(lambda: len(provider.cloud.call_log("list")) >= lists + 6, what="six more polls (over a second)")
    assert phase_of(kube, "waits") == "Pending"
    assert provider.cloud.call_log("terminate") == [] and blocks.records == []
    assert pools is None or pools.asked  # it was asked, and said no limit


def test_an_instance_running_before_the_deadline_is_untouched(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name, "scenario": QUEUED})
    blocks = RecordingBlocklister()
    start_runner(provider, blocklister=blocks, pools=Timeouts(0.5))
    kube.create(path_for("pods", namespace="default"), plain_pod("quick"))
    wait_for(lambda: phase_of(kube, "quick") == "Running", what="the Pod runs")
    lists = len(provider.cloud.call_log("list"))
    wait_for(lambda: len(provider.cloud.call_log("list")) >= lists + 6, what="six more polls (past the deadline)")
    assert phase_of(kube, "quick") == "Running"
    assert provider.cloud.call_log("terminate") == [] and blocks.records == []


def test_a_ten_minute_timeout_is_rechecked_at_its_deadline_on_the_handlers_clock(cloud_name: str) -> None:
    """No poll changes anything while it queues: `carry_out` (the pod controller's look)
    says when the deadline is, and at it gives the instance up."""
    clock = ManualClock(1000.0)
    provider = FakeProvider("gpu", {"cloud": cloud_name, "scenario": QUEUED})
    events, blocks, writes = KeptEvents(), RecordingBlocklister(), KeptPatches()
    handler = offline_handler(
        provider, events=events, kube=writes, blocklister=blocks, pools=Timeouts(600.0), monotonic=clock
    )
    pod = spot_pod("slow", restartPolicy="Always")
    pod["metadata"].update(namespace="default", uid=str(uuid.uuid4()))
    claim = claim_name("default", "slow", pod["metadata"]["uid"])
    request = ProvisionRequest(claim=claim, capacity_type=Tier.SPOT, region="us-east-1")
    result = provider.provision(pod_spec_from_dict(pod), request)  # as a restarted manager finds it
    handler.adopt(pod, wait_for(lambda: provider.get(result.instance_id), what="the queued instance"))
    key = "default/slow"
    entry = handler.tracked(key)
    assert entry is not None and entry.instance_id is not None
    assert handler.lifecycle.carry_out(key, pod) == pytest.approx(600.0)  # the pod controller looks again then
    clock.advance(599.0)
    assert handler.lifecycle.carry_out(key, pod) == pytest.approx(1.0)
    assert handler.give_up.deadline(entry) == pytest.approx(1600.0)  # the poll tick queues it from then on too
    clock.advance(1.0)
    assert handler.lifecycle.carry_out(key, pod) is None
    assert entry.desired_status is not None and entry.desired_status["reason"] == names.REASON_QUEUED_TOO_LONG
    assert "600s" in entry.desired_status["message"]
    assert [c.args.split()[-1] for c in provider.cloud.call_log("terminate")] == [f"id={entry.instance_id}"]
    # The Pod reads Failed (its Events told) before its instance is terminated.
    ((path, body),) = [(p, b) for p, b in writes.patches if p.endswith("/status")]
    assert path.endswith("/pods/slow/status") and body["status"]["reason"] == names.REASON_QUEUED_TOO_LONG
    told = [r for _, _, r, _ in events.told]
    assert told[-2:] == [names.EVENT_QUEUED_TOO_LONG, names.EVENT_TERMINATED]
    ((_, scope, pool),) = blocks.records
    assert (scope.breadth, pool) == (BlockBreadth.OFFERING, "train")
