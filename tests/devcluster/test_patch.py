"""JSON merge patch, strategic merge patch and JSON patch: tables of cases plus a few properties."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devcluster import patch
from devcluster.clone import clone
from tests.support.factories import make_pod

_scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3)
_keys = st.sampled_from(["a", "b", "c", "d"])
_json = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_keys, children, max_size=3),
    max_leaves=10,
)
_objects = st.dictionaries(_keys, _json, max_size=4)
_list_free = st.recursive(_scalars, lambda children: st.dictionaries(_keys, children, max_size=3), max_leaves=10)


@pytest.mark.parametrize(
    ("target", "merge", "expected"),
    [
        # The RFC 7386 appendix A examples.
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"a": "foo"}, None, None),
        ({"a": "foo"}, "bar", "bar"),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_json_merge_patch_follows_rfc7386(target: Any, merge: Any, expected: Any) -> None:
    assert patch.json_merge_patch(target, merge) == expected


def test_json_merge_patch_of_kubectl_label_removal() -> None:
    pod = {"metadata": {"name": "p1", "labels": {"a": "b", "keep": "x"}}}
    result = patch.json_merge_patch(pod, {"metadata": {"labels": {"a": None}}})
    assert result == {"metadata": {"name": "p1", "labels": {"keep": "x"}}}


@given(_objects, _json)
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_json_merge_patch_never_mutates_its_inputs(target: dict[str, Any], merge: Any) -> None:
    before_target, before_merge = copy.deepcopy(target), copy.deepcopy(merge)
    result = patch.json_merge_patch(target, merge)
    assert target == before_target and merge == before_merge
    if isinstance(result, dict | list):
        assert result is not target and result is not merge


@given(_objects, _json)
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_json_merge_patch_is_idempotent(target: dict[str, Any], merge: Any) -> None:
    once = patch.json_merge_patch(target, merge)
    assert patch.json_merge_patch(once, merge) == once


@given(_objects)
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_json_merge_patch_with_empty_object_is_identity(target: dict[str, Any]) -> None:
    assert patch.json_merge_patch(target, {}) == target


@given(_objects, st.dictionaries(_keys, _list_free, max_size=4))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_strategic_merge_without_lists_or_directives_equals_merge_patch(
    target: dict[str, Any], merge: dict[str, Any]
) -> None:
    assert patch.strategic_merge_patch(target, merge, "ConfigMap") == patch.json_merge_patch(target, merge)


_MAIN = {"name": "main", "image": "nginx:1.26"}
_SIDE = {"name": "side", "image": "busybox"}


@pytest.mark.parametrize(
    ("target", "smp", "expected"),
    [
        pytest.param(
            make_pod(containers=[_MAIN, _SIDE]),
            {"spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}},
            make_pod(containers=[{"name": "main", "image": "nginx:1.27"}, _SIDE]),
            id="containers-merge-by-name",
        ),
        pytest.param(
            make_pod(containers=[_MAIN]),
            {"spec": {"containers": [{"name": "new", "image": "x"}]}},
            make_pod(containers=[_MAIN, {"name": "new", "image": "x"}]),
            id="new-container-appended",
        ),
        pytest.param(
            make_pod(containers=[_MAIN, _SIDE]),
            {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}},
            make_pod(containers=[_MAIN]),
            id="patch-delete-list-element",
        ),
        pytest.param(
            make_pod(containers=[_MAIN, _SIDE]),
            {"spec": {"containers": [{"name": "x", "image": "y"}, {"$patch": "replace"}]}},
            make_pod(containers=[{"name": "x", "image": "y"}]),
            id="patch-replace-list",
        ),
        pytest.param(
            make_pod(containers=[_MAIN, _SIDE]),
            {"spec": {"$setElementOrder/containers": [{"name": "side"}, {"name": "main"}], "containers": [_MAIN]}},
            make_pod(containers=[_SIDE, _MAIN]),
            id="set-element-order",
        ),
        pytest.param(
            make_pod(containers=[{"name": "main", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}]),
            {"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "3"}, {"name": "C"}]}]}},
            make_pod(
                containers=[
                    {"name": "main", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C"}]}
                ]
            ),
            id="env-merge-by-name",
        ),
        pytest.param(
            make_pod(containers=[{"name": "main", "ports": [{"containerPort": 80, "name": "http"}]}]),
            {"spec": {"containers": [{"name": "main", "ports": [{"containerPort": 80, "protocol": "TCP"}]}]}},
            make_pod(
                containers=[{"name": "main", "ports": [{"containerPort": 80, "name": "http", "protocol": "TCP"}]}]
            ),
            id="ports-merge-by-containerPort",
        ),
        pytest.param(
            make_pod(containers=[{"name": "main", "volumeMounts": [{"mountPath": "/a", "name": "v"}]}]),
            {"spec": {"containers": [{"name": "main", "volumeMounts": [{"mountPath": "/b", "name": "w"}]}]}},
            make_pod(
                containers=[
                    {
                        "name": "main",
                        "volumeMounts": [{"mountPath": "/a", "name": "v"}, {"mountPath": "/b", "name": "w"}],
                    }
                ]
            ),
            id="volumeMounts-merge-by-mountPath",
        ),
        pytest.param(
            make_pod(tolerations=[{"key": "a", "operator": "Exists"}]),
            {"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}},
            make_pod(tolerations=[{"key": "b", "operator": "Exists"}]),
            id="tolerations-are-atomic",
        ),
        pytest.param(
            make_pod(schedulingGates=[{"name": "a"}, {"name": "b"}]),
            {"spec": {"schedulingGates": [{"name": "a", "$patch": "delete"}]}},
            make_pod(schedulingGates=[{"name": "b"}]),
            id="scheduling-gate-removed-by-name",
        ),
        pytest.param(
            make_pod(nodeSelector={"a": "1", "b": "2"}),
            {"spec": {"nodeSelector": {"a": None, "c": "3"}}},
            make_pod(nodeSelector={"b": "2", "c": "3"}),
            id="maps-merge-and-null-deletes",
        ),
        pytest.param(
            make_pod(nodeSelector={"a": "1"}),
            {"spec": {"nodeSelector": {"$patch": "replace", "z": "9"}}},
            make_pod(nodeSelector={"z": "9"}),
            id="map-patch-replace",
        ),
        pytest.param(
            make_pod(nodeSelector={"a": "1"}, restartPolicy="Never"),
            {"spec": {"nodeSelector": {"$patch": "delete"}}},
            make_pod(restartPolicy="Never"),
            id="map-patch-delete",
        ),
        pytest.param(
            make_pod(volumes=[{"name": "v", "emptyDir": {}}]),
            {"spec": {"volumes": [{"name": "v", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/x"}}]}},
            make_pod(volumes=[{"name": "v", "hostPath": {"path": "/x"}}]),
            id="retain-keys",
        ),
        pytest.param(
            make_pod(args=["a", "b"]),
            {"spec": {"args": ["c"]}},
            make_pod(args=["c"]),
            id="other-lists-replaced",
        ),
        pytest.param(
            {"metadata": {"name": "p1"}},
            {"spec": {"containers": [{"name": "main", "$patch": "merge", "env": [{"name": "A", "value": None}]}]}},
            {"metadata": {"name": "p1"}, "spec": {"containers": [{"name": "main", "env": [{"name": "A"}]}]}},
            id="new-subtree-has-no-directives-or-nulls",
        ),
    ],
)
def test_strategic_merge_patch_on_pods(target: dict[str, Any], smp: dict[str, Any], expected: dict[str, Any]) -> None:
    assert patch.strategic_merge_patch(target, smp, "Pod") == expected


@pytest.mark.parametrize(
    ("kind", "target", "smp", "expected"),
    [
        pytest.param(
            "Secret",
            {"metadata": {"finalizers": ["a", "b"]}},
            {"metadata": {"finalizers": ["b", "c"]}},
            {"metadata": {"finalizers": ["a", "b", "c"]}},
            id="finalizers-set-merge",
        ),
        pytest.param(
            "Secret",
            {"metadata": {"finalizers": ["a", "b"]}},
            {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}},
            {"metadata": {"finalizers": ["b"]}},
            id="delete-from-primitive-list",
        ),
        pytest.param(
            "Secret",
            {"metadata": {"finalizers": ["a", "b"]}},
            {"metadata": {"$setElementOrder/finalizers": ["b", "a"]}},
            {"metadata": {"finalizers": ["b", "a"]}},
            id="primitive-set-element-order",
        ),
        pytest.param(
            "ConfigMap",
            {"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}]}},
            {"metadata": {"ownerReferences": [{"uid": "2", "name": "b"}]}},
            {"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}, {"uid": "2", "name": "b"}]}},
            id="owner-references-by-uid",
        ),
        pytest.param(
            "Node",
            {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}},
            {"spec": {"unschedulable": True}},
            {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}], "unschedulable": True}},
            id="cordon",
        ),
        pytest.param(
            "Node",
            {"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "MemoryPressure"}]}},
            {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
            {"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "MemoryPressure"}]}},
            id="node-conditions-by-type",
        ),
        pytest.param(
            "Deployment",
            {"spec": {"template": {"spec": {"containers": [_MAIN, _SIDE]}}}},
            {"spec": {"template": {"spec": {"containers": [{"name": "side", "image": "b2"}]}}}},
            {"spec": {"template": {"spec": {"containers": [_MAIN, {"name": "side", "image": "b2"}]}}}},
            id="pod-template-containers",
        ),
        pytest.param(
            "NodePool",
            {"spec": {"items": [{"name": "a"}]}},
            {"spec": {"items": [{"name": "b"}]}},
            {"spec": {"items": [{"name": "b"}]}},
            id="unknown-kind-lists-replaced",
        ),
    ],
)
def test_strategic_merge_patch_by_kind(
    kind: str, target: dict[str, Any], smp: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert patch.strategic_merge_patch(target, smp, kind) == expected


def test_strategic_merge_patch_of_kubectl_apply_keeps_live_fields() -> None:
    """The exact body kubectl apply sends for a changed image and a new label."""
    live: dict[str, Any] = {
        "metadata": {"name": "p2", "uid": "u", "labels": {"app": "demo"}},
        "spec": {"containers": [{"name": "main", "image": "nginx:1.26", "resources": {}}], "nodeName": "n1"},
        "status": {"phase": "Running"},
    }
    body = {
        "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}\n"}, "labels": {"t": "f"}},
        "spec": {
            "$setElementOrder/containers": [{"name": "main"}],
            "containers": [{"image": "nginx:1.27", "name": "main"}],
        },
    }
    result = patch.strategic_merge_patch(live, body, "Pod")
    assert result["spec"] == {
        "containers": [{"name": "main", "image": "nginx:1.27", "resources": {}}],
        "nodeName": "n1",
    }
    assert result["metadata"]["labels"] == {"app": "demo", "t": "f"}
    assert result["status"] == {"phase": "Running"}
    assert "$setElementOrder/containers" not in result["spec"]
    assert live["spec"]["containers"][0]["image"] == "nginx:1.26"


@pytest.mark.parametrize(
    "smp",
    [
        {"spec": {"containers": [{"image": "no-name"}]}},
        {"spec": {"containers": ["main"]}},
        {"spec": {"$patch": "explode"}},
        {"spec": {"$unknownDirective": 1}},
        {"metadata": {"$retainKeys": "name"}},
        {"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}},
    ],
)
def test_strategic_merge_patch_rejects_bad_patches(smp: dict[str, Any]) -> None:
    with pytest.raises(patch.PatchError):
        patch.strategic_merge_patch(make_pod(containers=[_MAIN]), smp, "Pod")


@given(_objects, st.dictionaries(_keys, _json, max_size=4))
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_strategic_merge_patch_never_stores_directives_or_mutates(target: dict[str, Any], smp: dict[str, Any]) -> None:
    before = copy.deepcopy(target), copy.deepcopy(smp)
    try:
        patch.strategic_merge_patch(target, smp, "Pod")
    except patch.PatchError:
        pass
    assert (target, smp) == before


_DOC = {"foo": "bar", "list": [1, 2, 3], "obj": {"a/b": 1, "m~n": 2}}


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        ([{"op": "add", "path": "/baz", "value": "qux"}], {**_DOC, "baz": "qux"}),
        ([{"op": "add", "path": "/list/1", "value": 9}], {**_DOC, "list": [1, 9, 2, 3]}),
        ([{"op": "add", "path": "/list/-", "value": 9}], {**_DOC, "list": [1, 2, 3, 9]}),
        ([{"op": "add", "path": "/list/3", "value": 9}], {**_DOC, "list": [1, 2, 3, 9]}),
        ([{"op": "add", "path": "", "value": [1]}], [1]),
        ([{"op": "remove", "path": "/foo"}], {"list": [1, 2, 3], "obj": {"a/b": 1, "m~n": 2}}),
        ([{"op": "remove", "path": "/list/0"}], {**_DOC, "list": [2, 3]}),
        ([{"op": "remove", "path": "/obj/a~1b"}], {**_DOC, "obj": {"m~n": 2}}),
        ([{"op": "replace", "path": "/obj/m~0n", "value": 5}], {**_DOC, "obj": {"a/b": 1, "m~n": 5}}),
        (
            [{"op": "move", "from": "/foo", "path": "/obj/foo"}],
            {"list": [1, 2, 3], "obj": {"a/b": 1, "m~n": 2, "foo": "bar"}},
        ),
        ([{"op": "move", "from": "/list/0", "path": "/list/-"}], {**_DOC, "list": [2, 3, 1]}),
        ([{"op": "copy", "from": "/list", "path": "/copy"}], {**_DOC, "copy": [1, 2, 3]}),
        ([{"op": "test", "path": "/list", "value": [1, 2, 3]}], _DOC),
        (
            [{"op": "test", "path": "/foo", "value": "bar"}, {"op": "remove", "path": "/foo"}],
            {"list": [1, 2, 3], "obj": {"a/b": 1, "m~n": 2}},
        ),
    ],
)
def test_json_patch_follows_rfc6902(ops: list[Any], expected: Any) -> None:
    before = copy.deepcopy(_DOC)
    assert patch.json_patch(_DOC, ops) == expected
    assert before == _DOC


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "test", "path": "/foo", "value": "baz"}],
        [{"op": "test", "path": "/list/0", "value": True}],
        [{"op": "remove", "path": "/missing"}],
        [{"op": "replace", "path": "/missing", "value": 1}],
        [{"op": "add", "path": "/missing/x", "value": 1}],
        [{"op": "add", "path": "/list/5", "value": 1}],
        [{"op": "add", "path": "/list/01", "value": 1}],
        [{"op": "remove", "path": "/list/-"}],
        [{"op": "add", "path": "foo", "value": 1}],
        [{"op": "add", "path": "/x"}],
        [{"op": "move", "from": "/obj", "path": "/obj/inner"}],
        [{"op": "frobnicate", "path": "/foo"}],
        [{"path": "/foo"}],
        ["not-an-object"],
        [{"op": "add", "path": "/foo/x", "value": 1}],
    ],
)
def test_json_patch_rejects_failed_tests_and_bad_paths(ops: list[Any]) -> None:
    with pytest.raises(patch.PatchError):
        patch.json_patch(_DOC, ops)


def test_json_patch_is_atomic_for_the_caller() -> None:
    """A failing later operation leaves the caller's document untouched."""
    before = copy.deepcopy(_DOC)
    with pytest.raises(patch.PatchError):
        patch.json_patch(_DOC, [{"op": "remove", "path": "/foo"}, {"op": "test", "path": "/foo", "value": 1}])
    assert _DOC == before


