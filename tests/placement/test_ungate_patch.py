"""ungate_patch(): the one JSON patch that places a Pod. It tests the uid and our gate's position
first, removes only our gate, and adds the nodeSelector and annotations whether or not the Pod
has those maps, escaping `/` and `~` in keys (RFC 6901). Each case is also applied with the
devcluster's RFC 6902 implementation, so the ops are checked by their effect too."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from devcluster.patch import PatchError, json_patch
from kube import names
from placement.ungate import ungate_patch
from tests.support.factories import make_pod

OTHER = {"name": "example.com/other"}
LATER = {"name": "example.com/later"}
OURS = {"name": names.PLACEMENT_GATE}
PLACED = {names.CAPACITY_TYPE_ANNOTATION: "Spot", names.REGION_ANNOTATION: "us-east-1"}


def gated_pod(
    gates: list[dict[str, str]],
    *,
    node_selector: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Pod `p` (uid `uid-1`) held by `gates`, with `node_selector` and `annotations` when given."""
    selector = {} if node_selector is None else {"nodeSelector": node_selector}
    return make_pod("p", namespace="default", uid="uid-1", annotations=annotations, schedulingGates=gates, **selector)


@pytest.mark.parametrize(
    ("gates", "index", "kept"),
    [
        ([OURS], 0, []),
        ([OURS, OTHER], 0, [OTHER]),
        ([OTHER, OURS, LATER], 1, [OTHER, LATER]),
        ([OTHER, LATER, OURS], 2, [OTHER, LATER]),
    ],
    ids=["only", "first", "middle", "last"],
)
def test_only_our_gate_is_removed_wherever_it_sits(
    gates: list[dict[str, str]], index: int, kept: list[dict[str, str]]
) -> None:
    pod = gated_pod(gates)
    ops = ungate_patch(pod, "gpu-a", PLACED)
    assert ops[:3] == [
        {"op": "test", "path": "/metadata/uid", "value": "uid-1"},
        {"op": "test", "path": f"/spec/schedulingGates/{index}/name", "value": names.PLACEMENT_GATE},
        {"op": "remove", "path": f"/spec/schedulingGates/{index}"},
    ]
    assert json_patch(copy.deepcopy(pod), ops)["spec"]["schedulingGates"] == kept


@pytest.mark.parametrize(
    ("node_selector", "expected_op", "selector_after"),
    [
        (
            None,
            {"op": "add", "path": "/spec/nodeSelector", "value": {names.PROVIDER_KEY: "gpu-a"}},
            {names.PROVIDER_KEY: "gpu-a"},
        ),
        (
            {},
            {"op": "add", "path": "/spec/nodeSelector", "value": {names.PROVIDER_KEY: "gpu-a"}},
            {names.PROVIDER_KEY: "gpu-a"},
        ),
        (
            {"disk": "ssd"},
            {"op": "add", "path": "/spec/nodeSelector/nebula.io~1provider", "value": "gpu-a"},
            {"disk": "ssd", names.PROVIDER_KEY: "gpu-a"},
        ),
    ],
    ids=["absent", "empty", "present"],
)
def test_the_node_selector_is_created_or_extended(
    node_selector: dict[str, str] | None, expected_op: dict[str, Any], selector_after: dict[str, str]
) -> None:
    pod = gated_pod([OURS], node_selector=node_selector)
    ops = ungate_patch(pod, "gpu-a", PLACED)
    assert ops[3] == expected_op
    assert json_patch(copy.deepcopy(pod), ops)["spec"]["nodeSelector"] == selector_after


@pytest.mark.parametrize(
    ("annotations", "annotation_ops", "after"),
    [
        (None, [{"op": "add", "path": "/metadata/annotations", "value": PLACED}], PLACED),
        ({}, [{"op": "add", "path": "/metadata/annotations", "value": PLACED}], PLACED),
        (
            {"team": "ml"},
            [
                {"op": "add", "path": "/metadata/annotations/nebula.io~1capacity-type", "value": "Spot"},
                {"op": "add", "path": "/metadata/annotations/nebula.io~1region", "value": "us-east-1"},
            ],
            {"team": "ml", **PLACED},
        ),
    ],
    ids=["absent", "empty", "present"],
)
def test_annotations_are_created_or_added_key_by_key(
    annotations: dict[str, str] | None, annotation_ops: list[dict[str, Any]], after: dict[str, str]
) -> None:
    pod = gated_pod([OURS], annotations=annotations)
    ops = ungate_patch(pod, "gpu-a", PLACED)
    assert ops[4:-1] == annotation_ops  # the last op adds the spend finalizer
    assert json_patch(copy.deepcopy(pod), ops)["metadata"]["annotations"] == after


def test_slash_and_tilde_in_keys_are_escaped_as_json_pointers() -> None:
    pod = gated_pod([OURS], annotations={"x": "y"})
    ops = ungate_patch(pod, "gpu-a", {"a/b~c": "1", "~/": "2"})
    assert [op["path"] for op in ops[4:-1]] == ["/metadata/annotations/a~1b~0c", "/metadata/annotations/~0~1"]
    assert json_patch(copy.deepcopy(pod), ops)["metadata"]["annotations"] == {"x": "y", "a/b~c": "1", "~/": "2"}


def test_the_uid_test_op_makes_the_patch_fail_for_a_recreated_pod() -> None:
    pod = gated_pod([OURS])
    ops = ungate_patch(pod, "gpu-a", PLACED)
    recreated = copy.deepcopy(pod)
    recreated["metadata"]["uid"] = "uid-2"
    with pytest.raises(PatchError):
        json_patch(recreated, ops)


def test_the_gate_test_op_makes_the_patch_fail_when_the_gates_moved() -> None:
    pod = gated_pod([OTHER, OURS])
    ops = ungate_patch(pod, "gpu-a", PLACED)
    moved = copy.deepcopy(pod)
    moved["spec"]["schedulingGates"] = [OURS]  # the other gate went: ours is now at index 0
    with pytest.raises(PatchError):
        json_patch(moved, ops)
