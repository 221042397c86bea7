"""`CreateContainerConfigError`: a Pod whose env names a missing Secret or ConfigMap (or key)
reads as a kubelet's: Pending, the container waiting with the kubelet's reason and message,
its conditions and startTime, a counted Warning `Failed` Event, `kubectl get pods` showing the
reason; and it starts as soon as the Secret appears (vnode.model.containerstatus.config_error_status,
vnode.phases.provision)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from devcluster import DevCluster
from kube import names
from kube.client import Kube, path_for
from providers.fake import FakeProvider
from tests.support.clients.kubectl import KUBECTL_137
from tests.support.factories import make_pod
from tests.support.pods import get_pod, phase_of
from tests.support.polling import wait_for
from vnode.model import containerstatus, stopping
from vnode.runner import Runner

PODS = path_for("pods", namespace="default")
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
CCCE = names.REASON_CREATE_CONTAINER_CONFIG_ERROR


def container(name: str) -> dict[str, Any]:
    return {"name": name, "image": "busybox:1.36"}


def waiting(status: dict[str, Any], key: str = "containerStatuses") -> dict[str, dict[str, Any]]:
    return {s["name"]: s["state"]["waiting"] for s in status[key]}


def test_a_container_whose_env_fails_waits_with_the_kubelets_reason_and_the_pod_stays_pending() -> None:
    pod = make_pod("p", spec={"containers": [container("b"), container("a")]})
    status = containerstatus.config_error_status(pod, {"b": 'secret "x" not found'}, now=NOW)
    assert status["phase"] == "Pending" and status["startTime"] == "2026-01-02T03:04:05Z"
    assert waiting(status) == {
        "a": {"reason": "ContainerCreating"},  # it runs in the same instance: it is not created either
        "b": {"reason": CCCE, "message": 'secret "x" not found'},
    }
    for entry in status["containerStatuses"]:
        assert (entry["ready"], entry["started"], entry["restartCount"]) == (False, False, 0)
        assert entry["image"] == "busybox:1.36" and "containerID" not in entry
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["PodScheduled"]["status"] == conditions["Initialized"]["status"] == "True"
    for kind in ("ContainersReady", "Ready"):
        assert conditions[kind]["status"] == "False" and conditions[kind]["reason"] == "ContainersNotReady"
        assert conditions[kind]["message"] == "containers with unready status: [a b]"


def test_a_started_pod_keeps_its_start_time() -> None:
    pod = make_pod("p", status={"startTime": "2025-12-31T00:00:00Z"})
    status = containerstatus.config_error_status(pod, {"main": 'configmap "c" not found'}, now=NOW)
    assert status["startTime"] == "2025-12-31T00:00:00Z"


def test_the_first_failing_init_container_waits_and_the_app_containers_wait_behind_it() -> None:
    spec = {"initContainers": [container("i0"), container("i1"), container("i2")], "containers": [container("app")]}
    failed = {"i1": "couldn't find key k in Secret default/s", "i2": 'secret "s" not found', "app": "x"}
    status = containerstatus.config_error_status(make_pod("p", spec=spec), failed, now=NOW)
    assert waiting(status, "initContainerStatuses") == {
        "i0": {"reason": "PodInitializing"},
        "i1": {"reason": CCCE, "message": "couldn't find key k in Secret default/s"},
        "i2": {"reason": "PodInitializing"},  # a kubelet never gets to it
    }
    assert waiting(status) == {"app": {"reason": "PodInitializing"}}
    initialized = next(c for c in status["conditions"] if c["type"] == "Initialized")
    assert (initialized["status"], initialized["reason"]) == ("False", "ContainersNotInitialized")
    assert status["phase"] == "Pending"


def test_with_no_init_container_failing_every_failing_app_container_waits_so() -> None:
    spec = {"initContainers": [container("i0")], "containers": [container("a"), container("b")]}
    failed = {"a": 'secret "s" not found', "b": 'configmap "c" not found'}
    status = containerstatus.config_error_status(make_pod("p", spec=spec), failed, now=NOW)
    assert waiting(status, "initContainerStatuses") == {"i0": {"reason": "PodInitializing"}}
    assert waiting(status) == {
        "a": {"reason": CCCE, "message": 'secret "s" not found'},
        "b": {"reason": CCCE, "message": 'configmap "c" not found'},
    }


def failed_events(kube: Kube, pod: str) -> list[dict[str, Any]]:
    items, _ = kube.list(path_for("events", namespace="default"), fieldSelector=f"involvedObject.name={pod}")
    return [e for e in items if e.get("reason") == names.EVENT_CONTAINER_FAILED]


def kubectl_status(cluster: DevCluster, pod: str) -> str:
    assert cluster.kubeconfig_path is not None
    shown = subprocess.run(
        [KUBECTL_137, "--kubeconfig", cluster.kubeconfig_path, "get", "pod", pod, "--no-headers"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.split()  # fmt: skip
    return shown[2]


SOURCES = [
    pytest.param(
        {"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "later", "key": "token"}}}]},
        "Secret",
        'secret "later" not found',
        id="secretKeyRef",
    ),
    pytest.param(
        {"envFrom": [{"configMapRef": {"name": "later"}}]},
        "ConfigMap",
        'configmap "later" not found',
        id="envFrom-configMapRef",
    ),
]


@pytest.mark.parametrize(("env", "kind", "message"), SOURCES)
def test_a_missing_source_reads_create_container_config_error_and_the_pod_starts_when_it_appears(
    cluster: DevCluster,
    kube: Kube,
    start_runner: Callable[..., Runner],
    cloud_name: str,
    env: dict[str, Any],
    kind: str,
    message: str,
) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    start_runner(provider)
    kube.create(PODS, make_pod("configless", "gpu", container=env))

    def shown() -> dict[str, Any] | None:
        status = (get_pod(kube, "configless") or {}).get("status") or {}
        statuses = status.get("containerStatuses") or [{}]
        return status if (statuses[0].get("state") or {}).get("waiting", {}).get("reason") == CCCE else None

    status = wait_for(shown)
    assert status["phase"] == "Pending" and status["startTime"]
    (entry,) = status["containerStatuses"]
    assert entry["state"]["waiting"] == {"reason": CCCE, "message": message}
    assert (entry["ready"], entry["started"], entry["restartCount"], entry["image"]) == (False, False, 0, "busybox")
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["message"] == "containers with unready status: [main]"
    assert kubectl_status(cluster, "configless") == CCCE
    # Each retry tells it again: the Event is counted, as the kubelet's are.
    counted = wait_for(lambda: [e for e in failed_events(kube, "configless") if e.get("count", 1) >= 2])
    assert counted[0]["type"] == "Warning" and counted[0]["message"] == f"Error: {message}"
    assert provider.list() == []
    plural, field = ("secrets", "stringData") if kind == "Secret" else ("configmaps", "data")
    source = {"apiVersion": "v1", "kind": kind, "metadata": {"name": "later"}, field: {"token": "t"}}
    kube.create(path_for(plural, namespace="default"), source)
    wait_for(lambda: phase_of(kube, "configless") == "Running", timeout=10)
    started = (get_pod(kube, "configless") or {})["status"]
    assert started["startTime"] == status["startTime"]  # the kubelet's clock started at the first sync
    assert "waiting" not in started["containerStatuses"][0]["state"]


def test_a_pod_waiting_for_its_secret_past_its_deadline_fails_deadline_exceeded_without_an_instance(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    """Its startTime was written with its CreateContainerConfigError, so its deadline runs as
    on a kubelet: the retry comes by the deadline at the latest, and the Pod fails then."""
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    start_runner(provider)
    env = {"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "never", "key": "token"}}}]}
    kube.create(PODS, make_pod("stuck", "gpu", container=env, activeDeadlineSeconds=3))

    def failed() -> dict[str, Any] | None:
        status: dict[str, Any] = (get_pod(kube, "stuck") or {}).get("status") or {}
        return status if status.get("phase") == "Failed" else None

    status = wait_for(failed, timeout=20)
    assert (status["reason"], status["message"]) == ("DeadlineExceeded", stopping.DEADLINE_MESSAGE)
    assert provider.list() == []
    items, _ = kube.list(path_for("events", namespace="default"), fieldSelector="involvedObject.name=stuck")
    assert any(e["reason"] == "DeadlineExceeded" and e["type"] == "Normal" for e in items)
