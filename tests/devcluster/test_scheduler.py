"""The scheduler's pure decisions: gates, nodeSelector, affinity, taints/tolerations, load, messages."""

from __future__ import annotations

from typing import Any

import pytest

from devcluster import scheduler
from tests.support.factories import make_node, make_pod


def node(
    name: str,
    *,
    ready: str = "True",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    """A Node as the scheduler weighs it: its Ready condition after another one, its taints, cordoned or not."""
    spec: dict[str, Any] = {"taints": taints or []}
    if unschedulable:
        spec["unschedulable"] = True
    conditions = [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": ready}]
    return make_node(name, labels=labels, status={"conditions": conditions}, **spec)


_GPU = {"key": "nebula.io/provider", "value": "gpu-a", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        (make_pod(), True),
        (make_pod(schedulingGates=[]), True),
        (make_pod(nodeName="n1"), False),
        (make_pod(schedulingGates=[{"name": "nebula.io/placement"}]), False),
        ({**make_pod(), "metadata": {"name": "p1", "deletionTimestamp": "2024-01-01T00:00:00Z"}}, False),
        ({**make_pod(), "status": {"phase": "Succeeded"}}, False),
        ({**make_pod(), "status": {"phase": "Failed"}}, False),
        ({**make_pod(), "status": {"phase": "Pending"}}, True),
    ],
)
def test_schedulable_requires_unbound_ungated_live_pods(pod: dict[str, Any], expected: bool) -> None:
    assert scheduler.schedulable(pod) is expected


@pytest.mark.parametrize(
    ("pod", "nodes", "expected"),
    [
        pytest.param(make_pod(), [node("b"), node("a")], "a", id="first-by-name"),
        pytest.param(make_pod(), [], None, id="no-nodes"),
        pytest.param(make_pod(), [node("a", ready="False"), node("b")], "b", id="not-ready-skipped"),
        pytest.param(make_pod(), [node("a", ready="Unknown")], None, id="unknown-ready"),
        pytest.param(make_pod(), [{"metadata": {"name": "bare"}}], None, id="no-conditions-not-ready"),
        pytest.param(make_pod(), [node("a", unschedulable=True), node("b")], "b", id="cordoned-skipped"),
        pytest.param(
            make_pod(tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]),
            [node("a", unschedulable=True)],
            "a",
            id="cordon-tolerated",
        ),
        pytest.param(
            make_pod(nodeSelector={"pool": "gpu"}),
            [node("a", labels={"pool": "cpu"}), node("b", labels={"pool": "gpu", "x": "y"})],
            "b",
            id="node-selector",
        ),
        pytest.param(make_pod(nodeSelector={"pool": "gpu"}), [node("a")], None, id="node-selector-missing-label"),
        pytest.param(make_pod(), [node("a", taints=[_GPU])], None, id="untolerated-taint"),
        pytest.param(
            make_pod(), [node("a", taints=[{**_GPU, "effect": "PreferNoSchedule"}])], "a", id="prefer-no-schedule"
        ),
        pytest.param(make_pod(), [node("a", taints=[{**_GPU, "effect": "NoExecute"}])], None, id="no-execute"),
        pytest.param(
            make_pod(tolerations=[{"key": "nebula.io/provider", "operator": "Equal", "value": "gpu-a"}]),
            [node("a", taints=[_GPU])],
            "a",
            id="equal-toleration",
        ),
        pytest.param(
            make_pod(tolerations=[{"key": "nebula.io/provider", "value": "gpu-a"}]),
            [node("a", taints=[_GPU])],
            "a",
            id="empty-operator-means-equal",
        ),
        pytest.param(
            make_pod(tolerations=[{"key": "nebula.io/provider", "operator": "Equal", "value": "gpu-b"}]),
            [node("a", taints=[_GPU])],
            None,
            id="equal-wrong-value",
        ),
        pytest.param(
            make_pod(tolerations=[{"key": "nebula.io/provider", "operator": "Exists"}]),
            [node("a", taints=[_GPU, {**_GPU, "value": "other", "effect": "NoExecute"}])],
            "a",
            id="key-only-exists-tolerates-every-value",
        ),
        pytest.param(
            make_pod(tolerations=[{"operator": "Exists"}]),
            [node("a", taints=[_GPU, {"key": "other", "effect": "NoExecute"}])],
            "a",
            id="empty-key-exists-tolerates-all",
        ),
        pytest.param(
            make_pod(tolerations=[{"key": "nebula.io/provider", "operator": "Exists", "effect": "NoExecute"}]),
            [node("a", taints=[_GPU])],
            None,
            id="effect-must-match",
        ),
        pytest.param(
            make_pod(tolerations=[{"key": "nebula.io/provider", "operator": "Exists", "effect": "NoSchedule"}]),
            [node("a", taints=[_GPU])],
            "a",
            id="effect-matches",
        ),
    ],
)
def test_pick_node_applies_readiness_cordon_selector_and_taints(
    pod: dict[str, Any], nodes: list[dict[str, Any]], expected: str | None
) -> None:
    assert scheduler.pick_node(pod, nodes) == expected


