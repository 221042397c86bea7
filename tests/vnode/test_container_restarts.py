"""Init containers, sidecars and several app containers end to end: a Runner on the embedded
cluster (over HTTP) with a provider that reports container facts. Each container restarts
on its own (`restart(container=X)`), with its own restartCount and the kubelet's Events, and
`kubectl get` shows the Pod as it would show a kubelet's (Init:0/1, Init:CrashLoopBackOff,
PodInitializing, Running, Completed)."""

from __future__ import annotations

import dataclasses
import subprocess
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from devcluster import DevCluster
from kube import names
from kube.client import Kube, path_for
from providers.base import Capabilities, Instance, InstanceId, InstanceState, PodSpec, ProvisionRequest, ProvisionResult
from providers.fake import FakeProvider
from providers.shape import ContainerFacts, ContainerState, Shapes
from tests.support.clients.kubectl import KUBECTL_137
from tests.support.factories import make_pod
from tests.support.pods import get_pod, phase_of
from tests.support.polling import wait_for
from vnode.model.runs import BackoffPolicy
from vnode.runner import Runner

# Long enough that a poll (0.2 s) sees the back-off under load, short enough for a test.
BACKOFF = BackoffPolicy(initial=3.0, maximum=3.0, reset=600.0)
W, R, T = ContainerState.WAITING, ContainerState.RUNNING, ContainerState.TERMINATED


class ContainerFake(FakeProvider):
    """The fake provider, reporting per-container facts that the test moves (as a provider
    that runs several containers does), and restarting one container in place."""

    def __init__(self, cloud: str) -> None:
        super().__init__("multi", {"cloud": cloud})
        self._lock = threading.Lock()
        self._facts: dict[str, dict[str, ContainerFacts]] = {}
        self._runs: dict[str, int] = {}
        self.restarts: list[str] = []  # the containers restarted, in order

    def capabilities(self) -> Capabilities:
        shapes = Shapes(several_containers=True, init_containers=True, sidecars=True)
        return dataclasses.replace(
            super().capabilities(), shapes=shapes, restarts_in_place=True, bills_after_exit=False
        )

    def provision(self, pod: PodSpec, request: ProvisionRequest) -> ProvisionResult:
        result = super().provision(pod, request)
        with self._lock:
            if result.instance_id not in self._facts:
                inits = {c.name: ContainerFacts(c.name, W, init=True) for c in pod.init_containers}
                apps = {c.name: ContainerFacts(c.name, W) for c in pod.app_containers()}
                self._facts[result.instance_id], self._runs[result.instance_id] = {**inits, **apps}, 1
        return result

    def _with_facts(self, instance: Instance | None) -> Instance | None:
        with self._lock:
            facts = self._facts.get(instance.id) if instance is not None else None
            if instance is None or facts is None or instance.state is not InstanceState.RUNNING:
                return instance
            states = [f.state for f in facts.values()]
            if R in states:
                state = InstanceState.RUNNING if any(f.state is not W for f in facts.values() if not f.init) else (
                    InstanceState.INITIALIZING)  # fmt: skip
            elif W in states:
                state = InstanceState.INITIALIZING
            else:
                failed = any(f.exit_code for f in facts.values())
                state = InstanceState.FAILED if failed else InstanceState.SUCCEEDED
            return dataclasses.replace(instance, state=state, runs=self._runs[instance.id],
                                       containers=tuple(facts.values()))  # fmt: skip

    def get(self, instance_id: InstanceId) -> Instance | None:
        return self._with_facts(super().get(instance_id))

    def list(self) -> list[Instance]:
        return [i for i in (self._with_facts(i) for i in super().list()) if i is not None]

    def restart(self, instance_id: InstanceId, container: str = "") -> None:
        with self._lock:
            old = self._facts[instance_id][container]
            self._facts[instance_id][container] = ContainerFacts(
                container, R, init=old.init, started_at=datetime.now(UTC), runs=old.runs + 1
            )
            self._runs[instance_id] += 1
            self.restarts.append(container)

    def move(self, name: str, state: ContainerState, code: int | None = None) -> None:
        """Start (RUNNING) or end (TERMINATED with `code`) container `name` of the one instance."""
        with self._lock:
            (facts,) = self._facts.values()
            old = facts[name]
            if state is R:
                facts[name] = ContainerFacts(name, R, init=old.init, started_at=datetime.now(UTC), runs=old.runs + 1)
            else:
                facts[name] = ContainerFacts(name, T, init=old.init, started_at=old.started_at,
                                             finished_at=datetime.now(UTC), exit_code=code, runs=old.runs)  # fmt: skip


def kubectl_get(cluster: DevCluster, name: str) -> tuple[str, str]:
    """(READY, STATUS) of `kubectl get pod name`."""
    assert cluster.kubeconfig_path is not None
    if not Path(KUBECTL_137).exists():
        pytest.skip("kubectl 1.37 is not installed in the virtualenv")
    home = str(Path(cluster.kubeconfig_path).parent)
    done = subprocess.run([KUBECTL_137, "--kubeconfig", cluster.kubeconfig_path, "get", "pod", name, "--no-headers"],
                          capture_output=True, timeout=60, env={"HOME": home, "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    fields = done.stdout.decode().split()
    return fields[1], fields[2]


def shows(cluster: DevCluster, name: str, ready: str, status: str) -> Callable[[], bool]:
    return lambda: kubectl_get(cluster, name) == (ready, status)


def statuses(kube: Kube, name: str) -> dict[str, dict[str, Any]]:
    status = (get_pod(kube, name) or {}).get("status") or {}
    return {s["name"]: s for s in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])}


