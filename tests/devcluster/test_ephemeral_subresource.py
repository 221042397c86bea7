"""`pods/{name}/ephemeralcontainers` on the embedded API server over real HTTPS: Pod objects in
and out for GET, PATCH (strategic-merge, merge, JSON patch) and PUT, the append-only and
field validation (422 naming the field, nothing stored), the Pod's own updates refused, the
old `EphemeralContainers` kind answered as a modern server does, discovery and RBAC."""

from __future__ import annotations

import json
from typing import Any

import pytest

from devcluster import DevCluster
from tests.support.clients.rawhttp import Raw
from tests.support.factories import make_pod

POD = "/api/v1/namespaces/default/pods/p1"
SUB = f"{POD}/ephemeralcontainers"
SMP = {"Content-Type": "application/strategic-merge-patch+json"}
DEBUGGER = {"name": "debugger", "image": "busybox", "command": ["sh"], "stdin": True, "tty": True}


def admin(cluster: DevCluster) -> dict[str, str]:
    return {"Authorization": f"Bearer {cluster.token}"}


@pytest.fixture
def pod(raw: Raw) -> dict[str, Any]:
    status, obj = raw.json("POST", "/api/v1/namespaces/default/pods", make_pod("p1"))
    assert status == 201, obj
    return dict(obj)


def add(raw: Raw, *containers: dict[str, Any]) -> tuple[int, Any]:
    return raw.json("PATCH", SUB, {"spec": {"ephemeralContainers": list(containers)}}, headers=SMP)


def stored(raw: Raw) -> dict[str, Any]:
    status, obj = raw.json("GET", POD)
    assert status == 200
    return dict(obj)


def test_get_answers_the_pod(raw: Raw, pod: dict[str, Any]) -> None:
    status, obj = raw.json("GET", SUB)
    assert status == 200
    assert obj["kind"] == "Pod" and obj["metadata"]["uid"] == pod["metadata"]["uid"]


def test_strategic_patch_adds_a_defaulted_ephemeral_container(raw: Raw, pod: dict[str, Any]) -> None:
    status, obj = add(raw, DEBUGGER)
    assert status == 200, obj
    assert obj["kind"] == "Pod"
    [ec] = obj["spec"]["ephemeralContainers"]
    assert ec["name"] == "debugger" and ec["terminationMessagePolicy"] == "File"
    assert int(obj["metadata"]["resourceVersion"]) > int(pod["metadata"]["resourceVersion"])
    assert stored(raw)["spec"]["ephemeralContainers"] == [ec]


