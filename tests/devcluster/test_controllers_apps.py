"""The minimal apps controllers: a Deployment makes a ReplicaSet, which keeps `replicas`
active Pods with a controller ownerReference, replacing deleted and Failed ones."""

from __future__ import annotations

from typing import Any

from devcluster import DevCluster
from tests.support.clients.rawhttp import Raw
from tests.support.factories import make_pod
from tests.support.polling import wait_for

DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
REPLICASETS = "/apis/apps/v1/namespaces/default/replicasets"
PODS = "/api/v1/namespaces/default/pods"


def deployment(name: str, replicas: int, image: str = "busybox") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": make_pod(container={"name": "c", "image": image})["spec"],
            },
        },
    }


def pods(raw: Raw, app: str) -> list[dict[str, Any]]:
    return raw.json("GET", f"{PODS}?labelSelector=app%3D{app}")[1]["items"]


def active(raw: Raw, app: str) -> list[dict[str, Any]]:
    return [
        p
        for p in pods(raw, app)
        if p["status"].get("phase") not in ("Failed", "Succeeded") and not p["metadata"].get("deletionTimestamp")
    ]


def test_a_deployment_makes_a_replicaset_that_makes_owned_pods(cluster: DevCluster, raw: Raw) -> None:
    assert raw.json("POST", DEPLOYMENTS, deployment("web", 3))[0] == 201
    made = wait_for(lambda: len(active(raw, "web")) == 3 and active(raw, "web"))
    (replicaset,) = raw.json("GET", REPLICASETS)[1]["items"]
    assert replicaset["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    assert replicaset["metadata"]["ownerReferences"][0]["controller"] is True
    for pod in made:
        (owner,) = pod["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("ReplicaSet", replicaset["metadata"]["uid"], True)
        assert pod["metadata"]["name"].startswith(replicaset["metadata"]["name"] + "-")
        assert pod["metadata"]["labels"]["pod-template-hash"]


def test_scaling_and_deleted_or_failed_pods_are_replaced(cluster: DevCluster, raw: Raw) -> None:
    raw.json("POST", DEPLOYMENTS, deployment("api", 2))
    first, second = wait_for(lambda: len(active(raw, "api")) == 2 and active(raw, "api"))
    raw.json("DELETE", f"{PODS}/{first['metadata']['name']}")
    wait_for(
        lambda: len(active(raw, "api")) == 2
        and first["metadata"]["name"] not in {p["metadata"]["name"] for p in active(raw, "api")}
    )
    failed = dict(second, status={**second["status"], "phase": "Failed", "reason": "ProvisionFailed"})
    assert raw.json("PUT", f"{PODS}/{second['metadata']['name']}/status", failed)[0] == 200
    wait_for(lambda: len(active(raw, "api")) == 2 and len(pods(raw, "api")) == 3)  # the Failed one stays, as upstream
    patch = {"spec": {"replicas": 4}}
    raw.json("PATCH", f"{DEPLOYMENTS}/api", patch, headers={"Content-Type": "application/merge-patch+json"})
    wait_for(lambda: len(active(raw, "api")) == 4)
    raw.json(
        "PATCH",
        f"{DEPLOYMENTS}/api",
        {"spec": {"replicas": 1}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    wait_for(lambda: len(active(raw, "api")) == 1)
    status = wait_for(lambda: raw.json("GET", f"{DEPLOYMENTS}/api")[1].get("status", {}).get("replicas") == 1)
    assert status


def test_a_new_template_gets_a_new_replicaset_and_the_old_one_scales_to_zero(cluster: DevCluster, raw: Raw) -> None:
    raw.json("POST", DEPLOYMENTS, deployment("roll", 1))
    (old,) = wait_for(lambda: active(raw, "roll"))
    changed = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}}}
    raw.json("PATCH", f"{DEPLOYMENTS}/roll", changed, headers={"Content-Type": "application/merge-patch+json"})
    (new,) = wait_for(
        lambda: [p for p in active(raw, "roll") if p["spec"]["containers"][0]["image"] == "busybox:2"]
        if len(active(raw, "roll")) == 1
        else []
    )
    assert new["metadata"]["labels"]["pod-template-hash"] != old["metadata"]["labels"]["pod-template-hash"]
    replicas = {rs["metadata"]["name"]: rs["spec"]["replicas"] for rs in raw.json("GET", REPLICASETS)[1]["items"]}
    assert sorted(replicas.values()) == [0, 1]


def test_deleting_the_deployment_removes_its_replicasets_and_pods(cluster: DevCluster, raw: Raw) -> None:
    raw.json("POST", DEPLOYMENTS, deployment("gone", 2))
    wait_for(lambda: len(active(raw, "gone")) == 2)
    raw.json("DELETE", f"{DEPLOYMENTS}/gone")
    wait_for(lambda: not pods(raw, "gone") and not raw.json("GET", REPLICASETS)[1]["items"])
