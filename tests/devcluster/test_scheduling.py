"""The scheduler loop end to end through the API: gates, nodeSelector, taints and tolerations,
Ready nodes only, FailedScheduling events without spam, and binding."""

from __future__ import annotations

from typing import Any

from devcluster import DevCluster
from tests.support.factories import make_node, make_pod
from tests.support.polling import wait_for

TAINT = {"key": "nebula.io/provider", "value": "gpu-a", "effect": "NoSchedule"}


def _node(core: Any, cluster: DevCluster, name: str, **kwargs: Any) -> None:
    core.create_node(make_node(name, **kwargs))


def _scheduled(core: Any, name: str) -> dict[str, Any]:
    pod = core.read_namespaced_pod(name, "default")
    conditions = {c.type: c for c in pod.status.conditions or []}
    return {"node": pod.spec.node_name, "scheduled": conditions.get("PodScheduled")}


def _events(core: Any, pod: str, reason: str) -> list[Any]:
    events = core.list_namespaced_event("default", field_selector=f"involvedObject.name={pod}").items
    return [e for e in events if e.reason == reason]


def test_a_gated_pod_waits_until_its_gate_is_removed(cluster: DevCluster, core: Any) -> None:
    _node(core, cluster, "n1")
    core.create_namespaced_pod(
        "default", make_pod("gated", spec={"schedulingGates": [{"name": "nebula.io/placement"}]})
    )
    wait_for(
        lambda: (_scheduled(core, "gated")["scheduled"] or {})
        and _scheduled(core, "gated")["scheduled"].reason == "SchedulingGated",
        what="SchedulingGated",
    )
    assert _scheduled(core, "gated")["node"] is None
    core.patch_namespaced_pod("gated", "default", {"spec": {"schedulingGates": None}})
    wait_for(lambda: _scheduled(core, "gated")["node"] == "n1", what="binding after the gate went")
    assert _scheduled(core, "gated")["scheduled"].status == "True"
    assert _events(core, "gated", "Scheduled")[0].message == "Successfully assigned default/gated to n1"


def test_node_selector_picks_the_matching_ready_node(cluster: DevCluster, core: Any) -> None:
    _node(core, cluster, "a-plain")
    _node(core, cluster, "b-gpu", labels={"nebula.io/provider": "gpu-a"})
    not_ready = make_node("c-gpu", labels={"nebula.io/provider": "gpu-a"})
    not_ready["status"]["conditions"][0]["status"] = "False"
    core.create_node(not_ready)
    core.create_namespaced_pod("default", make_pod("picky", spec={"nodeSelector": {"nebula.io/provider": "gpu-a"}}))
    wait_for(lambda: _scheduled(core, "picky")["node"] == "b-gpu", what="binding to b-gpu")


def test_taints_keep_untolerating_pods_off_and_the_failure_is_reported_once(cluster: DevCluster, core: Any) -> None:
    _node(core, cluster, "tainted", taints=[TAINT])
    core.create_namespaced_pod("default", make_pod("plain"))
    wait_for(lambda: _events(core, "plain", "FailedScheduling"), what="FailedScheduling")
    status = _scheduled(core, "plain")
    assert status["node"] is None and status["scheduled"].reason == "Unschedulable"
    assert "untolerated taint {nebula.io/provider: gpu-a}" in status["scheduled"].message
    for _ in range(3):
        cluster.scheduler.schedule_once()
    assert len(_events(core, "plain", "FailedScheduling")) == 1
    tolerations = [{"key": "nebula.io/provider", "operator": "Exists", "effect": "NoSchedule"}]
    core.create_namespaced_pod("default", make_pod("tolerant", spec={"tolerations": tolerations}))
    wait_for(lambda: _scheduled(core, "tolerant")["node"] == "tainted", what="the tolerant pod bound")
    assert _scheduled(core, "plain")["node"] is None


def test_a_pod_pending_for_want_of_nodes_is_bound_when_one_registers(cluster: DevCluster, core: Any) -> None:
    core.create_namespaced_pod("default", make_pod("early"))
    wait_for(lambda: _events(core, "early", "FailedScheduling"), what="FailedScheduling with no nodes")
    _node(core, cluster, "late")
    wait_for(lambda: _scheduled(core, "early")["node"] == "late", what="binding once a node registered")