def events_for(kube: Kube, name: str) -> list[tuple[str, str]]:
    events, _ = kube.list(path_for("events", namespace="default"))
    return [(e["reason"], e["message"]) for e in events if e["involvedObject"]["name"] == name]


def shaped_pod(name: str, policy: str) -> dict[str, Any]:
    init = [{"name": "setup", "image": "busybox", "command": ["true"]}]
    apps = [{"name": "web", "image": "busybox"}, {"name": "worker", "image": "busybox"}]
    pod = make_pod(name, "multi", restartPolicy=policy, initContainers=init)
    pod["spec"]["containers"] = apps
    return pod


def test_each_container_restarts_on_its_own_and_kubectl_shows_the_pod_as_a_kubelets(
    kube: Kube, cluster: DevCluster, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = ContainerFake(cloud_name)
    start_runner(provider, backoff=BACKOFF)
    kube.create(path_for("pods", namespace="default"), shaped_pod("shaped", "Always"))
    wait_for(shows(cluster, "shaped", "0/2", "Init:0/1"), what="the Pod initializing")
    provider.move("setup", R)
    provider.move("setup", T, 1)  # fails: restarted at once, in place
    wait_for(lambda: provider.restarts == ["setup"], what="the failed init container restarted")
    provider.move("setup", T, 1)  # fails again: now it waits out its back-off
    wait_for(shows(cluster, "shaped", "0/2", "Init:CrashLoopBackOff"), what="the init container's back-off")
    assert phase_of(kube, "shaped") == "Pending"
    wait_for(lambda: provider.restarts == ["setup", "setup"], what="the second restart, after the back-off")
    provider.move("setup", T, 0)
    wait_for(shows(cluster, "shaped", "0/2", "PodInitializing"), what="initialized, app containers not started")
    provider.move("web", R)
    provider.move("worker", R)
    wait_for(shows(cluster, "shaped", "2/2", "Running"), what="both app containers running")
    provider.move("worker", T, 3)
    wait_for(lambda: provider.restarts[-1:] == ["worker"], what="the crashed app container restarted")
    wait_for(lambda: statuses(kube, "shaped")["worker"].get("restartCount") == 1, what="worker's restart counted")
    counts = {name: s["restartCount"] for name, s in statuses(kube, "shaped").items()}
    assert counts == {"setup": 2, "web": 0, "worker": 1}
    assert statuses(kube, "shaped")["worker"]["lastState"]["terminated"]["exitCode"] == 3
    told = events_for(kube, "shaped")
    uid = get_pod(kube, "shaped")["metadata"]["uid"]  # type: ignore[index]
    assert (names.EVENT_BACKOFF, f"Back-off restarting failed container setup in pod shaped_default({uid})") in told
    started = {message for reason, message in told if reason == names.EVENT_STARTED}
    assert {"Started container setup", "Started container web", "Started container worker"} <= started


def test_a_failed_init_container_under_never_fails_the_pod_without_a_restart(
    kube: Kube, cluster: DevCluster, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = ContainerFake(cloud_name)
    start_runner(provider, backoff=BACKOFF)
    kube.create(path_for("pods", namespace="default"), shaped_pod("once", "Never"))
    wait_for(shows(cluster, "once", "0/2", "Init:0/1"), what="the Pod initializing")
    provider.move("setup", R)
    provider.move("setup", T, 4)
    wait_for(lambda: phase_of(kube, "once") == "Failed", what="the Pod failed")
    assert kubectl_get(cluster, "once") == ("0/2", "Init:Error")
    assert provider.restarts == []
    waiting = {name: s["state"] for name, s in statuses(kube, "once").items()}
    assert waiting["web"] == waiting["worker"] == {"waiting": {"reason": "PodInitializing"}}


def test_app_containers_that_all_completed_under_on_failure_complete_the_pod(
    kube: Kube, cluster: DevCluster, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = ContainerFake(cloud_name)
    start_runner(provider, backoff=BACKOFF)
    kube.create(path_for("pods", namespace="default"), shaped_pod("batch", "OnFailure"))
    wait_for(shows(cluster, "batch", "0/2", "Init:0/1"), what="the Pod initializing")
    for name in ("setup", "web", "worker"):
        provider.move(name, R)
    provider.move("setup", T, 0)
    provider.move("web", T, 0)
    wait_for(shows(cluster, "batch", "1/2", "NotReady"), what="one app container done, one running")
    provider.move("worker", T, 0)
    wait_for(lambda: phase_of(kube, "batch") == "Succeeded", what="the Pod succeeded")
    assert kubectl_get(cluster, "batch") == ("0/2", "Completed")
    assert provider.restarts == []
