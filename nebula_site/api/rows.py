"""Rows for the REST API: the manager's memory (`nebula_site.runtime`) as plain dicts.

Called by `nebula_site.api.views` on every request; reads only, under each owner's lock
(Handler, Blocklist, pool cache). Never calls a provider or the Kubernetes API.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from placement.blocklist import BlockEntry, describe_scope
from placement.poolcache import PoolState
from providers.base import Instance
from vnode import names
from vnode.handler import Handler
from vnode.tracking import pod_claim, pod_key

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
        for pod in handler.get_pods():
            meta = pod.get("metadata") or {}
            status = pod.get("status") or {}
            annotations = meta.get("annotations") or {}
            entry = handler.tracked(pod_key(pod))
            rows.append(
                {
                    "namespace": meta.get("namespace", ""),
                    "name": meta.get("name", ""),
                    "uid": meta.get("uid", ""),
                    "provider": handler.provider.name,
                    "node": handler.node_name,
                    "claim": pod_claim(pod),
                    "instance_id": entry.instance_id if entry is not None else None,
                    "phase": status.get("phase"),
                    "reason": status.get("reason"),
                    "capacity_type": annotations.get(names.CAPACITY_TYPE_ANNOTATION),
                    "region": annotations.get(names.REGION_ANNOTATION),
                    "pool": annotations.get(names.POOL_ANNOTATION),
                }
            )
    return sorted(rows, key=lambda r: (r["namespace"], r["name"]))


def _instances(handler: Handler) -> list[Instance]:
    """What the last list() returned. `Handler.last_instances()` gives every instance, orphans
    included; until a Handler offers it, the tracked Pods' last facts are all we have."""
    last_instances = getattr(handler, "last_instances", None)
    if callable(last_instances):
        return list(last_instances().values())
    result: list[Instance] = []
    for pod in handler.get_pods():
        entry = handler.tracked(pod_key(pod))
        if entry is not None and entry.last_instance is not None:
            result.append(entry.last_instance)
    return result


def claim_rows(handlers: Iterable[Handler]) -> list[Row]:
    rows: list[Row] = []
    for handler in handlers:
        owners = {pod_claim(pod): pod_key(pod) for pod in handler.get_pods()}
        for instance in _instances(handler):
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
            "pods": len(handler.get_pods()),
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
