"""The admission decision: opted-in, unbound Pods get the gate and the tolerations; nothing
else is touched; malformed reviews get a clean 4xx answer."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from kube import names
from placement.admission import MAX_DEPTH, OUTAGE_TAINTS, pod_patch, review
from tests.support.factories import make_pod


def make_review(obj: Any, *, operation: str = "CREATE", uid: str = "u-1") -> bytes:
    request = {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": operation, "object": obj}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


def opted_in(**spec: Any) -> dict[str, Any]:
    """Pod `p` with the opt-in label; `spec` overrides keys of its spec."""
    return make_pod("p", labels={names.ENABLED_LABEL: "true"}, **spec)


def patched(answer: dict[str, Any]) -> list[dict[str, Any]]:
    response = answer["response"]
    if "patch" not in response:
        return []
    assert response["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return ops


FOREVER = [{"key": key, "operator": "Exists", "effect": "NoExecute"} for key in OUTAGE_TAINTS]


def test_an_opted_in_pod_gets_the_gate_a_key_only_toleration_and_outlasts_outages() -> None:
    status, answer = review(make_review(opted_in()))
    assert status == 200 and answer["response"] == {**answer["response"], "uid": "u-1", "allowed": True}
    assert patched(answer) == [
        {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": names.PLACEMENT_GATE}]},
        {
            "op": "add",
            "path": "/spec/tolerations",
            "value": [{"key": names.PROVIDER_KEY, "operator": "Exists", "effect": "NoSchedule"}],
        },
        *({"op": "add", "path": "/spec/tolerations/-", "value": toleration} for toleration in FOREVER),
    ]


def test_existing_gates_and_tolerations_are_kept_and_the_patch_is_idempotent() -> None:
    pod = opted_in(schedulingGates=[{"name": "other"}], tolerations=[{"key": "x", "operator": "Exists"}])
    ops = pod_patch(pod)
    assert [op["path"] for op in ops] == ["/spec/schedulingGates/-", *["/spec/tolerations/-"] * 3]
    done = opted_in(
        schedulingGates=[{"name": names.PLACEMENT_GATE}],
        tolerations=[{"key": names.PROVIDER_KEY, "operator": "Exists"}, *FOREVER],
    )
    assert pod_patch(done) == []


def _apply(pod: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """The few JSON patch ops the webhook uses, applied as the API server would."""
    for op in ops:
        *parents, last = op["path"].strip("/").split("/")
        target: Any = pod
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if op["op"] == "remove":
            del target[last]
        elif isinstance(target, list) and last == "-":
            target.append(op["value"])
        else:
            target[int(last) if isinstance(target, list) else last] = op["value"]
    return pod


def test_the_clusters_300_second_outage_tolerations_become_forever_or_the_configured_seconds() -> None:
    # What the API server's DefaultTolerationSeconds plugin adds before webhooks run.
    defaults = [{**toleration, "tolerationSeconds": 300} for toleration in FOREVER]
    forever = _apply(opted_in(tolerations=[dict(t) for t in defaults]), pod_patch(opted_in(tolerations=defaults)))
    assert forever["spec"]["tolerations"][:2] == FOREVER
    assert pod_patch(forever) == []
    ten_minutes = opted_in(tolerations=[dict(t) for t in defaults])
    _apply(ten_minutes, pod_patch(opted_in(tolerations=defaults), outage_seconds=600))
    assert [t["tolerationSeconds"] for t in ten_minutes["spec"]["tolerations"][:2]] == [600, 600]
    assert pod_patch(ten_minutes, outage_seconds=600) == []
    added = _apply(opted_in(), pod_patch(opted_in(), outage_seconds=0))
    assert [t.get("tolerationSeconds") for t in added["spec"]["tolerations"]] == [None, 0, 0]


@pytest.mark.parametrize(
    "pod",
    [
        {"metadata": {"name": "p"}, "spec": {"containers": []}},
        {"metadata": {"name": "p", "labels": {names.ENABLED_LABEL: "True"}}, "spec": {}},
        opted_in(nodeName="nebula-gpu-a"),
    ],
)
def test_other_pods_are_allowed_untouched(pod: dict[str, Any]) -> None:
    status, answer = review(make_review(pod))
    assert status == 200 and answer["response"]["allowed"] is True and patched(answer) == []


def test_non_create_operations_are_allowed_untouched() -> None:
    status, answer = review(make_review(opted_in(), operation="UPDATE"))
    assert status == 200 and patched(answer) == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "not JSON"),
        (b"[]", "expected kind AdmissionReview"),
        (
            json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1beta1"}).encode(),
            "expected apiVersion",
        ),
        (json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {}}).encode(), "uid"),
        (b"\xff\xfe", "not JSON"),
    ],
)
def test_unreadable_reviews_get_a_400_with_a_message(body: bytes, message: str) -> None:
    status, answer = review(body)
    assert status == 400 and message in answer["message"]


@pytest.mark.parametrize("obj", [None, "pod", {"metadata": {}, "spec": "x"}, {"metadata": {"labels": "x"}, "spec": {}}])
def test_a_broken_pod_in_a_good_review_is_denied_cleanly(obj: Any) -> None:
    status, answer = review(make_review(obj))
    assert status == 200
    response = answer["response"]
    assert response["uid"] == "u-1" and response["allowed"] is False and response["status"]["code"] == 400


def test_an_oversized_body_is_413() -> None:
    status, answer = review(b" " * (3 * 1024 * 1024 + 1))
    assert status == 413 and "too large" not in answer["message"] and "over" in answer["message"]


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 200_000])
def test_I7_json_nested_past_the_bound_is_400_not_a_crash(depth: int) -> None:
    # 200,000 levels overflow the parser's stack (RecursionError); MAX_DEPTH + 1 parses but is refused.
    nested = b'{"kind": "AdmissionReview", "request": ' + b"[" * depth + b"]" * depth + b"}"
    status, answer = review(nested)
    assert status == 400 and f"deeper than {MAX_DEPTH}" in answer["message"]


def test_I7_a_review_nested_within_the_bound_is_read() -> None:
    deep: Any = {}
    for _ in range(MAX_DEPTH - 10):
        deep = {"x": deep}
    status, _answer = review(make_review({"metadata": {"annotations": {}}, "spec": {"containers": []}, "deep": deep}))
    assert status == 200
