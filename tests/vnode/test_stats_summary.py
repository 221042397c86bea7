"""`/stats/summary` from the providers' samples (`vnode.stats.usage`): the kubelet's stats/v1alpha1
Summary with per-container cpu and memory, Pod totals and node totals over the node's Pods,
for a provider that measures (the fake) and one that does not; nodes sharing the listener merge."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from providers.base import ResourceUsage
from providers.fake import FakeProvider
from providers.fake.registry import forget
from tests.support.polling import wait_for
from tests.support.rigs.offline import adopt_new_pod, offline_handler
from vnode.stats.usage import ContainerUsage, NodeUsage, PodUsage, merged, summary

STAMP = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def _pod(name: str, *usages: ResourceUsage | None) -> PodUsage:
    containers = tuple(ContainerUsage(f"c{i}", STAMP, u) for i, u in enumerate(usages))
    return PodUsage("default", name, f"uid-{name}", STAMP, containers)


def test_the_summary_has_container_pod_and_node_cpu_and_memory() -> None:
    a = ResourceUsage(200_000_000, 4096, 5_000_000_000, 1024, STAMP)
    b = ResourceUsage(100_000_000, 1024, 1_000_000_000, 512, STAMP)
    doc = summary(NodeUsage("nebula-x", (_pod("web", a, b),)), now=STAMP)
    time = "2026-03-01T12:00:00Z"
    node = doc["node"]
    assert node["nodeName"] == "nebula-x" and node["systemContainers"] == []
    assert node["cpu"] == {"time": time, "usageNanoCores": 300_000_000, "usageCoreNanoSeconds": 6_000_000_000}
    assert node["memory"] == {"time": time, "usageBytes": 5120, "workingSetBytes": 5120, "rssBytes": 1536}
    [pod] = doc["pods"]
    assert pod["podRef"] == {"name": "web", "namespace": "default", "uid": "uid-web"}
    assert pod["cpu"]["usageCoreNanoSeconds"] == 6_000_000_000 and pod["memory"]["workingSetBytes"] == 5120
    first = pod["containers"][0]
    assert first == {
        "name": "c0",
        "startTime": time,
        "cpu": {"time": time, "usageNanoCores": 200_000_000, "usageCoreNanoSeconds": 5_000_000_000},
        "memory": {"time": time, "usageBytes": 4096, "workingSetBytes": 4096, "rssBytes": 1024},
    }


def test_a_pod_with_an_unmeasured_container_has_no_pod_total_and_counts_nowhere() -> None:
    measured = ResourceUsage(1, 2, 3, 4, STAMP)
    doc = summary(NodeUsage("n", (_pod("half", measured, None),)), now=STAMP)
    [pod] = doc["pods"]
    assert "cpu" not in pod and "memory" not in pod and "cpu" not in pod["containers"][1]
    assert "cpu" not in doc["node"] and "memory" not in doc["node"]


def test_nodes_sharing_the_listener_merge_into_one_summary() -> None:
    one = NodeUsage("nebula-a", (_pod("p", ResourceUsage(1, 1, 1, 1, STAMP)),), failed=1)
    two = NodeUsage("nebula-b", (_pod("q", ResourceUsage(2, 2, 2, 2, STAMP)),))
    both = merged([one, two])
    assert both.node_name == "nebula-a" and [p.name for p in both.pods] == ["p", "q"] and both.failed == 1
    assert both.total().cpu_core_nanoseconds == 3
    assert merged([]).node_name == ""


def _pods_by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["podRef"]["name"]: p for p in doc["pods"]}


def test_a_handler_over_the_fake_reports_its_scripted_usage() -> None:
    name = f"summary-{uuid.uuid4().hex}"
    provider = FakeProvider(
        "fake", {"cloud": name, "scenario": {"usage": {"cpu_millicores": 50, "memory_bytes": 8192}}}
    )
    handler = offline_handler(provider)
    adopt_new_pod(handler, "measured")

    def measured() -> dict[str, Any] | None:
        doc = summary(handler.serving.pod_usage(), now=datetime.now(UTC))
        return doc if "cpu" in _pods_by_name(doc)["measured"] else None

    doc = wait_for(measured, 30)
    pod = _pods_by_name(doc)["measured"]
    assert pod["containers"][0]["name"] == "main"
    assert pod["cpu"]["usageNanoCores"] == 50_000_000 and pod["memory"]["workingSetBytes"] == 8192
    assert doc["node"]["nodeName"] == "nebula-fake" and doc["node"]["memory"]["workingSetBytes"] == 8192
    for instance in provider.list():
        provider.terminate(instance.id)
    forget(name)
