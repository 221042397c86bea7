"""A CRD version's `additionalPrinterColumns`, printed as apiextensions-apiserver's table
convertor prints them.

`registry.crd_resource_types` calls `columns_of` (a bad column makes the CRD invalid);
`tables.to_table` calls `cells` for each custom resource. Facts kept from the real convertor:
a cell is the path's FIRST match only (so `.spec.items[*].name` shows one name); `string`
cells print that value (maps and lists as compact JSON), `integer`/`number`/`boolean` cells
are the JSON value or empty, `date` cells are an age like `5m` (`<invalid>` when unparsable),
and a path with no match is an empty cell (`<none>` in kubectl). Pure.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from devcluster import jsonpath
from devcluster.durations import human_duration
from devcluster.errors import FieldError, invalid_value, not_supported, required

TYPES = ("integer", "number", "string", "boolean", "date")
AGE = ("Age", "date", "", "", 0, ".metadata.creationTimestamp")


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    type: str
    format: str
    description: str
    priority: int
    json_path: str

    def definition(self) -> dict[str, Any]:
        """The Table's columnDefinition (the description defaults to the path, as the real server's)."""
        description = self.description or f"Custom resource definition column (in JSONPath format): {self.json_path}"
        return {
            "name": self.name,
            "type": self.type,
            "format": self.format,
            "description": description,
            "priority": self.priority,
        }


def columns_of(version: dict[str, Any], where: str) -> tuple[PrinterColumn, ...]:
    """A served version's columns; none declared means `Age` alone, as kube-apiserver does.
    FieldError naming the field (`where`.additionalPrinterColumns[i]...) when one is invalid."""
    raw = version.get("additionalPrinterColumns")
    if not raw:
        return (PrinterColumn(*AGE),)
    if not isinstance(raw, list):
        raise FieldError(invalid_value(f"{where}.additionalPrinterColumns", None, "must be a list"))
    columns = []
    for i, column in enumerate(raw):
        field = f"{where}.additionalPrinterColumns[{i}]"
        if not isinstance(column, dict) or not column.get("name"):
            raise FieldError(required(f"{field}.name"))
        kind, path, priority = column.get("type"), str(column.get("jsonPath") or ""), column.get("priority", 0)
        if kind not in TYPES:
            raise FieldError(not_supported(f"{field}.type", str(kind), TYPES))
        if not path.startswith("."):
            raise FieldError(invalid_value(f"{field}.jsonPath", path, "must be a simple json path starting with ."))
        try:
            jsonpath.parse(path)
        except jsonpath.JsonPathError as exc:
            raise FieldError(invalid_value(f"{field}.jsonPath", path, str(exc))) from None
        if not isinstance(priority, int) or priority < 0:
            raise FieldError(invalid_value(f"{field}.priority", priority, "must be a non-negative integer"))
        description, fmt = str(column.get("description") or ""), str(column.get("format") or "")
        columns.append(PrinterColumn(str(column["name"]), str(kind), fmt, description, priority, path))
    return tuple(columns)


def cells(columns: Sequence[PrinterColumn], obj: dict[str, Any], now: datetime) -> list[Any]:
    """The row after the Name cell: one cell per column."""
    row = []
    for column in columns:
        try:
            found = jsonpath.parse(column.json_path).find(obj)
        except jsonpath.JsonPathError:
            found = []
        row.append(_cell(column.type, found[0], now) if found else None)
    return row


def _cell(kind: str, value: Any, now: datetime) -> Any:
    if value is None:
        return None
    if kind == "string":
        return _text(value)
    if kind == "integer" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "date" and isinstance(value, str):
        return _age(value, now)
    return None


def _text(value: Any) -> str:
    """Go's printing of a JSON value: strings bare, `true`, `3`, `2.5`, objects as compact JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _age(stamp: str, now: datetime) -> str:
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return "<invalid>"
    if moment.tzinfo is None:
        return "<invalid>"  # RFC 3339 requires an offset
    return human_duration((now - moment.astimezone(UTC)).total_seconds())
