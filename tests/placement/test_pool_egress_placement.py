"""End to end on the devcluster: placement skips a provider that cannot enforce its pool's
`spec.egress` (the `Placed` Event names it and why), a pool nobody can enforce waits with
`NoCandidate` saying so, and the vnode sends the pool's policy to the provider in
`ProvisionRequest.egress` (the fake cloud's call log records it)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from devcluster import DevCluster
from kube import names
from kube.client import Kube, path_for
from placement.blocklist import Blocklist
from providers.fake import FakeProvider
from tests.support.factories import make_pod
from tests.support.fixtures import ROOT
from tests.support.polling import wait_for
from tests.support.rigs.placement import (
    events_for,
    h100_pod_template,
    h100_scenario,
    nodepool,
    provider_of,
    start_nodes,
    stop_nodes,
)
from tests.support.servers.tls import TlsWsgiServer

PODS = path_for("pods", namespace="default")


@dataclass
class Rig:
    open_only: FakeProvider  # gpu-a: cheaper, first in every pool, enforces only Open
    sealed: FakeProvider  # gpu-b: declares Open and Blocked


@pytest.fixture
def rig(cluster: DevCluster, webhook: TlsWsgiServer) -> Iterator[Rig]:
    """The `stack` fixture's shape, gpu-b declaring it enforces Blocked egress."""
    cluster.load_manifests((ROOT / "deploy/crds/nodepool.yaml").read_text())
    suffix = uuid.uuid4().hex[:8]
    providers = {
        "gpu-a": FakeProvider("gpu-a", {"cloud": f"gpu-a-{suffix}", "scenario": h100_scenario("gpu-a")}),
        "gpu-b": FakeProvider(
            "gpu-b", {"cloud": f"gpu-b-{suffix}", "scenario": h100_scenario("gpu-b"), "egress": ["Open", "Blocked"]}
        ),
    }
    nodes = start_nodes(cluster, providers, Blocklist())
    yield Rig(providers["gpu-a"], providers["gpu-b"])
    stop_nodes(nodes)


def pool_with(name: str, egress: dict[str, Any]) -> dict[str, Any]:
    obj = nodepool(name, providers=["gpu-a", "gpu-b"], capacity_types=["Spot", "OnDemand"])
    obj["spec"]["egress"] = egress
    return obj


def create_pod(kube: Kube, name: str, pool: str) -> None:
    template = h100_pod_template(pool, name)
    kube.create(PODS, make_pod(name, metadata=template["metadata"], spec=template["spec"]))


def pod(kube: Kube, name: str) -> dict[str, Any]:
    return kube.get(f"{PODS}/{name}")


def running(kube: Kube, name: str) -> bool:
    return (pod(kube, name).get("status") or {}).get("phase") == "Running"


def messages(kube: Kube, reason: str, name: str) -> list[str]:
    return [str(e["message"]) for e in events_for(kube, reason) if e["involvedObject"]["name"] == name]


def provisions(provider: FakeProvider) -> list[str]:
    return [call.args for call in provider.cloud.call_log("provision")]


def test_a_blocked_pool_skips_the_provider_that_cannot_enforce_it_and_the_request_carries_it(
    cluster: DevCluster, kube: Kube, rig: Rig
) -> None:
    cluster.apply_manifest(pool_with("sealed", {"mode": "Blocked"}))
    cluster.apply_manifest(pool_with("plain", {"mode": "Open"}))
    create_pod(kube, "walled", "sealed")
    create_pod(kube, "free", "plain")
    wait_for(lambda: running(kube, "walled") and running(kube, "free"), timeout=20)
    assert provider_of(pod(kube, "walled")) == "gpu-b"
    assert provider_of(pod(kube, "free")) == "gpu-a"  # Ordered: the first provider, which enforces Open

    (placed,) = messages(kube, names.EVENT_PLACED, "walled")
    assert placed.startswith("placed on gpu-b Spot us-east-1 at $20.00/h: first of 2 candidates")
    assert placed.endswith("; skipped gpu-a: cannot enforce egress Blocked")
    (placed_free,) = messages(kube, names.EVENT_PLACED, "free")
    assert "skipped" not in placed_free

    (sealed_call,) = provisions(rig.sealed)
    assert "egress=Blocked" in sealed_call
    (open_call,) = provisions(rig.open_only)
    assert "egress=Open" in open_call


def test_a_pool_no_provider_can_enforce_waits_with_no_candidate_saying_why(
    cluster: DevCluster, kube: Kube, rig: Rig
) -> None:
    cluster.apply_manifest(pool_with("listed", {"mode": "Allowlist", "targets": ["10.0.0.0/8", "pypi.org"]}))
    create_pod(kube, "stuck", "listed")
    (message,) = wait_for(lambda: messages(kube, names.EVENT_NO_CANDIDATE, "stuck"), timeout=20)
    assert message.startswith(
        "no provider in the pool can enforce its spec.egress: gpu-a cannot enforce egress Allowlist, "
        "gpu-b cannot enforce egress Allowlist; next look at "
    )
    gates = [g["name"] for g in pod(kube, "stuck")["spec"].get("schedulingGates") or []]
    assert gates == [names.PLACEMENT_GATE]
    assert provisions(rig.open_only) == provisions(rig.sealed) == []
    status = wait_for(lambda: (kube.get(pool_path("listed")).get("status") or {}).get("conditions"), timeout=20)
    assert [(c["status"], c["reason"]) for c in status] == [("False", "NoCandidates")]


def test_a_pool_with_a_bad_egress_target_is_invalid_naming_the_entry(cluster: DevCluster, kube: Kube, rig: Rig) -> None:
    targets = ["pypi.org", "10.0.0.0/8", "10.0.0.1/8"]
    cluster.apply_manifest(pool_with("typo", {"mode": "Allowlist", "targets": targets}))
    create_pod(kube, "held", "typo")
    (message,) = wait_for(lambda: messages(kube, names.EVENT_POOL_INVALID, "held"), timeout=20)
    assert message.startswith("NodePool 'typo' is invalid: spec.egress.targets[2]: '10.0.0.1/8' is not a CIDR")
    assert provisions(rig.open_only) == provisions(rig.sealed) == []


def pool_path(name: str) -> str:
    return path_for(names.NODEPOOL_PLURAL, name=name, group=names.NODEPOOL_GROUP, version=names.NODEPOOL_VERSION)
