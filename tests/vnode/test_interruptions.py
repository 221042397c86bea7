"""Interruptions noticed ahead (vnode/phases/notices.py, vnode/phases/lifecycle.py) on the
fake cloud, whose `interrupt` fault gives notice on its wire and takes the instance at the
notice's deadline: the Pod gets `DisruptionTarget` at once while its containers still stop,
is stopped within the smaller of its grace and the notice, ends `Failed` with the notice's
reason, its instance terminated and its offering blocked as an interruption; the notice is
acknowledged only once it is recorded on the Pod; a rebalance recommendation is an Event only;
a manager restarted in the middle resumes the stop from the Pod's record."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kube import names
from kube.client import Kube, path_for
from providers.base import BlockBreadth, Tier
from providers.fake import FakeProvider
from tests.support.pods import get_pod, phase_of
from tests.support.polling import wait_for
from tests.support.rigs.giveup import RecordingBlocklister, events_for, spot_pod
from vnode.runner import Runner

PODS = path_for("pods", namespace="default")


def scenario(main: dict[str, Any]) -> dict[str, Any]:
    """The fake's scenario with its `main` containers scripted (docs/providers/fake.md)."""
    return {"workload": {"containers": {"main": main}}}


def condition(pod: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), None)


def running_instance(kube: Kube, name: str) -> str:
    wait_for(lambda: phase_of(kube, name) == "Running", what=f"{name} runs")
    pod = get_pod(kube, name) or {}
    return str(pod["metadata"]["annotations"][names.INSTANCE_ID_ANNOTATION])


def terminated_of(pod: dict[str, Any] | None) -> dict[str, Any]:
    (status,) = ((pod or {}).get("status") or {}).get("containerStatuses") or [{}]
    return dict((status.get("state") or {}).get("terminated") or {})


class RebalancePools:
    """The PoolPolicies protocol: pool `train` asks `interruption.proactive`; the rest do not."""

    def egress_of(self, pool: str | None) -> Any:
        from providers.egress import OPEN

        return OPEN

    def provisioning_timeout_of(self, pool: str | None) -> float | None:
        return None

    def replaces_on_rebalance(self, pool: str | None) -> bool:
        return pool == "train"


def test_a_spot_notice_marks_the_pod_at_once_stops_it_within_the_notice_and_ends_it_failed_spot_interrupted(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = FakeProvider(
        "gpu", {"cloud": cloud_name, "scenario": scenario({"sigterm": {"seconds": 2, "exit_code": 143}})}
    )
    blocks = RecordingBlocklister()
    start_runner(provider, blocklister=blocks)
    kube.create(PODS, spot_pod("spot", terminationGracePeriodSeconds=60))
    instance = running_instance(kube, "spot")
    provider.cloud.interrupt(instance, notice=30)

    marked = wait_for(lambda: condition(get_pod(kube, "spot"), "DisruptionTarget"), what="DisruptionTarget")
    pod = get_pod(kube, "spot") or {}
    assert (marked["status"], marked["reason"]) == ("True", "TerminationByKubelet")
    assert "gave notice of a spot interruption" in marked["message"] and instance in marked["message"]
    assert pod["status"]["phase"] == "Running"  # its container checkpoints: not terminal yet, as a kubelet's
    record = json.loads(pod["metadata"]["annotations"][names.INTERRUPTION_ANNOTATION])
    assert (record["kind"], record["instance"], record["provider"]) == ("SpotInterruption", instance, "gpu")
    assert "receipt" not in record

    wait_for(lambda: phase_of(kube, "spot") == "Failed", what="the interrupted Pod ends Failed")
    pod = get_pod(kube, "spot") or {}
    assert pod["status"]["reason"] == names.REASON_SPOT_INTERRUPTED
    assert pod["status"]["message"].startswith("Pod was terminated in response to imminent node shutdown.")
    assert (condition(pod, "DisruptionTarget") or {}).get("status") == "True"
    assert terminated_of(pod).get("exitCode") == 143  # the workload's own end after its checkpoint, not a kill
    wait_for(lambda: provider.cloud.call_log("terminate"), what="the instance terminated")
    warnings = wait_for(
        lambda: [e for e in events_for(kube, "spot") if e["reason"] == names.REASON_SPOT_INTERRUPTED],
        what="the SpotInterrupted Event",
    )
    assert warnings[0]["type"] == "Warning" and instance in warnings[0]["message"]
    ((who, scope, pool),) = blocks.records
    assert (who, pool, blocks.interrupted) == ("gpu", "train", [True])
    assert (scope.breadth, scope.tier, scope.accelerator, scope.region) == (
        BlockBreadth.OFFERING, Tier.SPOT, "h100", "us-east-1",
    )  # fmt: skip
    wait_for(lambda: provider.cloud.call_log("ack"), what="the notice acknowledged once recorded")
    assert len(provider.cloud.call_log("provision")) == 1  # the owner replaces it, never the vnode
    assert not [e for e in events_for(kube, "spot") if e["reason"] == names.EVENT_PREEMPTED]  # no second story


def test_the_grace_is_cut_to_the_notice_a_workload_that_ignores_sigterm_is_killed_at_the_deadline(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name, "scenario": scenario({"sigterm": "ignore"})})
    start_runner(provider)
    kube.create(PODS, spot_pod("stubborn", terminationGracePeriodSeconds=600))
    provider.cloud.interrupt(running_instance(kube, "stubborn"), notice=2)
    wait_for(
        lambda: phase_of(kube, "stubborn") == "Failed", timeout=20, what="stopped within the 2 s notice, not 600 s"
    )
    pod = get_pod(kube, "stubborn")
    assert (pod or {})["status"]["reason"] == names.REASON_SPOT_INTERRUPTED
    assert terminated_of(pod).get("exitCode") == 137  # SIGKILL at the end of the cut grace