def _affinity(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions} for expressions in terms]
            }
        }
    }


_ZONE_NODES = [
    node("a", labels={"zone": "z1", "gpu": "true", "cores": "4"}),
    node("b", labels={"zone": "z2", "cores": "16"}),
]


@pytest.mark.parametrize(
    ("affinity", "expected"),
    [
        (_affinity([{"key": "zone", "operator": "In", "values": ["z2", "z3"]}]), "b"),
        (_affinity([{"key": "zone", "operator": "NotIn", "values": ["z1"]}]), "b"),
        (_affinity([{"key": "gpu", "operator": "Exists"}]), "a"),
        (_affinity([{"key": "gpu", "operator": "DoesNotExist"}]), "b"),
        (_affinity([{"key": "cores", "operator": "Gt", "values": ["8"]}]), "b"),
        (_affinity([{"key": "cores", "operator": "Lt", "values": ["8"]}]), "a"),
        (_affinity([{"key": "zone", "operator": "In", "values": ["z9"]}]), None),
        (
            _affinity(
                [{"key": "zone", "operator": "In", "values": ["z1"]}, {"key": "gpu", "operator": "DoesNotExist"}]
            ),
            None,
        ),
        (_affinity([{"key": "zone", "operator": "In", "values": ["z9"]}], [{"key": "gpu", "operator": "Exists"}]), "a"),
        (_affinity([]), None),
        ({"nodeAffinity": {}}, "a"),
    ],
)
def test_required_node_affinity_expressions(affinity: dict[str, Any], expected: str | None) -> None:
    assert scheduler.pick_node(make_pod(affinity=affinity), _ZONE_NODES) == expected


def test_match_fields_select_by_node_name() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}]
            }
        }
    }
    assert scheduler.pick_node(make_pod(affinity=affinity), _ZONE_NODES) == "b"


@pytest.mark.parametrize(
    ("counts", "expected"),
    [({"a": 3, "b": 1, "c": 1}, "b"), ({"a": 0}, "a"), ({}, "a"), ({"a": 2, "b": 2, "c": 5}, "a")],
)
def test_pick_node_prefers_the_least_loaded_then_the_name(counts: dict[str, int], expected: str) -> None:
    nodes = [node("c"), node("b"), node("a")]
    assert scheduler.pick_node(make_pod(), nodes, pod_counts=counts) == expected


def test_explain_gives_a_kube_scheduler_histogram() -> None:
    nodes = [node("a", labels={"pool": "cpu"}), node("b", taints=[_GPU]), node("c", taints=[_GPU])]
    pod = make_pod(nodeSelector={"pool": "gpu"})
    assert scheduler.explain(pod, nodes) == (
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "2 node(s) had untolerated taint {nebula.io/provider: gpu-a}."
    )


def test_explain_names_not_ready_and_cordoned_nodes_and_the_empty_cluster() -> None:
    nodes = [
        node("a", ready="False"),
        node("b", unschedulable=True),
        node("c", taints=[{"key": "k", "effect": "NoSchedule"}]),
    ]
    assert scheduler.explain(make_pod(), nodes) == (
        "0/3 nodes are available: 1 node(s) had untolerated taint {k: }, 1 node(s) were not ready, "
        "1 node(s) were unschedulable."
    )
    assert scheduler.explain(make_pod(), []) == "0/0 nodes are available: no nodes available to schedule pods."


def test_decisions_do_not_mutate_their_inputs() -> None:
    pod = make_pod(nodeSelector={"pool": "gpu"}, tolerations=[{"operator": "Exists"}])
    nodes = [node("a", labels={"pool": "gpu"}, taints=[_GPU])]
    before = repr((pod, nodes))
    scheduler.pick_node(pod, nodes, pod_counts={"a": 1})
    scheduler.explain(pod, nodes)
    assert repr((pod, nodes)) == before