def test_merge_and_json_patch_and_put_append(raw: Raw, pod: dict[str, Any]) -> None:
    status, obj = raw.json(
        "PATCH",
        SUB,
        {"spec": {"ephemeralContainers": [DEBUGGER]}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert status == 200, obj
    op = [{"op": "add", "path": "/spec/ephemeralContainers/-", "value": {"name": "second", "image": "busybox"}}]
    status, obj = raw.json("PATCH", SUB, op, headers={"Content-Type": "application/json-patch+json"})
    assert status == 200, obj
    obj["spec"]["ephemeralContainers"].append({"name": "third", "image": "busybox"})
    status, obj = raw.json("PUT", SUB, obj)
    assert status == 200, obj
    assert [c["name"] for c in stored(raw)["spec"]["ephemeralContainers"]] == ["debugger", "second", "third"]


def test_only_ephemeral_containers_change_through_the_subresource(raw: Raw, pod: dict[str, Any]) -> None:
    spec = {"containers": [{"name": "main", "image": "evil"}], "ephemeralContainers": [DEBUGGER]}
    body = {"metadata": {"labels": {"sneaky": "yes"}}, "spec": spec}
    status, obj = raw.json("PATCH", SUB, body, headers=SMP)
    assert status == 200, obj
    after = stored(raw)
    assert after["spec"]["containers"][0]["image"] == pod["spec"]["containers"][0]["image"]
    assert "sneaky" not in (after["metadata"].get("labels") or {})


@pytest.mark.parametrize(
    ("container", "field"),
    [
        ({"ports": [{"containerPort": 80}]}, "spec.ephemeralContainers[0].ports: Forbidden"),
        ({"readinessProbe": {"exec": {"command": ["true"]}}}, "spec.ephemeralContainers[0].readinessProbe: Forbidden"),
        ({"livenessProbe": {"exec": {"command": ["true"]}}}, "spec.ephemeralContainers[0].livenessProbe: Forbidden"),
        ({"startupProbe": {"exec": {"command": ["true"]}}}, "spec.ephemeralContainers[0].startupProbe: Forbidden"),
        ({"resources": {"limits": {"cpu": "1"}}}, "spec.ephemeralContainers[0].resources: Forbidden"),
        (
            {"lifecycle": {"preStop": {"exec": {"command": ["true"]}}}},
            "spec.ephemeralContainers[0].lifecycle: Forbidden",
        ),
        ({"targetContainerName": "nope"}, 'spec.ephemeralContainers[0].targetContainerName: Not found: "nope"'),
        ({"name": "main"}, 'spec.ephemeralContainers[0].name: Duplicate value: "main"'),
        ({"image": ""}, "spec.ephemeralContainers[0].image: Required value"),
        ({"name": ""}, "spec.ephemeralContainers[0].name: Required value"),
    ],
)
def test_invalid_ephemeral_containers_get_422_naming_the_field(
    raw: Raw, pod: dict[str, Any], container: dict[str, Any], field: str
) -> None:
    status, obj = add(raw, {**DEBUGGER, **container})
    assert status == 422, obj
    assert obj["reason"] == "Invalid" and field in obj["message"], obj["message"]
    assert "ephemeralContainers" not in stored(raw)["spec"]


def test_existing_ephemeral_containers_may_not_be_removed_or_changed(raw: Raw, pod: dict[str, Any]) -> None:
    assert add(raw, DEBUGGER)[0] == 200
    current = stored(raw)
    gone = json.loads(json.dumps(current))
    gone["spec"]["ephemeralContainers"] = []
    status, obj = raw.json("PUT", SUB, gone)
    assert status == 422 and 'existing ephemeral containers "debugger" may not be removed' in obj["message"]
    changed = json.loads(json.dumps(current))
    changed["spec"]["ephemeralContainers"][0]["image"] = "alpine"
    status, obj = raw.json("PUT", SUB, changed)
    assert status == 422 and 'existing ephemeral containers "debugger" may not be changed' in obj["message"]
    assert add(raw, {**DEBUGGER, "name": "debugger"})[0] == 200  # the same entry again changes nothing
    assert stored(raw)["spec"] == current["spec"]


def test_the_pod_resource_refuses_ephemeral_container_changes(raw: Raw, pod: dict[str, Any]) -> None:
    status, obj = raw.json("PATCH", POD, {"spec": {"ephemeralContainers": [DEBUGGER]}}, headers=SMP)
    assert status == 422, obj
    assert (
        "spec.ephemeralContainers: Forbidden" in obj["message"] and "ephemeralcontainers subresource" in obj["message"]
    )
    assert "ephemeralContainers" not in stored(raw)["spec"]
    assert add(raw, DEBUGGER)[0] == 200
    status, _ = raw.json("PATCH", POD, {"metadata": {"labels": {"fine": "yes"}}}, headers=SMP)
    assert status == 200  # other Pod updates keep working once it has one


def test_the_alpha_ephemeral_containers_kind_is_refused_as_a_modern_server_does(raw: Raw, pod: dict[str, Any]) -> None:
    """kubectl 1.20 PUTs `EphemeralContainers`; kube-apiserver 1.22+ answers 400 with this text."""
    body = {"kind": "EphemeralContainers", "apiVersion": "v1", "metadata": {}, "ephemeralContainers": [DEBUGGER]}
    status, obj = raw.json("PUT", SUB, body)
    assert status == 400, obj
    assert 'no kind "EphemeralContainers" is registered for version "v1"' in obj["message"]
    assert "ephemeralContainers" not in stored(raw)["spec"]


def test_discovery_lists_the_subresource(raw: Raw) -> None:
    status, doc = raw.json("GET", "/api/v1")
    assert status == 200
    [entry] = [r for r in doc["resources"] if r["name"] == "pods/ephemeralcontainers"]
    assert entry["kind"] == "Pod" and sorted(entry["verbs"]) == ["get", "patch", "update"]


def test_unknown_subresource_404_carries_empty_details(raw: Raw, pod: dict[str, Any]) -> None:
    """kubectl debug reads `details.name` of this 404; without `details` it panicked."""
    status, obj = raw.json("GET", f"{POD}/nosuchthing")
    assert status == 404 and obj["details"] == {}


def test_rbac_needs_patch_on_pods_ephemeralcontainers(raw: Raw, cluster: DevCluster) -> None:
    rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/default"
    for name, resources in (("debugger", ["pods/ephemeralcontainers"]), ("podder", ["pods"])):
        rule = {"apiGroups": [""], "resources": resources, "verbs": ["patch", "get"]}
        status, _ = raw.json(
            "POST", f"{rbac}/roles", {"metadata": {"name": name}, "rules": [rule]}, headers=admin(cluster)
        )
        assert status == 201
        binding = {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "User", "name": name}],
        }
        status, _ = raw.json("POST", f"{rbac}/rolebindings", binding, headers=admin(cluster))
        assert status == 201

    def allowed(user: str) -> bool:
        attributes = {"namespace": "default", "verb": "patch", "resource": "pods", "subresource": "ephemeralcontainers"}
        review = {
            "kind": "SubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1",
            "spec": {"user": user, "resourceAttributes": attributes},
        }
        status, obj = raw.json(
            "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review, headers=admin(cluster)
        )
        assert status == 201, obj
        return bool(obj["status"]["allowed"])

    assert allowed("debugger") is True
    assert allowed("podder") is False


def test_a_pod_cannot_be_created_with_ephemeral_containers(raw: Raw) -> None:
    status, obj = raw.json(
        "POST", "/api/v1/namespaces/default/pods", make_pod("p2", spec={"ephemeralContainers": [DEBUGGER]})
    )
    assert status == 422, obj
    assert "spec.ephemeralContainers: Forbidden: cannot be set on create" in obj["message"]
    assert raw.json("GET", "/api/v1/namespaces/default/pods/p2")[0] == 404
