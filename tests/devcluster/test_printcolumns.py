"""CRD printer columns: client-go's JSONPath subset, the table convertor's cells (first match
only, typed, dates as ages) and the validation that makes a CRD with a bad column invalid."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from devcluster import DevCluster, jsonpath, tables
from devcluster.printcolumns import PrinterColumn, cells, columns_of
from tests.support.clients.rawhttp import Raw
from tests.support.factories import make_crd

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
POOL: dict[str, Any] = {
    "metadata": {"name": "gpu", "creationTimestamp": "2026-01-01T11:55:00Z", "annotations": {"nebula.io/x": "y"}},
    "spec": {"providers": [{"name": "aws", "regions": ["us"]}, {"name": "gcp"}], "weight": 2.5, "on": True},
    "status": {
        "conditions": [{"type": "Synced", "status": "False"}, {"type": "Ready", "status": "True"}],
        "count": 3,
    },
}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".spec.providers[*].name", ["aws", "gcp"]),
        (".spec.providers[0].regions", [["us"]]),
        (".spec.providers[-1].name", ["gcp"]),
        (".spec.providers[0:1].name", ["aws"]),
        ('.status.conditions[?(@.type=="Ready")].status', ["True"]),
        (".status.conditions[?(@.type != 'Ready')].type", ["Synced"]),
        (".spec.providers[?(@.regions)].name", ["aws"]),
        (".status.conditions[?(@.status=='Unknown')].type", []),
        (".metadata.annotations['nebula.io/x']", ["y"]),
        (r".metadata.annotations.nebula\.io/x", ["y"]),
        (".spec.missing.deeper", []),
        ("..name", ["gpu", "aws", "gcp"]),
        ("{.status.count}", [3]),
        (".status.*", [POOL["status"]["conditions"], 3]),
    ],
)
def test_jsonpath_selects_what_client_go_selects(path: str, expected: list[Any]) -> None:
    assert jsonpath.parse(path).find(POOL) == expected


@pytest.mark.parametrize("path", [".spec[", ".spec.providers[?(@.name ~ 'x')]", ".spec.providers[abc]", "spec"])
def test_a_path_that_does_not_parse_is_a_jsonpath_error(path: str) -> None:
    with pytest.raises(jsonpath.JsonPathError):
        jsonpath.parse(path)


def test_an_index_into_a_map_is_an_error_and_the_cell_is_empty() -> None:
    with pytest.raises(jsonpath.JsonPathError, match="not array"):
        jsonpath.parse(".spec[0]").find(POOL)
    assert cells([PrinterColumn("X", "string", "", "", 0, ".spec[0]")], POOL, NOW) == [None]


def column(kind: str, path: str) -> PrinterColumn:
    return PrinterColumn("C", kind, "", "", 0, path)


@pytest.mark.parametrize(
    ("kind", "path", "cell"),
    [
        ("string", ".spec.providers[*].name", "aws"),  # the first match only, as kube-apiserver prints
        ("string", ".spec.providers[0]", '{"name":"aws","regions":["us"]}'),
        ("string", ".status.count", "3"),
        ("string", ".spec.on", "true"),
        ("integer", ".status.count", 3),
        ("integer", ".spec.weight", 2),
        ("integer", ".spec.strategy", None),
        ("number", ".status.count", 3.0),
        ("boolean", ".spec.on", True),
        ("boolean", ".status.count", None),
        ("date", ".metadata.creationTimestamp", "5m"),
        ("date", ".metadata.name", "<invalid>"),
        ("date", ".status.count", None),
        ("string", ".spec.absent", None),
    ],
)
def test_cells_are_typed_as_the_crd_table_convertor_types_them(kind: str, path: str, cell: Any) -> None:
    assert cells([column(kind, path)], POOL, NOW) == [cell]


def test_a_version_without_columns_gets_age_and_descriptions_default_to_the_path() -> None:
    (age,) = columns_of({"name": "v1"}, "spec.versions[0]")
    assert (age.name, age.type, age.json_path) == ("Age", "date", ".metadata.creationTimestamp")
    assert column("string", ".spec.x").definition()["description"].endswith("(in JSONPath format): .spec.x")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"name": "X", "type": "text", "jsonPath": ".a"}, 'type: Unsupported value: "text"'),
        ({"name": "X", "type": "string", "jsonPath": "a.b"}, "must be a simple json path starting with ."),
        ({"name": "X", "type": "string", "jsonPath": ".a["}, "jsonPath: Invalid value"),
        ({"type": "string", "jsonPath": ".a"}, "name: Required value"),
        ({"name": "X", "type": "string", "jsonPath": ".a", "priority": -1}, "priority: Invalid value"),
    ],
)
def test_a_bad_column_makes_the_crd_invalid(raw: Raw, spec: dict[str, Any], message: str) -> None:
    status, body = raw.json("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd([spec]))
    assert status == 422 and "spec.versions[0].additionalPrinterColumns[0]." in body["message"]
    assert message in body["message"]
    assert raw.json("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.io")[0] == 404


def crd(columns: list[dict[str, Any]]) -> dict[str, Any]:
    return make_crd("Widget", "example.io", names={"singular": "widget"}, additionalPrinterColumns=columns)


def test_a_custom_resource_table_has_name_then_the_crd_columns(cluster: DevCluster, raw: Raw) -> None:
    columns: list[dict[str, Any]] = [
        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
        {"name": "Colour", "type": "string", "jsonPath": ".spec.colour", "priority": 1, "description": "Paint."},
    ]
    cluster.apply_manifest(crd(columns))
    created = datetime.now(UTC) - timedelta(minutes=3)
    widget = {"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 4}}
    raw.json("POST", "/apis/example.io/v1/namespaces/default/widgets", widget)
    rt = cluster.registry.lookup("example.io", "v1", "widgets")
    assert rt is not None
    stored = cluster.store.get(rt.storage_key, "default", "w")
    assert stored is not None
    stored = dict(stored, metadata=dict(stored["metadata"], creationTimestamp=created.strftime("%Y-%m-%dT%H:%M:%SZ")))
    table = tables.to_table("Widget", [stored], resource_version="1", custom=rt.printer_columns)
    assert [(c["name"], c["priority"]) for c in table["columnDefinitions"]] == [("Name", 0), ("Size", 0), ("Colour", 1)]
    assert table["columnDefinitions"][2]["description"] == "Paint."
    assert table["rows"][0]["cells"] == ["w", 4, None]
