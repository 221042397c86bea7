"""An opted-in Pod created without placement's gate (no webhook registered, as in a cluster where
deploy/webhook was never applied) gets ONE Warning Event `NotGated` from placement, naming the
MutatingWebhookConfiguration and what to do; a Pod gated by hand is placed and never warned.

The end-to-end tests run placement and a fake provider's node on the embedded API server with NO
webhook registered (the rig's `stack` registers one; `bare_stack` below does not)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from devcluster import DevCluster
from kube import names, observe
from kube.client import Kube, path_for
from placement import notgated
from placement.blocklist import Blocklist
from placement.wiring import Placement
from providers.fake import FakeProvider
from tests.support.factories import make_pod
from tests.support.fixtures import ROOT
from tests.support.polling import wait_for
from tests.support.rigs.placement import h100_pod_template, h100_scenario, nodepool, start_nodes, stop_nodes

PODS = path_for("pods", namespace="default")
GATE = {"name": names.PLACEMENT_GATE}
TOLERATION = {"key": names.PROVIDER_KEY, "operator": "Exists", "effect": "NoSchedule"}
OPTED_IN = {names.ENABLED_LABEL: "true", names.POOL_LABEL: "train"}


class Decisions(observe.NullObserver):
    """An observer that keeps placement's decision outcomes (the metric's label values)."""

    def __init__(self) -> None:
        self.outcomes: list[str] = []

    def placement_decided(self, outcome: str) -> None:
        self.outcomes.append(outcome)


@pytest.fixture
def decisions() -> Iterator[Decisions]:
    recorded = Decisions()
    observe.install(recorded)
    yield recorded
    observe.install(None)


@pytest.fixture
def bare_stack(cluster: DevCluster, decisions: Decisions) -> Iterator[Placement]:
    """Placement and gpu-a's node on a cluster with the NodePool CRD and NO webhook."""
    cluster.load_manifests((ROOT / "deploy/crds/nodepool.yaml").read_text())
    provider = FakeProvider("gpu-a", {"cloud": f"gpu-a-{uuid.uuid4().hex[:8]}", "scenario": h100_scenario("gpu-a")})
    nodes = start_nodes(cluster, {"gpu-a": provider}, Blocklist())
    assert nodes.placement is not None
    yield nodes.placement
    stop_nodes(nodes)


def opted_in_pod(name: str, **spec: Any) -> dict[str, Any]:
    template = h100_pod_template("train", name)
    metadata = {"name": name, **template["metadata"]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {**template["spec"], **spec}}


def not_gated_events(kube: Kube, pod: str) -> list[dict[str, Any]]:
    items, _ = kube.list(path_for("events", namespace="default"))
    return [e for e in items if e.get("reason") == names.EVENT_NOT_GATED and e["involvedObject"]["name"] == pod]


def test_an_ungated_opted_in_pod_gets_one_warning_naming_the_webhook(
    cluster: DevCluster, kube: Kube, bare_stack: Placement, decisions: Decisions
) -> None:
    """One Event, however many passes placement makes over the Pod (each label change is one),
    and one `not_gated` decision for the metric."""
    cluster.apply_manifest(nodepool("train", providers=["gpu-a"], capacity_types=["Spot"]))
    kube.create(PODS, opted_in_pod("ungated"))
    (event,) = wait_for(lambda: not_gated_events(kube, "ungated"), timeout=20)
    assert event["type"] == "Warning" and event["source"]["component"] == "nebula-placement"
    message = event["message"]
    assert f"MutatingWebhookConfiguration {notgated.WEBHOOK_CONFIGURATION} is not registered" in message
    assert "kubectl apply -k deploy/webhook" in message and names.PLACEMENT_GATE in message
    controller = bare_stack.controller
    path = path_for("pods", namespace="default", name="ungated")
    for touch in ("1", "2", "3"):
        kube.patch(path, {"metadata": {"labels": {"touched": touch}}})
        wait_for(lambda t=touch: labels_of(controller.pods.cache.get("default/ungated")).get("touched") == t)
        assert controller.sync("default/ungated") is None  # a pass of its own, besides the queue's
    bare_stack.events.flush()
    (event,) = not_gated_events(kube, "ungated")
    assert event["count"] == 1
    assert decisions.outcomes.count("not_gated") == 1
    pod = kube.get(path)
    assert not pod["spec"].get("nodeName") and not pod["spec"].get("nodeSelector")  # placement left it alone


