"""The last status details a kubelet writes, on every status the vnode writes: `qosClass` by the
API server's rules (vnode.model.qos), `containerID`/`imageID` in the kubelet's formats, distinct
per container (vnode.model.imageref), `startTime`/`podIP` kept from the Pod's own status, and
`hostIP`/`hostIPs`: the node's address, stamped by the PodWriter on every write."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kube.client import Kube, path_for
from providers.base import ClaimName, Instance, InstanceId, InstanceState
from providers.fake import FakeProvider
from providers.shape import ContainerFacts, ContainerState
from tests.support.factories import make_pod
from tests.support.pods import get_pod, phase_of
from tests.support.polling import wait_for
from vnode.model import containerstatus, imageref, qos, status
from vnode.podwriter import host_ips
from vnode.runner import Runner

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def resources(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if requests is not None:
        found["requests"] = requests
    if limits is not None:
        found["limits"] = limits
    return found


def pod_with(*apps: dict[str, Any], inits: tuple[dict[str, Any], ...] = (), **spec: Any) -> dict[str, Any]:
    containers = [{"name": f"c{i}", "image": "x", "resources": r} for i, r in enumerate(apps)]
    init = [{"name": f"i{i}", "image": "x", "resources": r} for i, r in enumerate(inits)]
    return {"metadata": {"name": "p"}, "spec": {"containers": containers, "initContainers": init, **spec}}


FULL = resources(limits={"cpu": "1", "memory": "1Gi"})


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        (pod_with({}), "BestEffort"),
        (pod_with(resources(requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "1"})), "BestEffort"),
        (pod_with(resources(requests={"cpu": "0"})), "BestEffort"),  # a zero quantity is none
        (pod_with(FULL), "Guaranteed"),  # requests default to the limits
        (pod_with(resources({"cpu": "1000m", "memory": "1024Mi"}, {"cpu": "1", "memory": "1Gi"})), "Guaranteed"),
        (pod_with(resources({"cpu": "500m", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})), "Burstable"),
        (pod_with(resources(limits={"cpu": "1"})), "Burstable"),  # no memory limit
        (pod_with(FULL, {}), "Burstable"),  # every container counts
        (pod_with(FULL, inits=({},)), "Burstable"),  # init containers too
        (pod_with(FULL, inits=(FULL,)), "Guaranteed"),
        (pod_with(resources=resources(limits={"cpu": "2", "memory": "2Gi"})), "Guaranteed"),  # pod-level resources
        (pod_with(FULL, resources=resources(requests={"cpu": "1"})), "Burstable"),
    ],
)
def test_the_qos_class_is_the_one_the_api_server_sets(pod: dict[str, Any], expected: str) -> None:
    assert qos.qos_class(pod) == expected


@pytest.mark.parametrize(
    ("image", "image_id"),
    [
        ("busybox", "docker.io/library/busybox:latest"),
        ("busybox:1.36", "docker.io/library/busybox:1.36"),
        ("library/busybox:1.36", "docker.io/library/busybox:1.36"),
        ("me/app:v2", "docker.io/me/app:v2"),
        ("index.docker.io/me/app", "docker.io/me/app:latest"),
        ("ghcr.io/org/app:1", "ghcr.io/org/app:1"),
        ("localhost/app", "localhost/app:latest"),
        ("registry:5000/app", "registry:5000/app:latest"),  # a port is no tag
        ("busybox@sha256:" + "a" * 64, "docker.io/library/busybox@sha256:" + "a" * 64),
        ("busybox:1.36@sha256:" + "b" * 64, "docker.io/library/busybox@sha256:" + "b" * 64),  # the digest wins
        ("", ""),
    ],
)
def test_the_image_id_is_the_fully_qualified_reference_or_its_digest(image: str, image_id: str) -> None:
    assert imageref.image_id(image) == image_id


TWO = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "image": "busybox:1.36"}, {"name": "b"}]}}


def running(**overrides: Any) -> Instance:
    values: dict[str, Any] = {"started_at": NOW - timedelta(minutes=1)} | overrides
    return Instance(InstanceId("i-9"), ClaimName("c"), InstanceState.RUNNING, NOW - timedelta(minutes=2), **values)


def test_each_container_of_an_instance_has_its_own_container_id_and_image_id() -> None:
    written = status.status_from_instance(TWO, running(), now=NOW)
    by_name = {s["name"]: s for s in written["containerStatuses"]}
    assert by_name["a"]["containerID"] == "nebula://i-9/a" and by_name["b"]["containerID"] == "nebula://i-9/b"
    assert by_name["a"]["imageID"] == "docker.io/library/busybox:1.36"
    assert written["qosClass"] == "BestEffort"
    facts = (ContainerFacts("a", ContainerState.RUNNING, runs=1), ContainerFacts("b", ContainerState.WAITING))
    per_container = containerstatus.status_from_containers(
        TWO, running(containers=facts), now=NOW, views={}, verdicts=status.NO_VERDICTS
    )
    a, b = per_container["containerStatuses"]
    assert (a["containerID"], a["imageID"]) == ("nebula://i-9/a", "docker.io/library/busybox:1.36")
    assert "containerID" not in b and b["imageID"] == ""  # never created: as a kubelet's waiting container


def test_a_given_up_pod_names_each_container_by_its_own_id_in_its_state_too() -> None:
    terminated = {"exitCode": 137, "reason": "Error", "containerID": "nebula://i-9", "finishedAt": "x"}
    given_up = status.given_up_status(TWO, reason="Preempted", message="m", terminated=terminated, now=NOW)
    for entry in given_up["containerStatuses"]:
        own = f"nebula://i-9/{entry['name']}"
        assert entry["containerID"] == entry["state"]["terminated"]["containerID"] == own


def test_a_lost_pod_keeps_the_container_ids_and_addresses_it_had() -> None:
    before = status.status_from_instance(TWO, running(endpoint="10.0.0.7"), now=NOW)
    before |= {"hostIP": "192.0.2.1", "hostIPs": [{"ip": "192.0.2.1"}], "qosClass": "Burstable"}
    lost = status.lost_status({**TWO, "status": before}, now=NOW + timedelta(minutes=1))
    assert [s["containerID"] for s in lost["containerStatuses"]] == ["nebula://i-9/a", "nebula://i-9/b"]
    for key in ("startTime", "podIP", "podIPs", "hostIP", "hostIPs"):
        assert lost[key] == before[key], key
    assert lost["qosClass"] == "Burstable"  # the API server's, once it has one


def test_an_adopted_pod_keeps_its_start_time() -> None:
    """A restart or an adoption reads the instance again: the Pod's own startTime wins."""
    pod = {**TWO, "status": {"startTime": "2026-11-30T10:00:00Z"}}
    assert status.status_from_instance(pod, running(), now=NOW)["startTime"] == "2026-11-30T10:00:00Z"
    facts = (ContainerFacts("a", ContainerState.RUNNING, runs=1),)
    by_container = containerstatus.status_from_containers(
        pod, running(containers=facts), now=NOW, views={}, verdicts=status.NO_VERDICTS
    )
    assert by_container["startTime"] == "2026-11-30T10:00:00Z"


