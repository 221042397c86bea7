"""End to end on the devcluster: a provider that answers `InvalidRequest` for the shape is a
refusal like any other. A Deployment's Pod refused so is replaced and the replacement lands on
the next provider; a bare Pod refused so stays Failed with the provider's message.

The rig is tests/support/rigs/placement.py's `stack`: gpu-a (cheap, first in the pool) and gpu-b,
two plain fakes. Each test tells gpu-a's fake cloud to refuse H100 as `invalid` (its
InvalidRequest names the shape). The refusal leaves the offering available in `offerings()`
(the shape cannot be served as asked; it is not sold out), so placement still tries gpu-a."""

from __future__ import annotations

from typing import Any

from devcluster import DevCluster
from kube import names
from kube.client import Kube, path_for
from providers.base import BlockBreadth, Tier
from providers.fake import FakeProvider
from tests.support.polling import wait_for
from tests.support.rigs.placement import Stack, deployment, h100_pod_template, nodepool, pods_of, provider_of

DEPLOYMENTS = path_for("deployments", namespace="default", group="apps", version="v1")
PODS = path_for("pods", namespace="default")


def refuse_h100_as_invalid(provider: FakeProvider) -> str:
    """The message the fake cloud's InvalidRequest carries for the H100 Spot us-east-1 Pod."""
    fault = provider.cloud.refuse("invalid", accelerator="h100")
    return f"InvalidRequest: fake: h100 x8 Spot in us-east-1 cannot be served as asked (fault {fault['id']})"


def provisions(provider: FakeProvider) -> list[str]:
    """The outcome of each provision call the provider's fake cloud answered, oldest first."""
    return [c.outcome for c in provider.cloud.call_log("provision")]


def phase_of(pod: dict[str, Any]) -> str | None:
    return (pod.get("status") or {}).get("phase")


def placement_event_subjects(kube: Kube, prefix: str) -> set[str]:
    """Every Pod placement wrote an Event about (each Pod it placed or held gets one)."""
    items, _ = kube.list(path_for("events", namespace="default"))
    reasons = {names.EVENT_PLACED, names.EVENT_WAITING_FOR_CAPACITY, names.EVENT_NO_CANDIDATE}
    return {
        e["involvedObject"]["name"]
        for e in items
        if e.get("reason") in reasons and e["involvedObject"]["name"].startswith(prefix)
    }


def test_a_deployment_refused_with_invalid_request_converges_on_the_next_provider_with_one_replacement(
    cluster: DevCluster, kube: Kube, stack: Stack
) -> None:
    """The walk is gpu-a Spot, gpu-b Spot, gpu-a OnDemand, gpu-b OnDemand. The refusal blocks the
    one candidate it was made for (gpu-a h100 Spot us-east-1: the vnode's scope carries the tier
    and region placement wrote on the Pod), so the replacement takes the next one. Bound: one Pod
    per gpu-a candidate ahead of gpu-b's first in the walk (here one), plus the Pod that runs: 2.
    Converged means the refused Pod is gone too, not merely that the replacement runs."""
    message = refuse_h100_as_invalid(stack.providers["gpu-a"])
    cluster.apply_manifest(nodepool("shape", providers=["gpu-a", "gpu-b"], capacity_types=["Spot", "OnDemand"]))
    kube.create(DEPLOYMENTS, deployment("invalid", replicas=1, pool="shape"))

    def running() -> list[dict[str, Any]]:
        return [p for p in pods_of(kube, "invalid") if phase_of(p) == "Running"]

    (pod,) = wait_for(running, timeout=20)
    assert provider_of(pod) == "gpu-b"
    assert pod["metadata"]["annotations"][names.CAPACITY_TYPE_ANNOTATION] == "Spot"
    (entry,) = stack.blocklist.entries()
    assert (entry.provider, entry.scope.breadth, entry.scope.accelerator, entry.scope.tier, entry.scope.region) == (
        "gpu-a",
        BlockBreadth.OFFERING,
        "h100",
        Tier.SPOT,
        "us-east-1",
    )
    assert entry.pool == "shape" and entry.reason == message
    created = placement_event_subjects(kube, "invalid-")
    assert len(created) <= 2, created
    assert provisions(stack.providers["gpu-a"]) == [message]
    assert [o.split(" ")[0] for o in provisions(stack.providers["gpu-b"])] == ["ok"]
    # The refused Pod was deleted with its grace period and is bound to gpu-a's Node, so, as under
    # a real kubelet, it lingers (deletionTimestamp set) until gpu-a's vnode removes it; the
    # ReplicaSet does not wait for that, and its replacement can be Running first.
    only = [pod["metadata"]["name"]]
    wait_for(lambda: [p["metadata"]["name"] for p in pods_of(kube, "invalid")] == only, what="the refused Pod gone")


def test_a_bare_pod_refused_with_invalid_request_stays_failed_with_the_providers_message(
    cluster: DevCluster, kube: Kube, stack: Stack
) -> None:
    """No controller owns it, so placement does not delete it: it is the record of the refusal."""
    message = refuse_h100_as_invalid(stack.providers["gpu-a"])
    cluster.apply_manifest(nodepool("shape", providers=["gpu-a", "gpu-b"], capacity_types=["Spot", "OnDemand"]))
    template = h100_pod_template("shape", "bare")
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare-0", **template["metadata"]}}
    kube.create(PODS, {**bare, "spec": template["spec"]})
    path = path_for("pods", namespace="default", name="bare-0")
    failed = wait_for(lambda: (pod := kube.get(path)) and phase_of(pod) == "Failed" and pod, timeout=20)
    status = failed["status"]
    assert status["reason"] == names.REASON_PROVISION_FAILED
    assert status["message"] == message
    assert provider_of(failed) == "gpu-a" and provisions(stack.providers["gpu-a"]) == [message]
    # Once placement's watch has the Failed Pod, its look at it deletes nothing (no owner would
    # replace it) and places it nowhere.
    controller = stack.placement.controller
    wait_for(lambda: phase_of(controller.pods.cache.get("default/bare-0") or {}) == "Failed")
    assert controller.sync("default/bare-0") is None
    assert phase_of(kube.get(path)) == "Failed"
    assert [p["metadata"]["name"] for p in pods_of(kube, "bare")] == ["bare-0"]
    assert provisions(stack.providers["gpu-b"]) == []
