"""The mirror's view of memory (and of the cluster's copy of what other replicas serve):
`console.rows` keyed per table and fitted to its columns.

Called by `console.mirror` once per sync. Adds no value of its own: each row is the one
projection's, with only what the table cannot hold changed (`fit`): keys the table has no
column for are dropped, None in a NOT NULL text column is "", and text is cut to the
column's length. Never calls a provider or the Kubernetes API.
Tests: tests/console/test_console_units.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import models as django_models

from console import models, rows
from console.observer import ConsoleObserver
from console.runtime import Runtime

Row = dict[str, Any]
Table = dict[str, Row]

TABLES: dict[str, Any] = {
    "pods": models.TrackedPod,
    "claims": models.InstanceClaim,
    "blocks": models.BlocklistEntry,
    "nodes": models.VirtualNode,
    "events": models.RecentEvent,
}


@dataclass
class Snapshot:
    """Rows per table name: `pods`, `claims`, `blocks`, `nodes`, `events`."""

    tables: dict[str, Table] = field(default_factory=dict)


def take(current: Runtime, observer: ConsoleObserver | None) -> Snapshot:
    found: dict[str, list[Row]] = {table: [] for table in TABLES}
    found["pods"] = rows.pod_rows(current.handlers, current.placement, current.cluster)
    for handler in current.handlers:
        entries = handler.tracked_entries()
        found["claims"] += rows.claim_rows(handler, entries)
        found["nodes"].append(rows.node_row(handler, len(entries), observer))
    found["nodes"] += rows.cluster_node_rows(current.handlers, current.cluster)
    found["blocks"] = [
        rows.block_row(e) for e in (current.blocklist.entries() if current.blocklist is not None else [])
    ]
    found["events"] = [rows.event_row(n) for n in (observer.recent_events() if observer is not None else [])]
    return Snapshot({table: keyed(table, found[table]) for table in TABLES})


def keyed(table: str, projected: list[Row]) -> Table:
    key = TABLES[table].mirror_key
    return {str(row[key]): fit(table, row) for row in projected}


def fit(table: str, row: Row) -> Row:
    """`row` as the table can hold it (see the module docstring)."""
    fitted: Row = {}
    for column in TABLES[table]._meta.concrete_fields:
        if column.name not in row:
            continue
        value = row[column.name]
        if isinstance(column, django_models.CharField):
            value = ("" if not column.null else None) if value is None else str(value)[: column.max_length]
        fitted[column.name] = value
    return fitted
