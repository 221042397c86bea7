"""The shape check at admission: a Pod no provider of its pool can serve is denied naming the
field; one only some cannot serve is admitted with a warning per provider. The verdict is pure
(tabled first); then end to end, kubectl -> the devcluster -> the console's webhook over TLS,
with the `stack`'s two fake providers (one container, no probes, no volumes) in the pool."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from console import runtime
from devcluster import DevCluster
from kube import names
from placement.admission import Candidates, Verdict, shape_verdict
from providers.shape import Shapes
from tests.support.clients.kubectl import KUBECTL_137
from tests.support.factories import make_pod
from tests.support.polling import wait_for
from tests.support.rigs.placement import Stack, nodepool

SERVES_ALL = Shapes(several_containers=True, init_containers=True, volumes=frozenset({"configMap"}))
CLAIM_VOLUME = {"name": "data", "persistentVolumeClaim": {"claimName": "weights"}}
TOKEN_VOLUME = {"name": "kube-api-access-abcde", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}


def pod_with(*, volumes: Sequence[dict[str, Any]] = (), containers: int = 1, pool: str = "shapes") -> dict[str, Any]:
    """Pod `shaped` opted in to `pool`, with `containers` containers and `volumes`."""
    return make_pod(
        "shaped",
        namespace="default",
        labels={names.ENABLED_LABEL: "true", names.POOL_LABEL: pool},
        containers=[{"name": f"c{i}", "image": "busybox", "command": ["true"]} for i in range(containers)],
        volumes=list(volumes),
    )


def test_a_pod_no_candidate_serves_is_denied_with_every_provider_and_field_named() -> None:
    verdict = shape_verdict(
        pod_with(volumes=[CLAIM_VOLUME]), Candidates("NodePool 'p'", {"a": Shapes(), "b": SERVES_ALL})
    )
    assert verdict == Verdict(
        denial="no provider of NodePool 'p' can serve this Pod: "
        "a cannot serve spec.volumes[0].persistentVolumeClaim (persistentVolumeClaim volumes); "
        "b cannot serve spec.volumes[0].persistentVolumeClaim (persistentVolumeClaim volumes)"
    )


def test_a_pod_some_candidates_serve_is_admitted_with_a_warning_for_each_other() -> None:
    verdict = shape_verdict(pod_with(containers=2), Candidates("NodePool 'p'", {"a": Shapes(), "b": SERVES_ALL}))
    assert verdict == Verdict(
        warnings=("provider 'a' cannot serve spec.containers[1] (several containers); placement will not choose it",)
    )
    assert shape_verdict(pod_with(), Candidates("NodePool 'p'", {"a": Shapes()})) == Verdict()


def test_the_service_account_volume_is_a_warning_even_where_nothing_serves_it() -> None:
    verdict = shape_verdict(pod_with(volumes=[TOKEN_VOLUME]), Candidates("node nebula-a", {"a": Shapes()}))
    assert verdict.denial == ""
    assert verdict.warnings == ("spec.volumes[0]: the service account token (not mounted on external compute)",)


@pytest.fixture
def published(stack: Stack) -> Iterator[Stack]:
    """The stack's Handlers and placement published as this process's runtime, as runvnode does."""
    runtime.install(handlers=[runner.handler for runner in stack.runners], placement=stack.placement)
    yield stack
    runtime.clear()


def kubectl_create(cluster: DevCluster, tmp_path: Path, pod: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(pod))
    assert cluster.kubeconfig_path is not None
    return subprocess.run(
        [KUBECTL_137, "--kubeconfig", cluster.kubeconfig_path, "create", "-f", str(manifest)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.fixture
def shapes_pool(cluster: DevCluster, published: Stack) -> Stack:
    """NodePool `shapes` (the stack's two fake providers, OnDemand), applied and seen by placement."""
    cluster.apply_manifest(nodepool("shapes", providers=["gpu-a", "gpu-b"], capacity_types=["OnDemand"]))
    wait_for(lambda: (state := published.placement.pools.get("shapes")) is not None and state.pool is not None, 10)
    return published


def test_kubectl_create_of_a_pod_with_a_pvc_is_denied_naming_the_field(
    cluster: DevCluster, shapes_pool: Stack, tmp_path: Path
) -> None:
    done = kubectl_create(cluster, tmp_path, pod_with(volumes=[CLAIM_VOLUME]))
    assert done.returncode == 1
    assert "denied the request: no provider of NodePool 'shapes' can serve this Pod: gpu-a cannot serve " in done.stderr
    assert "spec.volumes[0].persistentVolumeClaim (persistentVolumeClaim volumes)" in done.stderr
    listed = subprocess.run(
        [KUBECTL_137, "--kubeconfig", str(cluster.kubeconfig_path), "get", "pod", "shaped"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert listed.returncode == 1 and "NotFound" in listed.stderr  # nothing was created


def test_kubectl_shows_the_webhooks_warnings_for_an_admitted_pod(
    cluster: DevCluster, shapes_pool: Stack, tmp_path: Path
) -> None:
    done = kubectl_create(cluster, tmp_path, pod_with(volumes=[TOKEN_VOLUME]))
    assert done.returncode == 0, done.stderr
    assert "Warning: spec.volumes[0]: the service account token (not mounted on external compute)" in done.stderr