def test_a_rebalance_recommendation_is_an_event_only_unless_the_pool_asks_proactive(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    start_runner(provider, pools=RebalancePools())
    kube.create(PODS, spot_pod("calm", pool="other"))
    kube.create(PODS, spot_pod("proactive"))  # pool `train`
    calm, proactive = running_instance(kube, "calm"), running_instance(kube, "proactive")
    provider.cloud.interrupt(calm, notice_kind="RebalanceRecommendation")
    provider.cloud.interrupt(proactive, notice_kind="RebalanceRecommendation")

    told = wait_for(
        lambda: [e for e in events_for(kube, "calm") if e["reason"] == names.EVENT_REBALANCE_RECOMMENDED],
        what="the RebalanceRecommended Event",
    )
    assert told[0]["type"] == "Normal" and "nothing is stopped" in told[0]["message"]
    wait_for(lambda: phase_of(kube, "proactive") == "Failed", what="the proactive pool's Pod replaced")
    assert (get_pod(kube, "proactive") or {})["status"]["reason"] == names.REASON_REBALANCE_RECOMMENDED
    wait_for(lambda: len(provider.cloud.call_log("ack")) >= 2, what="both notices acknowledged")
    calm_pod = get_pod(kube, "calm")
    assert phase_of(kube, "calm") == "Running" and condition(calm_pod, "DisruptionTarget") is None
    assert names.INTERRUPTION_ANNOTATION not in (calm_pod or {})["metadata"].get("annotations", {})


def test_a_manager_restarted_during_the_stop_resumes_it_from_the_pods_record(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    checkpoint = scenario({"sigterm": {"seconds": 4, "exit_code": 143}})
    first = start_runner(FakeProvider("gpu", {"cloud": cloud_name, "scenario": checkpoint}))
    kube.create(PODS, spot_pod("resumed", terminationGracePeriodSeconds=60))
    instance = running_instance(kube, "resumed")
    first.provider.cloud.interrupt(instance, notice=60)  # type: ignore[attr-defined]
    wait_for(lambda: condition(get_pod(kube, "resumed"), "DisruptionTarget"), what="DisruptionTarget")
    first.stop(timeout=5)  # the manager goes while the container checkpoints

    second = FakeProvider("gpu", {"cloud": cloud_name, "scenario": checkpoint})
    start_runner(second)
    wait_for(lambda: phase_of(kube, "resumed") == "Failed", what="the new manager finishes the stop")
    pod = get_pod(kube, "resumed") or {}
    assert pod["status"]["reason"] == names.REASON_SPOT_INTERRUPTED
    assert terminated_of(pod).get("exitCode") == 143  # the checkpoint finished: nobody killed it early
    wait_for(lambda: second.cloud.call_log("terminate"), what="the instance terminated")
    assert len(second.cloud.call_log("provision")) == 1
