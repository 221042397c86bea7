"""The scheduler loop: binds schedulable Pods using the pure decisions of `scheduler.py`.

`DevCluster` runs one `SchedulerLoop` thread. It wakes on Pod or Node changes (or every
`interval`), binds what fits among the Pods it knows to be unbound (kept from the store's
changes, so a pass over a cluster of bound Pods costs nothing), and records why the rest
does not (PodScheduled=False and a FailedScheduling Event only when the reason changes).
It writes only through `Resources`.
"""

from __future__ import annotations

import copy
import logging
import uuid
from collections import Counter
from typing import Any

from devcluster import scheduler
from devcluster.controlloop import ControlLoop
from devcluster.errors import ApiError
from devcluster.resources import Resources, bound_pod, timestamp
from devcluster.watch import Change

log = logging.getLogger(__name__)

PODS, NODES = "/pods", "/nodes"


class SchedulerLoop(ControlLoop):
    name = "devcluster-scheduler"

    def __init__(self, resources: Resources, *, interval: float = 0.5) -> None:
        super().__init__(resources, interval=interval)
        self._last_message: dict[str, str] = {}
        self._unbound: set[tuple[str, str]] = set()  # (namespace, name); changed under the store's lock

    def start(self) -> None:
        store = self.resources.store
        with store.lock:  # seeded and listening in one step: no change falls between
            pods, _ = store.list_objects(PODS)
            self._unbound = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods if _ours(p)}
            super().start()

    def wants(self, change: Change) -> bool:
        """Track the unbound Pods; wake for one, or for what may make room for one (a Node
        change, a Pod leaving)."""
        if change.storage_key == NODES:
            return bool(self._unbound)
        if change.storage_key != PODS:
            return False
        ident = (change.namespace, change.name)
        if change.type != "DELETED" and _ours(change.obj):
            self._unbound.add(ident)
            return True
        self._unbound.discard(ident)
        return bool(self._unbound)

    def run_once(self) -> None:
        self.schedule_once()

    def schedule_once(self) -> None:
        """One pass over every unbound Pod: bind, or record why it cannot be bound."""
        store = self.resources.store
        with store.lock:
            found = [store.get(PODS, namespace, name) for namespace, name in sorted(self._unbound)]
        pods = [p for p in found if p is not None and _ours(p)]
        live = {str(p["metadata"].get("uid")) for p in pods}
        self._last_message = {uid: m for uid, m in self._last_message.items() if uid in live}
        if not pods:
            return
        nodes, _ = store.list_objects(NODES)
        counts: Counter[str] | None = None  # Pods per node, counted once a Pod may be placed
        for pod in pods:
            spec = pod.get("spec") or {}
            if spec.get("schedulingGates"):
                self._condition(pod, "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates")
                continue
            if not scheduler.schedulable(pod):
                continue
            if counts is None:
                counts = _pods_per_node(store.list_objects(PODS)[0])
            node = scheduler.pick_node(pod, nodes, pod_counts=counts)
            if node is not None:
                self._bind(pod, node)
                counts[node] += 1
            else:
                message = scheduler.explain(pod, nodes)
                if self._condition(pod, "Unschedulable", message):
                    self._event(pod, "Warning", "FailedScheduling", message)

    def _bind(self, pod: dict[str, Any], node: str) -> None:
        meta = pod["metadata"]
        with self.resources.store.lock:
            current = self.resources.store.get(PODS, meta["namespace"], meta["name"])
            if current is None or current["metadata"].get("uid") != meta.get("uid"):
                return
            if (current.get("spec") or {}).get("nodeName") or current["metadata"].get("deletionTimestamp"):
                return
            self.resources.store.put(PODS, bound_pod(current, node, timestamp(self.resources.clock())))
        self._last_message.pop(str(meta.get("uid")), None)
        message = f"Successfully assigned {meta['namespace']}/{meta['name']} to {node}"
        self._event(pod, "Normal", "Scheduled", message)

    def _condition(self, pod: dict[str, Any], reason: str, message: str) -> bool:
        """Set PodScheduled=False; True when the reason or message changed (worth an Event)."""
        uid = str(pod["metadata"].get("uid"))
        if self._last_message.get(uid) == reason + message:
            return False
        meta = pod["metadata"]
        with self.resources.store.lock:
            current = self.resources.store.get(PODS, meta["namespace"], meta["name"])
            if current is None or current["metadata"].get("uid") != meta.get("uid"):
                return False
            updated = copy.deepcopy(current)
            status = updated.setdefault("status", {})
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            conditions.append(
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": reason,
                    "message": message,
                    "lastProbeTime": None,
                    "lastTransitionTime": timestamp(self.resources.clock()),
                }
            )
            status["conditions"] = conditions
            self.resources.store.put(PODS, updated)
        self._last_message[uid] = reason + message
        return True

    def _event(self, pod: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        meta = pod["metadata"]
        now = timestamp(self.resources.clock())
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": meta["namespace"]},
            "involvedObject": {
                "kind": "Pod",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta.get("uid"),
                "apiVersion": "v1",
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "type": event_type,
            "source": {"component": "default-scheduler"},
            "reportingComponent": "default-scheduler",
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        events = self.resources.builtin("", "v1", "events")
        try:
            self.resources.create(events, meta["namespace"], event)
        except ApiError as err:  # e.g. the namespace went away meanwhile
            log.debug("could not record scheduler event: %s", err.message)


def _ours(pod: dict[str, Any]) -> bool:
    """Unbound, and for the default scheduler."""
    spec = pod.get("spec") or {}
    return not spec.get("nodeName") and spec.get("schedulerName", "default-scheduler") == "default-scheduler"


def _pods_per_node(pods: list[dict[str, Any]]) -> Counter[str]:
    return Counter(str(p["spec"]["nodeName"]) for p in pods if (p.get("spec") or {}).get("nodeName"))
