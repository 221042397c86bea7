"""A spot reclaim gives the Pod up (vnode.phases.giveup): a Runner on the embedded cluster (over
HTTP) and the fake cloud, whose `lose` control is a spot interruption (TERMINATED, preempted)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kube import names
from kube.client import Kube, path_for
from providers.base import BlockBreadth, Tier
from providers.fake import FakeProvider
from tests.support.pods import get_pod, phase_of
from tests.support.polling import wait_for
from tests.support.rigs.giveup import RecordingBlocklister, events_for, spot_pod
from vnode.runner import Runner


def instance_of(kube: Kube, name: str) -> str:
    return str(
        wait_for(
            lambda: ((get_pod(kube, name) or {}).get("metadata") or {})
            .get("annotations", {})
            .get(names.INSTANCE_ID_ANNOTATION),
            what=f"{name} has an instance",
        )
    )


@pytest.mark.parametrize("policy", ["Always", "Never"])
def test_a_preempted_spot_pod_fails_preempted_and_blocks_its_offering_once_as_an_interruption(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str, policy: str
) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    blocks = RecordingBlocklister()
    start_runner(provider, blocklister=blocks)
    kube.create(path_for("pods", namespace="default"), spot_pod("spot", restartPolicy=policy))
    wait_for(lambda: phase_of(kube, "spot") == "Running", what="the Spot Pod runs")
    instance = instance_of(kube, "spot")
    provider.cloud.lose(instance)  # a spot interruption: listed TERMINATED, preempted

    wait_for(lambda: phase_of(kube, "spot") == "Failed", what="the preempted Pod fails")
    pod = get_pod(kube, "spot") or {}
    assert pod["status"]["reason"] == names.REASON_PREEMPTED
    assert instance in pod["status"]["message"] and "reclaimed" in pod["status"]["message"]
    (container,) = pod["status"]["containerStatuses"]
    terminated = container["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (137, "Error")  # as a kubelet reports a killed one
    assert terminated["finishedAt"] and container["ready"] is False
    # The recorder writes Events on its own thread, after the status write the wait above saw.
    warnings = wait_for(
        lambda: [e for e in events_for(kube, "spot") if e["reason"] == names.EVENT_PREEMPTED],
        what="the Preempted Event",
    )
    assert warnings and warnings[0]["type"] == "Warning" and instance in warnings[0]["message"]

    lists = len(provider.cloud.call_log("list"))
    wait_for(lambda: len(provider.cloud.call_log("list")) >= lists + 4, what="four more polls")
    ((who, scope, pool),) = blocks.records  # once per preemption, not on every poll
    assert (who, pool) == ("gpu", "train")
    # The candidate it ran on (accelerator, tier, region), for the pool's interruption TTL.
    assert (scope.provider, scope.breadth, scope.tier) == ("gpu", BlockBreadth.OFFERING, Tier.SPOT)
    assert (scope.accelerator, scope.region) == ("h100", "us-east-1")
    assert blocks.interrupted == [True]
    assert scope.reason.startswith("Preempted: ") and instance in scope.reason
    assert len(provider.cloud.call_log("provision")) == 1  # whatever the policy: placement's replacement restarts it
    assert phase_of(kube, "spot") == "Failed"


def test_a_preempted_pod_without_a_blocklister_still_fails_preempted(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    start_runner(provider)
    kube.create(path_for("pods", namespace="default"), spot_pod("alone"))
    wait_for(lambda: phase_of(kube, "alone") == "Running", what="the Spot Pod runs")
    provider.cloud.lose(instance_of(kube, "alone"))
    wait_for(lambda: (get_pod(kube, "alone") or {}).get("status", {}).get("reason") == names.REASON_PREEMPTED)
    assert phase_of(kube, "alone") == "Failed"