def test_a_pod_gated_by_hand_is_placed_and_never_warned(
    cluster: DevCluster, kube: Kube, bare_stack: Placement, decisions: Decisions
) -> None:
    """The gate and the toleration written by hand do what the webhook does: placed, bound,
    and no NotGated Event (not even while it is ungated by placement and not yet bound)."""
    cluster.apply_manifest(nodepool("train", providers=["gpu-a"], capacity_types=["Spot"]))
    kube.create(PODS, opted_in_pod("by-hand", schedulingGates=[GATE], tolerations=[TOLERATION]))
    path = path_for("pods", namespace="default", name="by-hand")
    bound = wait_for(lambda: (pod := kube.get(path))["spec"].get("nodeName") and pod, timeout=20)
    assert bound["spec"]["nodeName"] == names.node_name("gpu-a")
    wait_for(lambda: bound_in_cache(bare_stack))  # placement's watch saw it bound: its passes are over
    assert bare_stack.controller.sync("default/by-hand") is None
    bare_stack.events.flush()
    assert not_gated_events(kube, "by-hand") == []
    assert "not_gated" not in decisions.outcomes and "placed" in decisions.outcomes


def labels_of(pod: dict[str, Any] | None) -> dict[str, str]:
    return dict(((pod or {}).get("metadata") or {}).get("labels") or {})


def bound_in_cache(placement: Placement) -> bool:
    return bool(((placement.controller.pods.cache.get("default/by-hand") or {}).get("spec") or {}).get("nodeName"))


@pytest.mark.parametrize(
    ("pod", "warned"),
    [
        (make_pod("fresh", labels=OPTED_IN), True),
        (make_pod("other-gate", labels=OPTED_IN, schedulingGates=[{"name": "example.com/hold"}]), True),
        (make_pod("gated", labels=OPTED_IN, schedulingGates=[GATE]), False),
        (make_pod("not-opted-in", labels={names.ENABLED_LABEL: "yes"}), False),
        (make_pod("bound", labels=OPTED_IN, nodeName="node-1"), False),
        (make_pod("placed", labels=OPTED_IN, annotations={names.POOL_ANNOTATION: "train"}), False),
        (make_pod("done", labels=OPTED_IN, status={"phase": "Succeeded"}), False),
        (make_pod("failed", labels=OPTED_IN, status={"phase": "Failed"}), False),
        (make_pod("deleting", labels=OPTED_IN, metadata={"deletionTimestamp": "2026-01-01T00:00:00Z"}), False),
    ],
    ids=lambda value: value["metadata"]["name"] if isinstance(value, dict) else str(value),
)
def test_only_an_unbound_unplaced_live_opted_in_pod_without_our_gate_is_not_gated(
    pod: dict[str, Any], warned: bool
) -> None:
    assert notgated.is_not_gated(pod) is warned


def test_the_warning_names_the_webhook_of_deploy_webhook_and_the_namespaces_it_never_sees() -> None:
    """The names in the message are the manifest's own: its metadata.name and namespaceSelector."""
    manifest = yaml.safe_load((ROOT / "deploy/webhook/mutatingwebhookconfiguration.yaml").read_text())
    assert manifest["metadata"]["name"] == notgated.WEBHOOK_CONFIGURATION
    (selector,) = manifest["webhooks"][0]["namespaceSelector"]["matchExpressions"]
    assert (selector["operator"], set(selector["values"])) == ("NotIn", notgated.UNSENT_NAMESPACES)
    in_system = notgated.warning(make_pod("p", namespace="kube-system", labels=OPTED_IN))
    assert "does not gate Pods in namespace kube-system" in in_system


def test_the_register_warns_once_per_pod_and_again_for_a_new_pod_of_the_same_name() -> None:
    register = notgated.NotGatedRegister()
    assert register.due("default/a", "u-1")
    assert not register.due("default/a", "u-1")
    assert register.due("default/a", "u-2")  # deleted and created again: a new Pod
    register.forget("default/a")
    assert register.due("default/a", "u-2")
