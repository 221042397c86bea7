"""Label and field selector parsing and matching, table-driven against the API server's semantics."""

from __future__ import annotations

from typing import Any

import pytest

from devcluster import selectors


def _obj(labels: dict[str, str] | None = None, **fields: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": "p1", "namespace": "default"}}
    if labels is not None:
        obj["metadata"]["labels"] = labels
    obj.update(fields)
    return obj


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        ("", {}, True),
        ("   ", {"a": "1"}, True),
        ("app=demo", {"app": "demo"}, True),
        ("app=demo", {"app": "other"}, False),
        ("app=demo", {}, False),
        ("app==demo", {"app": "demo"}, True),
        ("app!=demo", {"app": "demo"}, False),
        ("app!=demo", {"app": "x"}, True),
        ("app!=demo", {}, True),
        ("app in (a, b)", {"app": "b"}, True),
        ("app in (a,b)", {"app": "c"}, False),
        ("app in (a,b)", {}, False),
        ("app notin (a,b)", {"app": "c"}, True),
        ("app notin (a,b)", {"app": "a"}, False),
        ("app notin (a,b)", {}, True),
        ("app", {"app": ""}, True),
        ("app", {}, False),
        ("!app", {}, True),
        ("!app", {"app": "x"}, False),
        ("app=demo,tier=front", {"app": "demo", "tier": "front"}, True),
        ("app=demo,tier=front", {"app": "demo"}, False),
        ("app=demo, !canary, tier in (front,back)", {"app": "demo", "tier": "back"}, True),
        ("nebula.io/pool=gpu-a", {"nebula.io/pool": "gpu-a"}, True),
        ("app=", {"app": ""}, True),
        ("app=", {"app": "x"}, False),
        ("replicas>2", {"replicas": "3"}, True),
        ("replicas>2", {"replicas": "2"}, False),
        ("replicas<2", {"replicas": "x"}, False),
    ],
)
def test_label_selector_matches_like_the_api_server(text: str, labels: dict[str, str], expected: bool) -> None:
    assert selectors.parse_label_selector(text).matches(_obj(labels)) is expected


def test_label_selector_treats_missing_labels_as_empty() -> None:
    assert selectors.parse_label_selector("!app").matches({"metadata": {}})
    assert not selectors.parse_label_selector("app").matches({})


@pytest.mark.parametrize(
    "text",
    [
        "app=demo,",
        ",app",
        "app in ()",
        "app in (a,b",
        "app in a",
        "app ===x",
        "=x",
        "app=-bad-",
        "-app=x",
        "Bad_Prefix/app=x",
        "/app=x",
        "app=" + "v" * 64,
        "a" * 64 + "=x",
        "app>x",
        "app notin",
        "!",
        "app x",
    ],
)
def test_label_selector_rejects_malformed_text_with_selector_error(text: str) -> None:
    with pytest.raises(selectors.SelectorError, match="label"):
        selectors.parse_label_selector(text)


def test_selector_error_is_a_value_error() -> None:
    assert issubclass(selectors.SelectorError, ValueError)


@pytest.mark.parametrize(
    ("text", "obj", "expected"),
    [
        ("", _obj(), True),
        ("metadata.name=p1", _obj(), True),
        ("metadata.name==p1", _obj(), True),
        ("metadata.name=p2", _obj(), False),
        ("metadata.name!=p2", _obj(), True),
        ("metadata.namespace=default", _obj(), True),
        ("spec.nodeName=n1", _obj(spec={"nodeName": "n1"}), True),
        ("spec.nodeName=", _obj(spec={}), True),
        ("spec.nodeName=", _obj(spec={"nodeName": "n1"}), False),
        ("spec.nodeName!=", _obj(spec={"nodeName": "n1"}), True),
        ("spec.nodeName=n1,status.phase!=Succeeded,status.phase!=Failed", _obj(spec={"nodeName": "n1"}), True),
        (
            "spec.nodeName=n1,status.phase!=Succeeded,status.phase!=Failed",
            _obj(spec={"nodeName": "n1"}, status={"phase": "Failed"}),
            False,
        ),
        ("spec.unschedulable=true", _obj(spec={"unschedulable": True}), True),
        ("spec.unschedulable=true", _obj(spec={"unschedulable": False}), False),
        ("type=Warning", _obj(type="Warning"), True),
        (
            "involvedObject.name=p1,involvedObject.namespace=default,involvedObject.uid=u1",
            _obj(involvedObject={"name": "p1", "namespace": "default", "uid": "u1"}),
            True,
        ),
        (
            "involvedObject.name=n1,involvedObject.namespace=,involvedObject.kind=Node",
            _obj(involvedObject={"name": "n1", "kind": "Node"}),
            True,
        ),
        ("involvedObject.uid=u2", _obj(involvedObject={"name": "p1", "uid": "u1"}), False),
        ("metadata.name=a\\,b", {"metadata": {"name": "a,b"}}, True),
        ("metadata.name=a\\=b", {"metadata": {"name": "a=b"}}, True),
        ("metadata.name=p1 ", _obj(), False),
        ("metadata=x", _obj(), False),
    ],
)
def test_field_selector_compares_dotted_paths(text: str, obj: dict[str, Any], expected: bool) -> None:
    assert selectors.parse_field_selector(text).matches(obj) is expected


@pytest.mark.parametrize("text", ["metadata.name", "=p1", "metadata.name=p1,", "a=b,,c=d", "metadata.name=a\\b"])
def test_field_selector_rejects_malformed_text(text: str) -> None:
    with pytest.raises(selectors.SelectorError, match="field selector"):
        selectors.parse_field_selector(text)


def test_field_selector_exact_exposes_pinned_values_for_narrowing_a_scan() -> None:
    selector = selectors.parse_field_selector("metadata.name=p1,spec.nodeName!=n1")
    assert selector.exact("metadata.name") == "p1"
    assert selector.exact("spec.nodeName") is None
    assert selectors.parse_field_selector("").empty
    assert selectors.parse_label_selector("").empty


def test_matching_does_not_mutate_the_object() -> None:
    obj = _obj({"a": "1"}, spec={"nodeName": "n1"})
    before = repr(obj)
    selectors.parse_label_selector("a in (1), !b").matches(obj)
    selectors.parse_field_selector("spec.nodeName=n1,status.phase=Running").matches(obj)
    assert repr(obj) == before
