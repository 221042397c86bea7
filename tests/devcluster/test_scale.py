"""The `scale` subresource of Deployments and ReplicaSets (autoscaling/v1 Scale) with real kubectl
and a real virtual node (the fake provider): `kubectl scale deploy` to 3 runs 3 Pods there, the
status counts follow the Pods' Ready condition, and `get deploy`/`get rs` print the real columns."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster import DevCluster
from providers.fake import FakeProvider
from tests.devcluster.test_kubectl import Kubectl, kubectl_for
from tests.support.clients.rawhttp import Raw
from tests.support.factories import make_pod
from tests.support.polling import wait_for
from tests.support.rigs.runners import make_runner

DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
REPLICASETS = "/apis/apps/v1/namespaces/default/replicasets"
PODS = "/api/v1/namespaces/default/pods"
NODE = "nebula-gpu"


def web(name: str = "web", replicas: int = 1) -> dict[str, Any]:
    template = make_pod(name, "gpu", labels={"app": name})
    del template["metadata"]["name"]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template},
    }


@pytest.fixture
def node(cluster: DevCluster) -> Iterator[None]:
    """A real virtual node `nebula-gpu` (the fake provider) that runs the Pods bound to it."""
    runner = make_runner(cluster, FakeProvider("gpu", {"cloud": f"scale-{uuid.uuid4().hex[:8]}"}))
    runner.start()
    try:
        yield
    finally:
        runner.stop(timeout=5)


@pytest.fixture
def kubectl(cluster: DevCluster, tmp_path: Path) -> Kubectl:
    return kubectl_for("1.37", cluster, tmp_path)


def running_on_node(raw: Raw, app: str) -> list[dict[str, Any]]:
    items = raw.json("GET", f"{PODS}?labelSelector=app%3D{app}")[1]["items"]
    return [
        p
        for p in items
        if p["status"].get("phase") == "Running"
        and p["spec"].get("nodeName") == NODE
        and not p["metadata"].get("deletionTimestamp")
    ]


def _rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


def test_kubectl_scale_deploy_runs_three_pods(
    node: None, kubectl: Kubectl, raw: Raw, cluster: DevCluster, tmp_path: Path
) -> None:
    manifest = tmp_path / "web.yaml"
    manifest.write_text(yaml.safe_dump(web()))
    kubectl.run("create", "-f", str(manifest))
    assert "deployment.apps/web scaled" in kubectl.run("scale", "deploy", "web", "--replicas=3")
    wait_for(lambda: len(running_on_node(raw, "web")) == 3, 60)
    kubectl.run("rollout", "status", "deploy/web", "--timeout=60s")
    deployment = raw.json("GET", f"{DEPLOYMENTS}/web")[1]
    status = {k: deployment["status"].get(k) for k in ("replicas", "updatedReplicas", "readyReplicas")}
    assert status == {"replicas": 3, "updatedReplicas": 3, "readyReplicas": 3}
    assert deployment["status"]["observedGeneration"] == deployment["metadata"]["generation"] == 2
    header, row = _rows(kubectl.run("get", "deploy", "web"))
    assert header == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert row[:4] == ["web", "3/3", "3", "3"]
    header, row = _rows(kubectl.run("get", "deploy", "web", "-o", "wide"))
    assert header[5:] == ["CONTAINERS", "IMAGES", "SELECTOR"]
    assert row[5:] == ["main", "busybox", "app=web"]
    header, row = _rows(kubectl.run("get", "rs", "-l", "app=web", "-o", "wide"))
    assert header == ["NAME", "DESIRED", "CURRENT", "READY", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]
    assert row[1:4] == ["3", "3", "3"] and row[0].startswith("web-")
    assert row[7] == f"app=web,pod-template-hash={row[0].removeprefix('web-')}"


def test_scaling_down_a_deployment_and_scaling_a_replicaset(node: None, kubectl: Kubectl, raw: Raw) -> None:
    assert raw.json("POST", DEPLOYMENTS, web("api", 2))[0] == 201
    wait_for(lambda: len(running_on_node(raw, "api")) == 2, 60)
    kubectl.run("scale", "deploy", "api", "--replicas=1")
    wait_for(lambda: len(running_on_node(raw, "api")) == 1, 60)
    (replicaset,) = raw.json("GET", f"{REPLICASETS}?labelSelector=app%3Dapi")[1]["items"]
    name = replicaset["metadata"]["name"]
    code, scale = raw.json("GET", f"{REPLICASETS}/{name}/scale")
    assert code == 200
    assert (scale["apiVersion"], scale["kind"], scale["spec"]) == ("autoscaling/v1", "Scale", {"replicas": 1})
    assert scale["metadata"]["uid"] == replicaset["metadata"]["uid"]
    assert scale["status"]["selector"].startswith("app=api,pod-template-hash=")
    assert "replicaset.apps/" + name + " scaled" in kubectl.run("scale", "rs", name, "--replicas=0")
    # The Deployment owns its ReplicaSet's size, as the real controller does: it puts 1 back.
    wait_for(lambda: raw.json("GET", f"{REPLICASETS}/{name}")[1]["spec"]["replicas"] == 1)


def test_scale_refuses_negative_replicas_and_a_stale_resource_version(raw: Raw) -> None:
    assert raw.json("POST", DEPLOYMENTS, web("db", 0))[0] == 201
    scale = raw.json("GET", f"{DEPLOYMENTS}/db/scale")[1]
    code, status = raw.json("PUT", f"{DEPLOYMENTS}/db/scale", {**scale, "spec": {"replicas": -1}})
    assert code == 422
    assert status["message"] == (
        'Scale.autoscaling "db" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0'
    )
    assert status["details"]["causes"][0]["field"] == "spec.replicas"
    # Without a resourceVersion an update is unconditional (the apps controller may write the
    # Deployment's status at any time); with one read before that update, it is stale.
    unconditional = {**scale, "metadata": {"name": "db"}, "spec": {"replicas": 2}}
    assert raw.json("PUT", f"{DEPLOYMENTS}/db/scale", unconditional)[0] == 200
    code, status = raw.json("PUT", f"{DEPLOYMENTS}/db/scale", {**scale, "spec": {"replicas": 3}})
    assert (code, status["reason"]) == (409, "Conflict")
    code, patched = raw.json(
        "PATCH",
        f"{DEPLOYMENTS}/db/scale",
        {"spec": {"replicas": 4}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert (code, patched["spec"]["replicas"]) == (200, 4)
    assert raw.json("GET", f"{DEPLOYMENTS}/db")[1]["spec"]["replicas"] == 4
    assert raw.json("GET", f"{DEPLOYMENTS}/missing/scale")[0] == 404


def test_discovery_names_the_scale_kind_in_autoscaling_v1(raw: Raw) -> None:
    resources = raw.json("GET", "/apis/apps/v1")[1]["resources"]
    entry = next(r for r in resources if r["name"] == "deployments/scale")
    assert (entry["group"], entry["version"], entry["kind"]) == ("autoscaling", "v1", "Scale")
    assert sorted(entry["verbs"]) == ["get", "patch", "update"]