@given(_objects, _keys, _json)
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_json_patch_add_then_remove_is_identity(target: dict[str, Any], key: str, value: Any) -> None:
    if key in target:
        return
    ops = [{"op": "add", "path": f"/{key}", "value": value}, {"op": "remove", "path": f"/{key}"}]
    assert patch.json_patch(target, ops) == target


@given(_objects, _keys, _json)
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_json_patch_test_op_accepts_what_add_wrote(target: dict[str, Any], key: str, value: Any) -> None:
    ops = [{"op": "add", "path": f"/{key}", "value": value}, {"op": "test", "path": f"/{key}", "value": value}]
    assert patch.json_patch(target, ops)[key] == value


def test_clone_is_a_deep_copy_of_json_shaped_data_that_shares_nothing() -> None:
    shared = {"ip": "10.0.0.1"}
    original = {"a": [1, 2.5, True, None, "x", {"b": shared}], "c": shared, "d": {"e": []}}
    copied = clone(original)
    assert copied == copy.deepcopy(original) and list(copied) == list(original)  # equal, and in order
    copied["a"][5]["b"]["ip"] = "changed"
    copied["d"]["e"].append(1)
    assert original == {"a": [1, 2.5, True, None, "x", {"b": {"ip": "10.0.0.1"}}], "c": shared, "d": {"e": []}}
    assert copied["c"] is copied["a"][5]["b"]  # shared within the copy, as deepcopy keeps it