@pytest.mark.parametrize(
    ("addresses", "expected"),
    [
        ([{"type": "InternalIP", "address": "10.0.0.5"}], ("10.0.0.5",)),
        ([{"type": "InternalDNS", "address": "nebula.svc"}], ()),
        (
            [{"type": "ExternalIP", "address": "203.0.113.9"}, {"type": "InternalIP", "address": "10.0.0.5"}],
            ("10.0.0.5",),
        ),
        (
            [
                {"type": "InternalIP", "address": "10.0.0.5"},
                {"type": "InternalIP", "address": "10.0.0.6"},
                {"type": "InternalIP", "address": "fd00::5"},
            ],
            ("10.0.0.5", "fd00::5"),
        ),
    ],
)
def test_host_ips_are_the_nodes_as_the_kubelet_picks_them(
    addresses: list[dict[str, str]], expected: tuple[str, ...]
) -> None:
    assert host_ips(addresses) == expected


def test_every_status_written_carries_the_nodes_address(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    start_runner(FakeProvider("gpu", {"cloud": cloud_name}))  # node address 127.0.0.1 (the test rig's)
    limits = {"cpu": "1", "memory": "1Gi"}
    kube.create(
        path_for("pods", namespace="default"), make_pod("detailed", "gpu", container={"resources": {"limits": limits}})
    )
    env = [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k"}}}]
    kube.create(path_for("pods", namespace="default"), make_pod("blocked", "gpu", container={"env": env}))
    wait_for(lambda: phase_of(kube, "detailed") == "Running")
    written = (get_pod(kube, "detailed") or {})["status"]
    assert (written["hostIP"], written["hostIPs"]) == ("127.0.0.1", [{"ip": "127.0.0.1"}])
    assert written["qosClass"] == "Guaranteed" and written["startTime"]
    (entry,) = written["containerStatuses"]
    assert entry["containerID"].startswith("nebula://") and entry["containerID"].endswith("/main")
    assert entry["imageID"] == "docker.io/library/busybox:latest"
    # A Pod that waits before any instance (written through `write_status`) carries it too.
    blocked = wait_for(lambda: ((get_pod(kube, "blocked") or {}).get("status") or {}).get("hostIP"))
    assert blocked == "127.0.0.1"
