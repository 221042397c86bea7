"""The one read-side projection: the manager's memory as plain rows, one function per kind.

Serialised by both readers, `console.snapshot` (the mirror) and `console.api` (REST). Pure
reads of Handlers, the Blocklist, placement's pool cache and gated Pods, the console's
observer, and the cluster's copy of the Pods and nodes other replicas serve
(`console.clusterpods`); never calls a provider or the Kubernetes API, never copies an env
value or a credential (I4).

Invariant: the mirror and the API show one Pod alike; see
tests/console/test_console_units.py::test_the_mirror_row_and_the_api_row_of_a_pod_agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from console.clusterpods import NO_STATUS_YET, ClusterNode, ClusterPod, ClusterView
from console.ends import Ends
from console.observer import ConsoleObserver, EventNote
from kube import names, podstatus
from placement.blocklist import BlockEntry, describe_scope
from placement.gated import GatedPod
from placement.poolcache import PoolState
from placement.wiring import Placement
from vnode.handler import Handler
from vnode.model.tracking import Tracked

Row = dict[str, Any]  # an absent value is None; a NOT NULL text column of the mirror holds ""

# NO_STATUS_YET ("Pending"): what a kubelet reports for a Pod it has taken but not yet started.
REFUSED = "Failed"  # a refused Pod has no instance and never will
# What the API server reports for a Pod a scheduling gate holds: Pending, reason SchedulingGated.
GATED_PHASE = "Pending"
TERMINAL_PHASES = ("Succeeded", "Failed")


def pod_row(handler: Handler, entry: Tracked) -> Row:
    """A tracked Pod with the instance serving it. `phase` is the status the Handler wants
    written (else the Pod's own), `Pending` before there is any."""
    status = entry.desired_status or entry.pod.get("status") or {}
    printed = podstatus.summarize({**entry.pod, "status": status})
    annotations = (entry.pod.get("metadata") or {}).get("annotations") or {}
    instance = entry.last_instance
    tier = instance.capacity_type.value if instance is not None and instance.capacity_type else None
    endpoint = (instance.endpoint if instance else None) or entry.desired_annotations.get(names.ENDPOINT_ANNOTATION)
    return {
        "uid": entry.uid,
        "namespace": entry.namespace,
        "name": entry.name,
        "provider": handler.provider.name,
        "node": handler.node_name,
        "claim": entry.claim,
        "instance_id": entry.instance_id or None,
        "phase": str(status.get("phase") or (REFUSED if entry.terminal else NO_STATUS_YET)),
        "reason": status.get("reason") or None,
        "status": printed.status or (REFUSED if entry.terminal else NO_STATUS_YET),
        "ready": printed.ready_text,
        "restarts": printed.restarts,
        "last_restart_at": printed.last_restart,
        "created_at": podstatus.created_at(entry.pod),
        "endpoint": endpoint or None,
        "capacity_type": annotations.get(names.CAPACITY_TYPE_ANNOTATION) or tier,
        "region": annotations.get(names.REGION_ANNOTATION) or (instance.region if instance else None) or None,
        "hourly_price": _price(annotations.get(names.HOURLY_PRICE_ANNOTATION)),
        "pool": annotations.get(names.POOL_ANNOTATION) or None,
        "provisioned_at": instance.created_at if instance is not None else None,
        "wait_reason": None,
        "waiting_for": None,
        "served_here": True,
    }


def cluster_pod_row(pod: ClusterPod) -> Row:
    """A Pod bound to a node another replica serves, as the cluster shows it (the serving
    replica writes its status and annotations): `pod_row`'s shape; what only that replica
    knows (when its instance was created) is None."""
    return {
        "uid": pod.uid,
        "namespace": pod.namespace,
        "name": pod.name,
        "provider": pod.provider,
        "node": pod.node,
        "claim": pod.claim,
        "instance_id": pod.instance_id,
        "phase": pod.phase,
        "reason": pod.reason,
        "status": pod.status,
        "ready": pod.ready,
        "restarts": pod.restarts,
        "last_restart_at": pod.last_restart_at,
        "created_at": pod.created_at,
        "endpoint": pod.endpoint,
        "capacity_type": pod.capacity_type,
        "region": pod.region,
        "hourly_price": _price(pod.hourly_price),
        "pool": pod.pool,
        "provisioned_at": None,
        "wait_reason": None,
        "waiting_for": None,
        "served_here": False,
    }


def gated_pod_row(gated: GatedPod) -> Row:
    """A Pod placement still holds: no provider, node, claim or instance yet; phase Pending with
    reason SchedulingGated (as the API server reports it), and the reason and message of the
    last Event placement wrote about it (None before its first look)."""
    return {
        "uid": gated.uid,
        "namespace": gated.namespace,
        "name": gated.name,
        "provider": None,
        "node": None,
        "claim": None,
        "instance_id": None,
        "phase": GATED_PHASE,
        "reason": names.REASON_SCHEDULING_GATED,
        "status": names.REASON_SCHEDULING_GATED,  # what kubectl prints for a gated Pod
        "ready": None,  # placement's register keeps no spec to count containers from
        "restarts": 0,
        "last_restart_at": None,
        "created_at": None,
        "endpoint": None,
        "capacity_type": None,
        "region": None,
        "hourly_price": None,
        "pool": gated.pool,
        "provisioned_at": None,
        "wait_reason": gated.reason,
        "waiting_for": gated.message,
        "served_here": None,  # no node serves it yet
    }


def claim_rows(handler: Handler, entries: Iterable[Tracked]) -> list[Row]:
    """The instances of the provider's last list, each with the Pod claiming it (None: an orphan)."""
    owners = {entry.claim: entry.key for entry in entries}
    provider = handler.provider.name
    rows: list[Row] = []
    for claim, instance in handler.inventory.last_instances().items():
        owner = owners.get(claim)
        rows.append(
            {
                "key": f"{provider}/{instance.id}",
                "provider": provider,
                "claim": claim,
                "instance_id": instance.id,
                "state": instance.state.value,
                "pod": owner,
                "orphan": owner is None,
                "region": instance.region or None,
                "capacity_type": instance.capacity_type.value if instance.capacity_type else None,
                "created_at": instance.created_at,
            }
        )
    return rows


def node_row(handler: Handler, pods: int, observer: ConsoleObserver | None) -> Row:
    """The node and its provider; how that provider's instances ended comes from the observer."""
    ends = observer.ends_of(handler.provider.name) if observer is not None else Ends(handler.provider.name)
    return {
        "name": handler.node_name,
        "provider": handler.provider.name,
        "ready": handler.inventory.last_list_ok,
        "last_lease_renewal": observer.node_synced_at(handler.node_name) if observer is not None else None,
        "capacity": dict(handler.capabilities().capacity),
        "pods": pods,
        "poll_interval": handler.poll_interval,
        # Milliseconds are what an operator reads; finer digits would rewrite the row every poll.
        "last_list_seconds": round(handler.inventory.last_list_seconds, 3),
        "last_list_error": handler.inventory.last_list_error,
        "interruptions": dict(ends.interruptions),
        "interruption_tiers": dict(ends.interruption_tiers),
        "failures": dict(ends.failures),
        "unreachable_since": ends.unreachable_since,
        "unreachable_pods": ends.unreachable_pods,
        "served_here": True,
    }


def cluster_node_row(name: str, provider: str, node: ClusterNode | None, pods: Iterable[ClusterPod]) -> Row:
    """A node another replica serves, from its Node object (None: not registered yet). How its
    instances ended and its provider's list times are known only to that replica: None or empty."""
    counted = list(pods)
    unreachable = node is not None and node.unreachable_since is not None
    return {
        "name": name,
        "provider": provider,
        "ready": node.ready if node is not None else None,
        "last_lease_renewal": node.heartbeat if node is not None else None,
        "capacity": dict(node.capacity) if node is not None else {},
        "pods": len(counted),
        "poll_interval": None,
        "last_list_seconds": None,
        "last_list_error": node.unreachable_error if node is not None else "",
        "interruptions": {},
        "interruption_tiers": {},
        "failures": {},
        "unreachable_since": node.unreachable_since if node is not None else None,
        "unreachable_pods": sum(p.phase not in TERMINAL_PHASES for p in counted) if unreachable else 0,
        "served_here": False,
    }


def block_row(entry: BlockEntry) -> Row:
    """`scope` is the entry's description; the API nests breadth, tier, accelerator and region."""
    scope = entry.scope
    return {
        "entry_id": entry.id,
        "provider": entry.provider,
        "breadth": scope.breadth.value,
        "scope": describe_scope(entry.provider, scope),
        "tier": scope.tier.value if scope.tier else None,
        "accelerator": scope.accelerator or None,
        "region": scope.region or None,
        "reason": entry.reason,
        "pool": entry.pool or None,
        "recorded_at": entry.recorded_at,
        "expires_at": entry.expires_at,
        "seconds_left": round(entry.seconds_left, 1),  # as of the read: the API's, not a column
    }


def event_row(note: EventNote) -> Row:
    """One Event object, its repeats counted (a repeat updates this row, never adds one)."""
    return {
        "key": note.key,
        "seq": note.seq,
        "count": note.count,
        "first_at": note.first_at,
        "at": note.at,
        "kind": note.kind,
        "namespace": note.namespace,
        "name": note.name,
        "type": note.type,
        "reason": note.reason,
        "message": note.message,
    }


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


# -- whole lists, in the order a reader shows them ------------------------------------------------
def pod_rows(
    handlers: Iterable[Handler], placement: Placement | None = None, cluster: ClusterView | None = None
) -> list[Row]:
    """The tracked Pods, those of nodes other replicas serve (`cluster`) and the gated ones, one
    row per uid: a Pod just placed may still read gated in placement's watch while it is bound
    (the bound copy wins), and a node that just came here may still be in the cluster's copy
    (a Handler's row wins, and a node served here is never read from the cluster)."""
    handlers = list(handlers)
    here = {handler.node_name for handler in handlers}
    by_uid = {g.uid: gated_pod_row(g) for g in (placement.gated_pods() if placement is not None else [])}
    remote = cluster.pods() if cluster is not None else []
    by_uid.update((pod.uid, cluster_pod_row(pod)) for pod in remote if pod.node not in here)
    by_uid.update((entry.uid, pod_row(handler, entry)) for handler in handlers for entry in handler.tracked_entries())
    return sorted(by_uid.values(), key=lambda r: (r["namespace"], r["name"]))


def all_claim_rows(handlers: Iterable[Handler]) -> list[Row]:
    rows = [row for handler in handlers for row in claim_rows(handler, handler.tracked_entries())]
    return sorted(rows, key=lambda r: (r["provider"], r["claim"]))


def node_rows(
    handlers: Iterable[Handler], observer: ConsoleObserver | None, cluster: ClusterView | None = None
) -> list[Row]:
    handlers = list(handlers)
    served = [node_row(handler, len(handler.tracked_entries()), observer) for handler in handlers]
    return served + cluster_node_rows(handlers, cluster)


def cluster_node_rows(handlers: Iterable[Handler], cluster: ClusterView | None) -> list[Row]:
    """The nodes other replicas serve (none served here), each with its Pods counted."""
    if cluster is None:
        return []
    here = {handler.node_name for handler in handlers}
    on: dict[str, list[ClusterPod]] = {}
    for pod in cluster.pods():
        on.setdefault(pod.node, []).append(pod)
    seen = cluster.nodes()
    remote = {name: provider for name, provider in cluster.remote().items() if name not in here}
    return [cluster_node_row(name, provider, seen.get(name), on.get(name, [])) for name, provider in remote.items()]


def _price(value: Any) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None
