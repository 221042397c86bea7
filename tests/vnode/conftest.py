"""Fixtures for the virtual kubelet: a real embedded API server over HTTPS, a Kube client
on its kubeconfig, Pod factories, and in-process Runners over the fake provider."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster import DevCluster
from kube import names
from kube.client import Kube, NotFoundError, load_api_client, path_for
from providers.base import Provider
from tests.polling import wait_for as wait_for  # re-exported for the tests here
from vnode.runner import Runner


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    with DevCluster(kubeconfig_path=str(tmp_path / "kubeconfig"), scheduler_interval=0.05) as running:
        yield running


@pytest.fixture
def kube(cluster: DevCluster) -> Kube:
    assert cluster.kubeconfig_path is not None
    return Kube(load_api_client(cluster.kubeconfig_path))


def make_pod(name: str, provider: str, **overrides: Any) -> dict[str, Any]:
    """A Pod bound for `nebula-<provider>` through the scheduler (nodeSelector + toleration)."""
    container: dict[str, Any] = {"name": "main", "image": "busybox", "command": ["sh", "-c", "sleep 300"]}
    container.update(overrides.pop("container", {}))
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"test": "vnode"}},
        "spec": {
            "nodeSelector": {names.PROVIDER_KEY: provider},
            "tolerations": [{"key": names.PROVIDER_KEY, "operator": "Exists"}],
            "containers": [container],
        },
    }
    pod["spec"].update(overrides)
    return pod


def get_pod(kube: Kube, name: str) -> dict[str, Any] | None:
    try:
        return kube.get(path_for("pods", namespace="default", name=name))
    except NotFoundError:
        return None


def phase_of(kube: Kube, name: str) -> str | None:
    pod = get_pod(kube, name)
    return None if pod is None else (pod.get("status") or {}).get("phase")


@pytest.fixture
def start_runner(cluster: DevCluster) -> Iterator[Callable[..., Runner]]:
    """Start an in-process Runner for a provider; stopped after the test."""
    started: list[Runner] = []

    def start(provider: Provider, **overrides: Any) -> Runner:
        assert cluster.kubeconfig_path is not None
        options: dict[str, Any] = {
            "node_ip": "127.0.0.1",
            "kubelet_port": 10250,
            "poll_interval": 0.2,
            "lease_renew_interval": 0.3,
            "workers": 4,
        }
        options.update(overrides)
        runner = Runner(
            provider,
            kube=Kube(load_api_client(cluster.kubeconfig_path)),
            watch_kube=Kube(load_api_client(cluster.kubeconfig_path)),
            **options,
        )
        runner.start()
        started.append(runner)
        return runner

    yield start
    for runner in started:
        runner.stop(timeout=5)


@pytest.fixture
def cloud_name() -> str:
    return f"vnode-{uuid.uuid4().hex[:8]}"
