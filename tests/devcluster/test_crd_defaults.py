"""CRD structural defaults: a version's `default:` values are applied on create and update, and on
read of objects stored before the default existed (GET, list, watch), as the real server does;
so `kubectl get nodepools` prints the STRATEGY a user did not write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster import DevCluster, crddefaults
from tests.devcluster.test_kubectl import Kubectl, kubectl_for
from tests.support.clients.rawhttp import Raw
from tests.support.fixtures import ROOT

NODEPOOLS = "/apis/nebula.io/v1alpha1/nodepools"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"


@pytest.fixture
def kubectl(cluster: DevCluster, tmp_path: Path) -> Kubectl:
    return kubectl_for("1.37", cluster, tmp_path)


def widget_crd(spec_properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": {"type": "object", "properties": spec_properties}},
                        }
                    },
                }
            ],
        },
    }


def test_nodepool_strategy_column_shows_the_default(kubectl: Kubectl, cluster: DevCluster, tmp_path: Path) -> None:
    cluster.load_manifests((ROOT / "deploy/crds/nodepool.yaml").read_text())
    manifest = tmp_path / "pool.yaml"
    pool = {"apiVersion": "nebula.io/v1alpha1", "kind": "NodePool", "metadata": {"name": "gpus"}}
    manifest.write_text(yaml.safe_dump({**pool, "spec": {"providers": [{"name": "gpu"}]}}))
    kubectl.run("create", "-f", str(manifest))
    header, row = (line.split() for line in kubectl.run("get", "nodepools").strip().splitlines())
    assert header[:2] == ["NAME", "STRATEGY"] and row[:2] == ["gpus", "Ordered"]
    spec = json.loads(kubectl.run("get", "nodepool", "gpus", "-o", "json"))["spec"]
    assert spec == {
        "providers": [{"name": "gpu"}],
        "capacityTypes": ["OnDemand", "Spot"],
        "strategy": "Ordered",
        "failover": {"blocklistTTL": "5m"},
        "egress": {"mode": "Open"},
        "provisioningTimeout": "10m",
    }
    # An update that drops a defaulted field gets it back; a value the user set is kept.
    manifest.write_text(yaml.safe_dump({**pool, "spec": {"providers": [{"name": "gpu"}], "strategy": "LowestPrice"}}))
    kubectl.run("replace", "-f", str(manifest))
    spec = json.loads(kubectl.run("get", "nodepool", "gpus", "-o", "json"))["spec"]
    kept = (spec["strategy"], spec["failover"], spec["provisioningTimeout"])
    assert kept == ("LowestPrice", {"blocklistTTL": "5m"}, "10m")


def test_objects_stored_before_a_default_read_with_it(raw: Raw) -> None:
    assert raw.json("POST", CRDS, widget_crd({"size": {"type": "string"}}))[0] == 201
    assert raw.json("POST", WIDGETS, {"metadata": {"name": "w"}, "spec": {"size": "L"}})[0] == 201
    old = raw.json("GET", f"{CRDS}/widgets.example.com")[1]
    defaulted = widget_crd({"size": {"type": "string"}, "color": {"type": "string", "default": "blue"}})
    defaulted["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
    assert raw.json("PUT", f"{CRDS}/widgets.example.com", defaulted)[0] == 200
    code, got = raw.json("GET", f"{WIDGETS}/w")
    assert (code, got["spec"]) == (200, {"size": "L", "color": "blue"})
    (listed,) = raw.json("GET", WIDGETS)[1]["items"]
    assert listed["spec"]["color"] == "blue"
    status, _, body = raw.request("GET", f"{WIDGETS}?watch=true&timeoutSeconds=1")
    assert status == 200
    (event,) = [json.loads(line) for line in body.splitlines() if line.strip()]
    assert event["type"] == "ADDED" and event["object"]["spec"]["color"] == "blue"


@pytest.mark.parametrize(
    ("schema", "value", "expected"),
    [
        ({"properties": {"a": {"default": 1}}}, {}, {"a": 1}),
        ({"properties": {"a": {"default": 1}}}, {"a": 2}, {"a": 2}),
        ({"properties": {"a": {"default": 1}}}, {"a": None}, {"a": 1}),
        ({"properties": {"a": {"default": 1, "nullable": True}}}, {"a": None}, {"a": None}),
        (
            {"properties": {"o": {"default": {}, "properties": {"x": {"default": "y"}}}}},
            {},
            {"o": {"x": "y"}},
        ),
        (
            {"properties": {"l": {"items": {"properties": {"k": {"default": 0}}}}}},
            {"l": [{}, {"k": 5}]},
            {"l": [{"k": 0}, {"k": 5}]},
        ),
        (
            {"properties": {"m": {"additionalProperties": {"properties": {"k": {"default": "d"}}}}}},
            {"m": {"one": {}, "two": {"k": "t"}}},
            {"m": {"one": {"k": "d"}, "two": {"k": "t"}}},
        ),
    ],
)
def test_apply_follows_structural_defaulting(schema: dict[str, Any], value: Any, expected: Any) -> None:
    crddefaults.apply(schema, value)
    assert value == expected


def test_metadata_is_never_defaulted() -> None:
    schema = {"properties": {"metadata": {"properties": {"name": {"default": "x"}}}, "spec": {"default": {}}}}
    obj: dict[str, Any] = {"metadata": {}}
    crddefaults.apply(schema, obj, top=True)
    assert obj == {"metadata": {}, "spec": {}}
    assert crddefaults.defaulted(None, obj) is obj
