"""A NodePool's status counts the Pods placed through it that have not finished (`placedCount`)
and names its providers (`providerNames`), so `kubectl get nodepools` shows them; on the
devcluster with the webhook, placement and the fake providers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from devcluster import DevCluster
from kube import names
from kube.client import Kube, path_for
from placement.request import placed_pool
from tests.support.clients.kubectl import KUBECTL_137, run_kubectl
from tests.support.polling import wait_for
from tests.support.rigs.placement import Stack, deployment, nodepool

DEPLOYMENTS = path_for("deployments", namespace="default", group="apps", version="v1")
POOLS = path_for(names.NODEPOOL_PLURAL, group=names.NODEPOOL_GROUP, version=names.NODEPOOL_VERSION)


def status_of(kube: Kube, pool: str) -> dict[str, Any]:
    return kube.get(f"{POOLS}/{pool}").get("status") or {}


def test_placed_count_follows_the_pods_placed_through_the_pool(cluster: DevCluster, kube: Kube, stack: Stack) -> None:
    cluster.apply_manifest(nodepool("train", providers=["gpu-a", "gpu-b"], capacity_types=["Spot"]))
    cluster.apply_manifest(nodepool("idle", providers=["gpu-b"], capacity_types=["OnDemand"]))
    wait_for(lambda: status_of(kube, "train").get("observedGeneration"), what="the pool's first status")
    assert status_of(kube, "train")["placedCount"] == 0
    assert status_of(kube, "train")["providerNames"] == "gpu-a,gpu-b"

    kube.create(DEPLOYMENTS, deployment("trainer", replicas=3, pool="train"))
    wait_for(lambda: status_of(kube, "train").get("placedCount") == 3, what="placedCount 3")
    assert status_of(kube, "idle")["placedCount"] == 0

    if Path(KUBECTL_137).exists():
        assert cluster.kubeconfig_path
        done = run_kubectl(cluster.kubeconfig_path, "get", "nodepools", "train")
        assert done.returncode == 0, done.stderr
        listing = done.stdout
        assert re.search(r"^train\s+Ordered\s+gpu-a,gpu-b\s+True\s+3\s.*\s\d+[smh]$", listing, re.M), listing

    kube.patch(f"{DEPLOYMENTS}/trainer", {"spec": {"replicas": 1}})
    wait_for(lambda: status_of(kube, "train").get("placedCount") == 1, what="placedCount 1 after scaling down")
    assert stack.placement.controller.placed_counts["train"] == 1


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_pod_is_no_longer_counted(phase: str) -> None:
    pod: dict[str, Any] = {
        "metadata": {"annotations": {names.POOL_ANNOTATION: "train"}},
        "spec": {"schedulingGates": []},
        "status": {"phase": "Running"},
    }
    assert placed_pool(pod) == "train"
    assert placed_pool(dict(pod, status={"phase": phase})) == ""
    gated = dict(pod, spec={"schedulingGates": [{"name": names.PLACEMENT_GATE}]})
    assert placed_pool(gated) == ""
    assert placed_pool({"metadata": {}, "spec": {}}) == ""
