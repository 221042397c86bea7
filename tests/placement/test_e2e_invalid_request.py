"""End to end on the devcluster: a provider that answers `InvalidRequest` for the shape is a
refusal like any other. A Deployment's Pod refused so is replaced and the replacement lands on
the next provider; a bare Pod refused so stays Failed with the provider's message.

gpu-a (cheap, first in the pool) is the fake wrapped by tests/support/invalid_shape.py, whose
`provision` of an H100 Pod raises InvalidRequest; gpu-b is the plain fake."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from devcluster import DevCluster
from kube import names
from kube.client import Kube, path_for
from placement.blocklist import Blocklist
from placement.wiring import start_placement
from providers.base import BlockBreadth, Tier
from providers.fake import FakeProvider
from tests.support.fixtures import ROOT, kube_for
from tests.support.invalid_shape import InvalidShapeProvider
from tests.support.placement import Stack, deployment, h100_pod_template, h100_scenario, nodepool, pods_of, provider_of
from tests.support.polling import wait_for
from tests.support.runners import make_runner
from tests.support.tls import TlsWsgiServer

DEPLOYMENTS = path_for("deployments", namespace="default", group="apps", version="v1")
PODS = path_for("pods", namespace="default")


@pytest.fixture
def invalid_stack(cluster: DevCluster, webhook: TlsWsgiServer) -> Iterator[tuple[Stack, InvalidShapeProvider]]:
    """The placement rig of tests/support/placement.py with gpu-a answering InvalidRequest for H100."""
    cluster.load_manifests((ROOT / "deploy/crds/nodepool.yaml").read_text())
    suffix = uuid.uuid4().hex[:8]
    fakes = {n: FakeProvider(n, {"cloud": f"{n}-{suffix}", "scenario": h100_scenario(n)}) for n in ("gpu-a", "gpu-b")}
    invalid = InvalidShapeProvider(fakes["gpu-a"], accelerator="h100")
    blocklist = Blocklist()
    runners = [make_runner(cluster, p, blocklister=blocklist) for p in (invalid, fakes["gpu-b"])]
    for runner in runners:
        runner.start()
    providers = {"gpu-a": invalid, "gpu-b": fakes["gpu-b"]}
    placement = start_placement(
        providers, kube=kube_for(cluster), watch_kube=kube_for(cluster), blocklist=blocklist, requeue_spread=0.1
    )
    yield Stack(fakes, blocklist, runners, placement), invalid
    placement.stop(timeout=5)
    for runner in runners:
        runner.stop(timeout=5)


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
    cluster: DevCluster, kube: Kube, invalid_stack: tuple[Stack, InvalidShapeProvider]
) -> None:
    """The walk is gpu-a Spot, gpu-b Spot, gpu-a OnDemand, gpu-b OnDemand. The refusal blocks the
    one candidate it was made for (gpu-a h100 Spot us-east-1: the vnode's scope carries the tier
    and region placement wrote on the Pod), so the replacement takes the next one. Bound: one Pod
    per gpu-a candidate ahead of gpu-b's first in the walk (here one), plus the Pod that runs: 2."""
    stack, invalid = invalid_stack
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
    assert entry.pool == "shape" and entry.reason.startswith("InvalidRequest: gpu-a: h100 x8 cannot be launched")
    created = placement_event_subjects(kube, "invalid-")
    assert len(created) <= 2 and invalid.refused == 1, created
    gpu_b_provisions = [c for c in stack.providers["gpu-b"].cloud.call_log() if c.method == "provision"]
    assert len(gpu_b_provisions) == 1
    assert [p["metadata"]["name"] for p in pods_of(kube, "invalid")] == [pod["metadata"]["name"]]


def test_a_bare_pod_refused_with_invalid_request_stays_failed_with_the_providers_message(
    cluster: DevCluster, kube: Kube, invalid_stack: tuple[Stack, InvalidShapeProvider]
) -> None:
    """No controller owns it, so placement does not delete it: it is the record of the refusal."""
    stack, invalid = invalid_stack
    cluster.apply_manifest(nodepool("shape", providers=["gpu-a", "gpu-b"], capacity_types=["Spot", "OnDemand"]))
    template = h100_pod_template("shape", "bare")
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare-0", **template["metadata"]}}
    kube.create(PODS, {**bare, "spec": template["spec"]})
    path = path_for("pods", namespace="default", name="bare-0")
    failed = wait_for(lambda: (pod := kube.get(path)) and phase_of(pod) == "Failed" and pod, timeout=20)
    status = failed["status"]
    assert status["reason"] == names.REASON_PROVISION_FAILED
    assert status["message"] == "InvalidRequest: gpu-a: h100 x8 cannot be launched as Spot in us-east-1"
    assert provider_of(failed) == "gpu-a" and invalid.refused == 1
    # Once placement's watch has the Failed Pod, its look at it deletes nothing (no owner would
    # replace it) and places it nowhere.
    controller = stack.placement.controller
    wait_for(lambda: phase_of(controller.pods.cache.get("default/bare-0") or {}) == "Failed")
    assert controller.sync("default/bare-0") is None
    assert phase_of(kube.get(path)) == "Failed"
    assert [p["metadata"]["name"] for p in pods_of(kube, "bare")] == ["bare-0"]
    assert [c for c in stack.providers["gpu-b"].cloud.call_log() if c.method == "provision"] == []
