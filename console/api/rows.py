"""Rows for the REST API: the manager's memory (`console.runtime`) as plain dicts.

Called by `console.api.views` on every request; reads only, under each owner's lock
(Handler, Blocklist, pool cache). Never calls a provider or the Kubernetes API.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kube import names
from placement.blocklist import BlockEntry, describe_scope
from placement.poolcache import PoolState
from vnode.handler import Handler

Row = dict[str, Any]


def block_row(entry: BlockEntry) -> Row:
    scope = entry.scope
    return {
        "id": entry.id,
        "provider": entry.provider,
        "scope": {
            "breadth": scope.breadth.value,
            "tier": scope.tier.value if scope.tier else None,
            "accelerator": scope.accelerator,
            "region": scope.region,
        },
        "description": describe_scope(entry.provider, scope),
        "reason": entry.reason,
        "pool": entry.pool,
        "recorded_at": entry.recorded_at,
        "expires_at": entry.expires_at,
        "seconds_left": round(entry.seconds_left, 1),
    }


def pod_rows(handlers: Iterable[Handler]) -> list[Row]:
    rows: list[Row] = []
    for handler in handlers:
        for entry in handler.tracked_entries():
            status = entry.desired_status or entry.pod.get("status") or {}
            annotations = (entry.pod.get("metadata") or {}).get("annotations") or {}
            rows.append(
                {
                    "namespace": entry.namespace,
                    "name": entry.name,
                    "uid": entry.uid,
                    "provider": handler.provider.name,
                    "node": handler.node_name,
                    "claim": entry.claim,
                    "instance_id": entry.instance_id,
                    "phase": status.get("phase"),
                    "reason": status.get("reason"),
                    "capacity_type": annotations.get(names.CAPACITY_TYPE_ANNOTATION),
                    "region": annotations.get(names.REGION_ANNOTATION),
                    "pool": annotations.get(names.POOL_ANNOTATION),
                }
            )
    return sorted(rows, key=lambda r: (r["namespace"], r["name"]))


def claim_rows(handlers: Iterable[Handler]) -> list[Row]:
    rows: list[Row] = []
    for handler in handlers:
        owners = {entry.claim: entry.key for entry in handler.tracked_entries()}
        for instance in handler.last_instances().values():
            owner = owners.get(instance.claim)
            rows.append(
                {
                    "claim": instance.claim,
                    "provider": handler.provider.name,
                    "instance_id": instance.id,
                    "state": instance.state.value,
                    "region": instance.region,
                    "capacity_type": instance.capacity_type.value if instance.capacity_type else None,
                    "created_at": instance.created_at,
                    "pod": owner,
                    "orphan": owner is None,
                }
            )
    return sorted(rows, key=lambda r: (r["provider"], r["claim"]))


def node_rows(handlers: Iterable[Handler]) -> list[Row]:
    return [
        {
            "name": handler.node_name,
            "provider": handler.provider.name,
            "ready": handler.last_list_ok,
            "last_list_error": handler.last_list_error,
            "last_list_seconds": round(handler.last_list_seconds, 3),
            "poll_interval": handler.poll_interval,
            "pods": len(handler.tracked_entries()),
        }
        for handler in handlers
    ]


def pool_row(state: PoolState) -> Row:
    pool = state.pool
    return {
        "name": state.name,
        "valid": pool is not None,
        "error": state.error,
        "providers": [{"name": p.name, "regions": list(p.regions)} for p in pool.providers] if pool else [],
        "capacity_types": [t.value for t in pool.capacity_types] if pool else [],
        "strategy": pool.strategy.value if pool else None,
        "blocklist_ttl_seconds": pool.blocklist_ttl if pool else None,
        "status": state.raw.get("status") or {},
    }
