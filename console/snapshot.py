"""The manager's memory read into rows, one dict per mirror table keyed by its natural key.

Called by `console.mirror` once per sync. Pure reads of Handlers (`tracked_entries`,
`last_instances`, the last list's outcome), the Blocklist's read side and the console's
observer; never calls a provider or the Kubernetes API, and never copies a Pod's env or a
credential (I4): only names, ids, states, prices and times.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from console.observer import ConsoleObserver, EventNote
from console.runtime import Runtime
from kube import names
from placement.blocklist import BlockEntry, describe_scope
from vnode.handler import Handler
from vnode.tracking import Tracked

Row = dict[str, Any]
Table = dict[str, Row]
MAX_TEXT = 1000


@dataclass
class Snapshot:
    """Rows per table name: `pods`, `claims`, `blocks`, `nodes`, `events`."""

    tables: dict[str, Table] = field(default_factory=dict)


def take(current: Runtime, observer: ConsoleObserver | None) -> Snapshot:
    pods: Table = {}
    claims: Table = {}
    nodes: Table = {}
    for handler in current.handlers:
        entries = handler.tracked_entries()
        pods.update(pod_rows(handler, entries))
        claims.update(claim_rows(handler, entries))
        nodes[handler.node_name] = node_row(handler, len(entries), observer)
    blocks = {e.id: block_row(e) for e in (current.blocklist.entries() if current.blocklist is not None else [])}
    events = {str(n.seq): event_row(n) for n in (observer.recent_events() if observer is not None else [])}
    return Snapshot({"pods": pods, "claims": claims, "blocks": blocks, "nodes": nodes, "events": events})


def pod_rows(handler: Handler, entries: Iterable[Tracked]) -> Table:
    rows: Table = {}
    for entry in entries:
        status = entry.desired_status or entry.pod.get("status") or {}
        annotations = (entry.pod.get("metadata") or {}).get("annotations") or {}
        instance = entry.last_instance
        tier = instance.capacity_type.value if instance is not None and instance.capacity_type else ""
        endpoint = (instance.endpoint if instance else None) or entry.desired_annotations.get(names.ENDPOINT_ANNOTATION)
        rows[entry.uid] = {
            "uid": entry.uid,
            "namespace": entry.namespace,
            "name": entry.name,
            "provider": handler.provider.name,
            "node": handler.node_name,
            "claim": entry.claim,
            "instance_id": entry.instance_id or "",
            "phase": str(status.get("phase") or ("Pending" if not entry.terminal else "Failed")),
            "reason": _text(status.get("reason"), 80),
            "endpoint": _text(endpoint, 255),
            "capacity_type": _text(annotations.get(names.CAPACITY_TYPE_ANNOTATION) or tier, 20),
            "region": _text(annotations.get(names.REGION_ANNOTATION) or (instance.region if instance else None), 63),
            "hourly_price": _price(annotations.get(names.HOURLY_PRICE_ANNOTATION)),
            "pool": _text(annotations.get(names.POOL_ANNOTATION), 63),
            "provisioned_at": instance.created_at if instance is not None else None,
        }
    return rows


def claim_rows(handler: Handler, entries: Iterable[Tracked]) -> Table:
    owners = {entry.claim: entry.key for entry in entries}
    rows: Table = {}
    provider = handler.provider.name
    for claim, instance in handler.last_instances().items():
        owner = owners.get(claim, "")
        key = f"{provider}/{instance.id}"
        rows[key] = {
            "key": key,
            "provider": provider,
            "claim": claim,
            "instance_id": instance.id,
            "state": instance.state.value,
            "pod": owner,
            "orphan": not owner,
            "region": instance.region or "",
            "capacity_type": instance.capacity_type.value if instance.capacity_type else "",
            "created_at": instance.created_at,
        }
    return rows


def node_row(handler: Handler, pods: int, observer: ConsoleObserver | None) -> Row:
    return {
        "name": handler.node_name,
        "provider": handler.provider.name,
        "ready": handler.last_list_ok,
        "last_lease_renewal": observer.node_synced_at(handler.node_name) if observer is not None else None,
        "capacity": dict(handler.capabilities().capacity),
        "pods": pods,
        "poll_interval": handler.poll_interval,
        # Milliseconds are what an operator reads; finer digits would rewrite the row every poll.
        "last_list_seconds": round(handler.last_list_seconds, 3),
        "last_list_error": _text(handler.last_list_error, MAX_TEXT),
    }


def block_row(entry: BlockEntry) -> Row:
    scope = entry.scope
    return {
        "entry_id": entry.id,
        "provider": entry.provider,
        "breadth": scope.breadth.value,
        "scope": _text(describe_scope(entry.provider, scope), 255),
        "tier": scope.tier.value if scope.tier else "",
        "accelerator": scope.accelerator or "",
        "region": scope.region or "",
        "reason": _text(entry.reason, MAX_TEXT),
        "pool": entry.pool or "",
        "recorded_at": entry.recorded_at,
        "expires_at": entry.expires_at,
    }


def event_row(note: EventNote) -> Row:
    return {
        "seq": note.seq,
        "at": note.at,
        "kind": note.kind,
        "namespace": note.namespace,
        "name": _text(note.name, 253),
        "type": note.type,
        "reason": _text(note.reason, 80),
        "message": _text(note.message, MAX_TEXT),
    }


def _text(value: Any, limit: int) -> str:
    return "" if value is None else str(value)[:limit]


def _price(value: Any) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None
