"""A pool's `failover.waitForCapacity`: a gated Pod that has waited for capacity that long since
it was created is failed (phase Failed, reason `CapacityWaitExceeded`, a message naming what held
each candidate and the field), with a Warning Event of the same reason.

Called by the placement controller for every Pod that waits; it acts only while every candidate
is sold out or blocked (`exhausted`: an interrupted candidate is blocked). A provider whose
offerings are unknown (it could not be asked: an outage, a failing first ask after a restart)
keeps the Pod waiting, however long (I3: an unreachable provider fails nothing). The clock is
the Pod's own `metadata.creationTimestamp`, so the wait survives a restart. One status write (a
JSON patch of the status subresource whose `test` ops make it apply only to this Pod, still
gated); a Pod without a controller stays Failed as the record, one with a controller is replaced
by it as any Failed Pod is (the new Pod waits afresh).
Tests: tests/placement/test_capacity_wait.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from kube import names, observe
from kube.client import Kube
from kube.times import epoch_of
from placement.attempt import SETTLED, Attempt
from placement.durations import format_duration
from placement.optimizer import Obstacle
from placement.request import WorkloadRequest
from placement.ungate import send
from placement.waiting import Wait, describe

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]
Say = Callable[[JsonDict, str, str, str], None]  # (pod, type, reason, message): an Event


def created_at(pod: Mapping[str, Any]) -> float | None:
    """The Pod's `metadata.creationTimestamp` in epoch seconds, or None when it has none."""
    return epoch_of((pod.get("metadata") or {}).get("creationTimestamp"))


def deadline(pod: Mapping[str, Any], limit: float | None) -> float | None:
    """When the Pod's wait for capacity ends (epoch seconds), or None (no limit, or no creation time)."""
    created = created_at(pod)
    return None if limit is None or created is None else created + limit


def exhausted(wait: Wait) -> bool:
    """The Pod waits for capacity and every candidate it could use is sold out or blocked: none
    is unknown (obstacles that no passing of time ends, a shape no provider serves say, are not
    candidates)."""
    return wait.reason == names.EVENT_WAITING_FOR_CAPACITY and all(
        s.obstacle is not Obstacle.UNKNOWN for s in wait.obstacles
    )


def message(wait: Wait, request: WorkloadRequest, limit: float) -> str:
    """The Pod's status message and Event: how long, the field, and what held each candidate."""
    held = ", ".join(describe(s, request) for s in wait.obstacles) or "no candidate"
    spelled = format_duration(limit)
    return f"no capacity within {spelled} (spec.failover.waitForCapacity: {spelled}): {held}"


def enforce(
    kube: Kube, pod: JsonDict, wait: Wait, request: WorkloadRequest, limit: float | None, now: float, say: Say
) -> Wait | Attempt:
    """The wait to hold the Pod for, looked at again by its deadline at the latest; or, once a
    Pod whose candidates are all sold out or blocked (`exhausted`) has waited `limit` since its
    creation, the Pod ended (`fail`) and the attempt's outcome."""
    ends = deadline(pod, limit) if exhausted(wait) else None
    if ends is None or limit is None:
        return wait
    if now < ends:
        return replace(wait, next_look=min(wait.next_look, ends))
    return fail(kube, pod, message(wait, request, limit), say)


def fail(kube: Kube, pod: JsonDict, text: str, say: Say) -> Attempt:
    """End the gated Pod: phase Failed, reason CapacityWaitExceeded, `text` as its message, a
    Warning Event and the `capacity_wait_exceeded` outcome, the last two only once the write
    applied. SETTLED once written (or gone); a fresh look when it moved under the write; Retry
    on other failures."""
    meta = pod["metadata"]
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    index = next(i for i, g in enumerate(gates) if g.get("name") == names.PLACEMENT_GATE)
    ops: list[JsonDict] = [
        {"op": "test", "path": "/metadata/uid", "value": meta.get("uid")},
        {"op": "test", "path": f"/spec/schedulingGates/{index}/name", "value": names.PLACEMENT_GATE},
        {"op": "add", "path": "/status/phase", "value": "Failed"},
        {"op": "add", "path": "/status/reason", "value": names.REASON_CAPACITY_WAIT_EXCEEDED},
        {"op": "add", "path": "/status/message", "value": text},
    ]
    if not isinstance(pod.get("status"), Mapping):
        ops.insert(2, {"op": "add", "path": "/status", "value": {}})
    outcome = send(kube, pod, ops, subresource="status")
    if outcome is not None:
        return outcome
    logger.info("failed %s/%s: %s", meta["namespace"], meta["name"], text)
    say(pod, "Warning", names.REASON_CAPACITY_WAIT_EXCEEDED, text)
    observe.current().placement_decided("capacity_wait_exceeded")
    return SETTLED
