"""Resource behaviour through the official client and raw HTTPS: CRUD, conflicts, selectors,
graceful deletion, finalizers, owner-reference GC, defaults, the status subresource, patches."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from devcluster import DevCluster
from tests.support.clients.rawhttp import Raw
from tests.support.factories import make_crd, make_node, make_pod

PODS = "/api/v1/namespaces/default/pods"


def test_crud_on_every_builtin_resource_with_the_official_client(api_client: Any) -> None:
    core = client.CoreV1Api(api_client)
    leases = client.CoordinationV1Api(api_client)
    events = client.EventsV1Api(api_client)
    admission = client.AdmissionregistrationV1Api(api_client)
    ns = core.create_namespace({"metadata": {"name": "team"}})
    assert ns.status.phase == "Active"
    cm = core.create_namespaced_config_map("team", {"metadata": {"name": "c1"}, "data": {"a": "b"}})
    cm.data["a"] = "c"
    assert core.replace_namespaced_config_map("c1", "team", cm).data == {"a": "c"}
    core.create_namespaced_service_account("team", {"metadata": {"name": "sa1"}})
    core.create_namespaced_event(
        "team", {"metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "p1"}, "reason": "R"}
    )
    events.create_namespaced_event(
        "team", {"metadata": {"name": "e2"}, "eventTime": "2025-01-01T00:00:00.000000Z", "reason": "R",
                 "action": "A", "reportingController": "x", "reportingInstance": "y"}
    )  # fmt: skip
    lease = leases.create_namespaced_lease(
        "kube-node-lease", {"metadata": {"name": "n1"}, "spec": {"holderIdentity": "n1"}}
    )
    lease.spec.lease_duration_seconds = 40
    assert leases.replace_namespaced_lease("n1", "kube-node-lease", lease).spec.lease_duration_seconds == 40
    admission.create_mutating_webhook_configuration({"metadata": {"name": "nebula"}, "webhooks": []})
    core.create_node(make_node("n1"))
    assert [n.metadata.name for n in core.list_node().items] == ["n1"]
    assert core.read_namespaced_service_account("sa1", "team").metadata.uid
    assert len(core.list_namespaced_event("team").items) == 1
    assert len(events.list_namespaced_event("team").items) == 1
    assert admission.read_mutating_webhook_configuration("nebula").metadata.name == "nebula"
    core.delete_namespaced_config_map("c1", "team")
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_config_map("c1", "team")
    assert missing.value.status == 404
    core.delete_namespace("team")
    with pytest.raises(ApiException) as gone:
        leases.read_namespaced_lease("n1", "team")
    assert gone.value.status == 404


def test_bookkeeping_uid_resource_version_generation_and_generate_name(core: Any) -> None:
    first = core.create_namespaced_pod("default", make_pod(metadata={"generateName": "web-", "name": None}))
    assert first.metadata.name.startswith("web-") and len(first.metadata.name) == len("web-") + 5
    assert first.metadata.uid and first.metadata.creation_timestamp and first.metadata.generation == 1
    second = core.create_namespaced_config_map("default", {"metadata": {"name": "c"}})
    assert int(second.metadata.resource_version) > int(first.metadata.resource_version)
    patched = core.patch_namespaced_pod(first.metadata.name, "default", {"metadata": {"labels": {"a": "b"}}})
    assert patched.metadata.generation == 1
    patched = core.patch_namespaced_pod(first.metadata.name, "default", {"spec": {"activeDeadlineSeconds": 5}})
    assert patched.metadata.generation == 2 and patched.metadata.uid == first.metadata.uid


def test_pod_defaults_that_clients_rely_on(raw: Raw) -> None:
    status, pod = raw.json("POST", PODS, make_pod(spec={"containers": [{"name": "m", "image": "busybox"}]}))
    assert status == 201
    assert pod["status"]["phase"] == "Pending" and pod["status"]["qosClass"] == "BestEffort"
    spec = pod["spec"]
    assert (spec["restartPolicy"], spec["schedulerName"], spec["terminationGracePeriodSeconds"]) == (
        "Always", "default-scheduler", 30,
    )  # fmt: skip
    container = spec["containers"][0]
    assert container["imagePullPolicy"] == "Always" and container["terminationMessagePolicy"] == "File"


def test_secret_type_defaults_to_opaque_and_string_data_is_merged(core: Any) -> None:
    secret = core.create_namespaced_secret(
        "default", {"metadata": {"name": "s"}, "data": {"a": "eA=="}, "stringData": {"b": "hello"}}
    )
    assert secret.type == "Opaque" and secret.string_data is None
    assert base64.b64decode(secret.data["b"]) == b"hello" and secret.data["a"] == "eA=="


def test_a_stale_put_gets_409_conflict(core: Any) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "c"}, "data": {"v": "1"}})
    first = core.read_namespaced_config_map("c", "default")
    second = core.read_namespaced_config_map("c", "default")
    first.data["v"] = "2"
    core.replace_namespaced_config_map("c", "default", first)
    second.data["v"] = "3"
    with pytest.raises(ApiException) as stale:
        core.replace_namespaced_config_map("c", "default", second)
    assert stale.value.status == 409 and '"reason":"Conflict"' in stale.value.body.replace(" ", "")
    with pytest.raises(ApiException) as missing:
        core.replace_namespaced_config_map("nope", "default", {"metadata": {"name": "nope"}})
    assert missing.value.status == 404


def test_label_and_field_selectors_filter_lists(core: Any) -> None:
    core.create_node(make_node("n1"))
    for name, labels, node in (("a", {"app": "web"}, "n1"), ("b", {"app": "db"}, None), ("c", {}, None)):
        spec = {"nodeName": node} if node else {"schedulerName": "none"}
        core.create_namespaced_pod("default", make_pod(name, metadata={"labels": labels}, spec=spec))

    def names(**kwargs: Any) -> list[str]:
        return [p.metadata.name for p in core.list_namespaced_pod("default", **kwargs).items]

    assert names(label_selector="app=web") == ["a"]
    assert names(label_selector="app in (web,db)") == ["a", "b"]
    assert names(label_selector="!app") == ["c"]
    assert names(field_selector="spec.nodeName=n1") == ["a"]
    assert names(field_selector="metadata.name!=a,status.phase=Pending") == ["b", "c"]
    everywhere = core.list_pod_for_all_namespaces(field_selector="metadata.namespace=default").items
    assert [p.metadata.name for p in everywhere] == ["a", "b", "c"]
    with pytest.raises(ApiException) as bad:
        core.list_namespaced_pod("default", label_selector="app in (web")
    assert bad.value.status == 400


def test_graceful_deletion_of_a_bound_pod_waits_for_the_grace_zero_delete(core: Any) -> None:
    core.create_node(make_node("n1"))
    core.create_namespaced_pod("default", make_pod("bound", spec={"nodeName": "n1"}))
    core.create_namespaced_pod("default", make_pod("unbound", spec={"schedulerName": "none"}))
    core.delete_namespaced_pod("unbound", "default")
    with pytest.raises(ApiException):
        core.read_namespaced_pod("unbound", "default")
    deleting = core.delete_namespaced_pod("bound", "default")
    assert deleting.metadata.deletion_timestamp is not None
    pod = core.read_namespaced_pod("bound", "default")
    assert pod.metadata.deletion_grace_period_seconds == 30
    shorter = core.delete_namespaced_pod("bound", "default", grace_period_seconds=5)
    assert shorter.metadata.deletion_grace_period_seconds == 5
    core.delete_namespaced_pod("bound", "default", grace_period_seconds=0)
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("bound", "default")
    assert gone.value.status == 404


def test_finalizers_keep_an_object_until_the_last_one_is_removed(core: Any) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "c", "finalizers": ["a/x", "a/y"]}})
    core.delete_namespaced_config_map("c", "default")
    held = core.read_namespaced_config_map("c", "default")
    assert held.metadata.deletion_timestamp is not None and held.metadata.deletion_grace_period_seconds == 0
    core.patch_namespaced_config_map("c", "default", [{"op": "remove", "path": "/metadata/finalizers/0"}])
    assert core.read_namespaced_config_map("c", "default").metadata.finalizers == ["a/y"]
    core.patch_namespaced_config_map("c", "default", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_config_map("c", "default")
    assert gone.value.status == 404


def test_delete_preconditions_mismatch_gives_409(core: Any) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "c"}})
    with pytest.raises(ApiException) as mismatch:
        core.delete_namespaced_config_map("c", "default", body={"preconditions": {"uid": "not-the-uid"}})
    assert mismatch.value.status == 409


def test_a_secret_owned_by_a_pod_is_collected_when_the_pod_goes(cluster: DevCluster, core: Any) -> None:
    pod = core.create_namespaced_pod("default", make_pod("owner", spec={"schedulerName": "none"}))
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "owner", "uid": pod.metadata.uid}
    core.create_namespaced_secret("default", {"metadata": {"name": "owner-connect", "ownerReferences": [owner]}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "kept"}})
    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "kept", "uid": "live-or-not"}
    core.create_namespaced_config_map("default", {"metadata": {"name": "two", "ownerReferences": [owner, other]}})
    core.delete_namespaced_pod("owner", "default")
    with pytest.raises(ApiException):
        core.read_namespaced_secret("owner-connect", "default")
    deleted = [c for c in cluster.store.history() if c.type == "DELETED"]
    # The owner first, then its dependents in no particular order (as Kubernetes' collector).
    assert deleted[0].name == "owner" and sorted(c.name for c in deleted[1:]) == ["owner-connect", "two"]
    assert core.read_namespaced_config_map("kept", "default").metadata.name == "kept"


def test_status_subresource_only_touches_status_and_main_updates_ignore_it(core: Any) -> None:
    core.create_namespaced_pod("default", make_pod(spec={"schedulerName": "none"}))
    running = core.patch_namespaced_pod_status(
        "p1", "default", {"status": {"phase": "Running"}, "spec": {"activeDeadlineSeconds": 5}}
    )
    assert running.status.phase == "Running" and running.spec.active_deadline_seconds is None
    ignored = core.patch_namespaced_pod(
        "p1", "default", {"status": {"phase": "Failed"}, "metadata": {"labels": {"a": "b"}}}
    )
    assert ignored.status.phase == "Running" and ignored.metadata.labels == {"a": "b"}
    node = core.create_node(make_node("n1"))
    node.status.conditions[0].status = "False"
    assert core.replace_node_status("n1", node).status.conditions[0].status == "False"


def test_a_pods_status_subresource_takes_its_labels_and_annotations_but_not_its_owners(core: Any) -> None:
    """podStatusStrategy: a pods/status write keeps spec, ownerReferences and deletionTimestamp
    but takes labels, annotations and finalizers (what lets a kubelet write both at once)."""
    owner = [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u"}]
    core.create_namespaced_pod("default", make_pod(spec={"schedulerName": "none"}, annotations={"kept": "1"}))
    body = {
        "status": {"phase": "Running"},
        "metadata": {"labels": {"x": "y"}, "annotations": {"a": "b"}, "ownerReferences": owner},
    }
    running = core.patch_namespaced_pod_status("p1", "default", body)
    assert running.status.phase == "Running" and running.metadata.labels == {"x": "y"}
    assert running.metadata.annotations == {"kept": "1", "a": "b"} and not running.metadata.owner_references
    running.metadata.annotations = {"only": "this"}
    replaced = core.replace_namespaced_pod_status("p1", "default", running)
    assert replaced.metadata.annotations == {"only": "this"} and replaced.status.phase == "Running"


def test_strategic_merge_patch_merges_containers_by_name(raw: Raw) -> None:
    pod = make_pod(
        spec={"schedulerName": "none", "containers": [{"name": "a", "image": "x:1"}, {"name": "b", "image": "y:1"}]}
    )
    raw.json("POST", PODS, pod)
    body = {
        "spec": {
            "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
            "containers": [{"name": "b", "image": "y:2"}],
        }
    }
    status, patched = raw.json(
        "PATCH", PODS + "/p1", body, headers={"Content-Type": "application/strategic-merge-patch+json"}
    )
    assert status == 200
    assert [(c["name"], c["image"]) for c in patched["spec"]["containers"]] == [("a", "x:1"), ("b", "y:2")]
    assert "$setElementOrder/containers" not in patched["spec"]


def test_server_side_apply_creates_then_updates(raw: Raw) -> None:
    headers = {"Content-Type": "application/apply-patch+yaml"}
    manifest = make_pod("p2", metadata={"labels": {"v": "1"}})
    status, created = raw.json("PATCH", PODS + "/p2?fieldManager=kubectl&force=false", manifest, headers=headers)
    assert status == 201 and created["metadata"]["labels"] == {"v": "1"}
    manifest["metadata"]["labels"] = {"v": "2"}
    status, updated = raw.json("PATCH", PODS + "/p2?fieldManager=kubectl", manifest, headers=headers)
    assert status == 200 and updated["metadata"]["labels"] == {"v": "2"}


def test_dry_run_validates_without_storing(raw: Raw) -> None:
    status, pod = raw.json("POST", PODS + "?dryRun=All", make_pod())
    assert status == 201 and pod["metadata"]["name"] == "p1"
    assert raw.json("GET", PODS + "/p1")[0] == 404
    assert raw.json("POST", PODS + "?dryRun=All", {"metadata": {"name": "bad"}, "spec": {}})[0] == 422


def test_custom_resources_are_stored_generically_with_their_status_subresource(raw: Raw) -> None:
    crd = make_crd("Widget", "example.com", subresources={"status": {}})
    assert raw.json("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)[0] == 201
    base = "/apis/example.com/v1/namespaces/default/widgets"
    status, widget = raw.json(
        "POST",
        base,
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w"},
            "spec": {"n": 1},
            "status": {"s": 1},
        },
    )
    assert status == 201 and "status" not in widget and widget["metadata"]["generation"] == 1
    merge = {"Content-Type": "application/merge-patch+json"}
    status, widget = raw.json("PATCH", base + "/w/status", {"status": {"ok": True}}, headers=merge)
    assert status == 200 and widget["status"] == {"ok": True} and widget["metadata"]["generation"] == 1
    status, widget = raw.json("PATCH", base + "/w", {"spec": {"n": 2}}, headers=merge)
    assert widget["metadata"]["generation"] == 2
    strategic = {"Content-Type": "application/strategic-merge-patch+json"}
    assert raw.json("PATCH", base + "/w", {"spec": {"n": 3}}, headers=strategic)[0] == 415
    assert raw.json("DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com")[0] == 200
    assert raw.json("GET", base + "/w")[0] == 404


def test_binding_assigns_a_node_once(raw: Raw) -> None:
    raw.json("POST", PODS, make_pod(spec={"schedulerName": "none"}))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p1"},
        "target": {"kind": "Node", "name": "n9"},
    }
    assert raw.json("POST", PODS + "/p1/binding", binding)[0] == 201
    pod = raw.json("GET", PODS + "/p1")[1]
    assert pod["spec"]["nodeName"] == "n9"
    assert [c["type"] for c in pod["status"]["conditions"]] == ["PodScheduled"]
    assert raw.json("POST", PODS + "/p1/binding", binding)[0] == 409


def test_table_output_when_the_accept_header_asks_for_it(raw: Raw) -> None:
    raw.json("POST", PODS, make_pod(metadata={"labels": {"app": "demo"}}, spec={"schedulerName": "none"}))
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    status, table = raw.json("GET", PODS + "?limit=500", headers={"Accept": accept})
    assert status == 200 and table["kind"] == "Table" and table["metadata"]["resourceVersion"]
    assert table["rows"][0]["cells"][0] == "p1"
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert table["rows"][0]["object"]["metadata"]["labels"] == {"app": "demo"}


def test_collection_cascades_through_dependents_of_dependents(cluster: DevCluster, core: Any) -> None:
    pod = core.create_namespaced_pod("default", make_pod("root", spec={"schedulerName": "none"}))
    by_pod = {"apiVersion": "v1", "kind": "Pod", "name": "root", "uid": pod.metadata.uid}
    secret = core.create_namespaced_secret("default", {"metadata": {"name": "child", "ownerReferences": [by_pod]}})
    by_secret = {"apiVersion": "v1", "kind": "Secret", "name": "child", "uid": secret.metadata.uid}
    core.create_namespaced_config_map("default", {"metadata": {"name": "grandchild", "ownerReferences": [by_secret]}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "bystander"}})
    core.delete_namespaced_pod("root", "default")
    deleted = [c.name for c in cluster.store.history() if c.type == "DELETED"]
    assert deleted == ["root", "child", "grandchild"]
    assert core.read_namespaced_config_map("bystander", "default").metadata.name == "bystander"
