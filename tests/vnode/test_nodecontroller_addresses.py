"""The node controller's addresses and Ready Events: a node publishes only addresses that reach
its kubelet listener (InternalIP, and InternalDNS when a DNS name is configured; never the node
name as a Hostname), and writes NodeReady / NodeNotReady exactly when Ready changes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from devcluster import DevCluster
from kube import names
from kube.client import Kube, NotFoundError, path_for
from providers.fake import FakeProvider
from tests.support.polling import wait_for
from vnode.nodecontroller import node_addresses, ready_event
from vnode.runner import Runner

NODE = "nebula-gpu"


def get_node(kube: Kube) -> dict[str, Any] | None:
    try:
        return kube.get(path_for("nodes", name=NODE))
    except NotFoundError:
        return None


def ready(kube: Kube) -> str | None:
    for entry in ((get_node(kube) or {}).get("status") or {}).get("conditions") or []:
        if entry.get("type") == "Ready":
            return str(entry["status"])
    return None


def ready_events(kube: Kube) -> dict[str, int]:
    """Reason -> count of the node's Ready Events."""
    items, _ = kube.list(path_for("events", namespace="default"), fieldSelector=f"involvedObject.name={NODE}")
    wanted = (names.EVENT_NODE_READY, names.EVENT_NODE_NOT_READY)
    return {e["reason"]: int(e["count"]) for e in items if e["reason"] in wanted}


def status_writes(cluster: DevCluster) -> int:
    return cluster.request_log.count(verb="patch", resource="nodes", subresource="status")


@pytest.mark.parametrize(
    ("node_ip", "dns_name", "expected"),
    [
        ("10.0.0.7", None, [{"type": "InternalIP", "address": "10.0.0.7"}]),
        (
            "10.0.0.7",
            "nebula-kubelet.nebula.svc",
            [
                {"type": "InternalIP", "address": "10.0.0.7"},
                {"type": "InternalDNS", "address": "nebula-kubelet.nebula.svc"},
            ],
        ),
        (None, "kubelet.example.com", [{"type": "InternalDNS", "address": "kubelet.example.com"}]),
        (None, None, []),
    ],
)
def test_a_node_publishes_only_the_addresses_it_is_given(
    node_ip: str | None, dns_name: str | None, expected: list[dict[str, str]]
) -> None:
    assert node_addresses(node_ip, dns_name) == expected


@pytest.mark.parametrize(
    ("published", "written", "reason"),
    [
        (None, "True", names.EVENT_NODE_READY),  # the first registration as Ready
        (None, "False", None),  # registered not ready: nothing to announce
        ("False", "True", names.EVENT_NODE_READY),
        ("Unknown", "True", names.EVENT_NODE_READY),  # back after the lifecycle controller's Unknown
        ("True", "False", names.EVENT_NODE_NOT_READY),
        ("True", "Unknown", names.EVENT_NODE_NOT_READY),
        ("Unknown", "False", names.EVENT_NODE_NOT_READY),
        ("True", "True", None),
        ("False", "False", None),
    ],
)
def test_a_ready_event_is_written_only_when_ready_changes(
    published: str | None, written: str, reason: str | None
) -> None:
    assert ready_event(published, written) == reason


def test_without_a_dns_name_the_node_publishes_its_internal_ip_and_no_hostname(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    start_runner(FakeProvider("gpu", {"cloud": cloud_name}))
    registered = wait_for(lambda: get_node(kube))
    assert registered["status"]["addresses"] == [{"type": "InternalIP", "address": "127.0.0.1"}]
    assert registered["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 10250


def test_with_a_dns_name_the_node_publishes_it_as_internal_dns_too(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    start_runner(FakeProvider("gpu", {"cloud": cloud_name}), node_dns_name="nebula-kubelet.nebula.svc")
    registered = wait_for(lambda: get_node(kube))
    assert registered["status"]["addresses"] == [
        {"type": "InternalIP", "address": "127.0.0.1"},
        {"type": "InternalDNS", "address": "nebula-kubelet.nebula.svc"},
    ]


def test_without_any_address_the_node_says_logs_and_exec_are_unsupported(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    start_runner(FakeProvider("gpu", {"cloud": cloud_name}), node_ip=None)
    registered = wait_for(lambda: get_node(kube))
    assert registered["status"]["addresses"] == []
    assert registered["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 0
    assert registered["metadata"]["annotations"][f"{names.PREFIX}/kubelet"].startswith("unsupported")


def test_node_ready_and_not_ready_events_follow_the_ready_condition_only(
    cluster: DevCluster, kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    """One NodeReady when the node first becomes Ready, none for the status patches that
    follow; NodeNotReady when the provider stops answering; NodeReady again (counted) when
    it answers again."""
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    start_runner(provider)
    wait_for(lambda: ready(kube) == "True", what="Ready")
    wait_for(lambda: ready_events(kube) == {names.EVENT_NODE_READY: 1}, what="one NodeReady")
    written = status_writes(cluster)
    wait_for(lambda: status_writes(cluster) >= written + 3, what="three more status patches")
    assert ready_events(kube) == {names.EVENT_NODE_READY: 1}

    provider.cloud.outage()
    wait_for(lambda: ready(kube) == "False", what="NotReady")
    wait_for(lambda: ready_events(kube).get(names.EVENT_NODE_NOT_READY) == 1, what="one NodeNotReady")
    provider.cloud.clear()
    wait_for(lambda: ready(kube) == "True", what="Ready again")
    wait_for(
        lambda: ready_events(kube) == {names.EVENT_NODE_READY: 2, names.EVENT_NODE_NOT_READY: 1},
        what="NodeReady counted twice",
    )
    items, _ = kube.list(path_for("events", namespace="default"), fieldSelector=f"involvedObject.name={NODE}")
    event = next(e for e in items if e["reason"] == names.EVENT_NODE_READY)
    assert event["type"] == "Normal" and event["message"] == f"Node {NODE} status is now: NodeReady"
    assert event["involvedObject"]["kind"] == "Node" and event["involvedObject"]["namespace"] == ""
    assert event["involvedObject"]["uid"] == get_node(kube)["metadata"]["uid"]  # type: ignore[index]


def test_a_restarted_controller_keeps_a_ready_node_ready_without_new_events(
    cluster: DevCluster, kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    """A new leader (or a restart) has no news about the provider before its first list: the
    node keeps Ready and its transition time, and no NodeNotReady / NodeReady is written."""
    first = start_runner(FakeProvider("gpu", {"cloud": cloud_name}))
    wait_for(lambda: ready_events(kube) == {names.EVENT_NODE_READY: 1}, what="one NodeReady")
    since = ready_transition(kube)
    first.stop(timeout=5)
    seen: list[str | None] = []
    start_runner(FakeProvider("gpu", {"cloud": cloud_name}))
    written = status_writes(cluster)
    wait_for(lambda: seen.append(ready(kube)) or status_writes(cluster) >= written + 5, what="five status patches")
    assert set(seen) == {"True"}
    assert ready_transition(kube) == since
    items, _ = kube.list(path_for("events", namespace="default"), fieldSelector=f"involvedObject.name={NODE}")
    assert [(e["reason"], e["count"]) for e in items] == [(names.EVENT_NODE_READY, 1)]


def ready_transition(kube: Kube) -> str:
    node = get_node(kube) or {}
    return next(str(c["lastTransitionTime"]) for c in node["status"]["conditions"] if c["type"] == "Ready")
