"""Interruptions counted per workload, for a pool's `interruption.fallbackToOnDemandAfter`.

A Pod that turned Failed with a reason of `names.INTERRUPTED_REASONS` is one interruption of
its workload (the uid of its controlling ownerReference; a bare Pod is not counted: nothing
re-runs it), at the time its `nebula.io/interruption` record's `issuedAt` says, else its
containers' latest `finishedAt`, else its `DisruptionTarget` (else `Ready=False`) condition's
`lastTransitionTime`, else now; each Pod uid counts once, even after it is trimmed (a bounded
memory of trimmed uids). The history survives a restart because placement writes a workload's
recent times into `nebula.io/interruptions` on every Pod it ungates for it, and
`InterruptionBook.observe` reads that back from every Pod the placement controller's Pod watch
sees. Pure except for the book's lock; never does I/O.
Tests: tests/placement/test_interruption_book.py, tests/placement/test_e2e_interruptions.py.
"""

from __future__ import annotations

import json
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from kube import names
from kube.times import epoch_of, rfc3339
from placement.durations import format_duration
from placement.interruptspec import MAX_WINDOW
from placement.optimizer import Obstacle, Skip
from placement.pools import NodePool
from providers.base import Tier

MAX_HISTORY = 20  # times carried per workload (newest kept)
MAX_WORKLOADS = 10_000  # I7: workloads remembered; the least recently seen or asked goes first
MAX_FORGOTTEN = 20_000  # I7: uids of Pods counted and since trimmed, never counted again (oldest go first)
DISRUPTION_TARGET = "DisruptionTarget"  # the kubelet's Pod condition (vnode sets it on an interrupted Pod)


def workload_of(pod: Mapping[str, Any]) -> str | None:
    """The uid of the Pod's controlling ownerReference (its ReplicaSet, Job, ...), or None."""
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    ref = next((r for r in refs if isinstance(r, Mapping) and r.get("controller") is True), None)
    uid = None if ref is None else ref.get("uid")
    return str(uid) if uid else None


def is_interrupted(pod: Mapping[str, Any]) -> bool:
    """Failed with a reason that says the provider took its instance."""
    status = pod.get("status") or {}
    return status.get("phase") == "Failed" and status.get("reason") in names.INTERRUPTED_REASONS


def interrupted_at(pod: Mapping[str, Any], now: float) -> float:
    """When the Pod was interrupted: its notice's `issuedAt`, else its containers' latest
    `finishedAt`, else its `DisruptionTarget` condition's `lastTransitionTime`, else its
    `Ready=False` one's (the same at every sighting, so a restart re-reads the same time), else
    `now`; whole seconds, as the carried history spells them."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        record = json.loads(annotations.get(names.INTERRUPTION_ANNOTATION) or "null")
    except ValueError:
        record = None
    issued = epoch_of(record.get("issuedAt")) if isinstance(record, Mapping) else None
    if issued is not None:
        return float(int(issued))
    status = pod.get("status") or {}
    finished = [
        epoch_of(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for c in status.get("containerStatuses") or []
        if isinstance(c, Mapping)
    ]
    known = [f for f in finished if f is not None]
    if known:
        return float(int(max(known)))
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, Mapping)]
    for kind, value in ((DISRUPTION_TARGET, "True"), ("Ready", "False")):
        for condition in conditions:
            if condition.get("type") == kind and condition.get("status") == value:
                changed = epoch_of(condition.get("lastTransitionTime"))
                if changed is not None:
                    return float(int(changed))
    return float(int(now))


def parse_history(text: Any) -> list[float]:
    """`nebula.io/interruptions` (comma-separated RFC 3339) to epoch seconds; bad items skipped."""
    if not isinstance(text, str):
        return []
    times = (epoch_of(part) for part in text.split(","))
    return sorted(float(int(t)) for t in times if t is not None)


def format_history(times: list[float]) -> str:
    """Epoch seconds to `nebula.io/interruptions`: RFC 3339 UTC, oldest first, newest last."""
    return ",".join(rfc3339(datetime.fromtimestamp(t, UTC)) for t in sorted(times))


@dataclass
class _Workload:
    seen: dict[str, float] = field(default_factory=dict)  # Pod uid -> its interruption time
    carried: Counter[float] = field(default_factory=Counter)  # the most any one annotation carried, per time
    text: str | None = None  # the last `nebula.io/interruptions` read for it: the same text is not parsed again

    def times(self) -> list[float]:
        """Each time as often as the larger of: the Pods seen at it, an annotation carrying it."""
        counts = Counter(self.seen.values())
        merged = {t: max(counts[t], self.carried[t]) for t in set(counts) | set(self.carried)}
        return sorted(t for t, n in merged.items() for _ in range(n))


@dataclass(frozen=True)
class Fallback:
    """A workload moved to OnDemand: how many interruptions within the window, and the words."""

    count: int
    message: str  # the FallbackToOnDemand Event's
    why: str  # the Spot skip's


def fallback_of(pool: NodePool, recent: list[float]) -> Fallback | None:
    """The fallback due under `pool`'s `spec.interruption` to a workload interrupted at `recent`
    (its times within the pool's window, `InterruptionBook.recent`), or None (no limit, under
    it, or a pool without Spot)."""
    policy = pool.interruption
    if policy.fallback_after is None or Tier.SPOT not in pool.capacity_types:
        return None
    count = len(recent)
    if count < policy.fallback_after:
        return None
    counted = f"{count} interruption{'s' if count != 1 else ''}"
    field_text = f"spec.interruption.fallbackToOnDemandAfter: {policy.fallback_after}"
    window = format_duration(policy.window)
    message = f"{counted} within {window} ({field_text}): placing on OnDemand"
    return Fallback(count, message, f"{counted} of this workload within {window} ({field_text})")


def fall_back(pool: NodePool, fallback: Fallback | None) -> tuple[NodePool, Skip | None]:
    """The pool to place from (OnDemand only under a fallback) and the skip that says why Spot is not tried."""
    if fallback is None:
        return pool, None
    tiers = tuple(t for t in pool.capacity_types if t is not Tier.SPOT)
    return replace(pool, capacity_types=tiers), Skip("", Obstacle.FALLBACK, fallback.why, tier=Tier.SPOT)


class InterruptionBook:
    """Thread-safe; fed every Pod the Pod watch sees (`observe`), asked at placement (`recent`)."""

    def __init__(self, clock: Callable[[], float], *, max_workloads: int = MAX_WORKLOADS) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._max_workloads = max_workloads
        self._workloads: OrderedDict[str, _Workload] = OrderedDict()  # least recently used first
        self._forgotten: OrderedDict[str, None] = OrderedDict()  # uids trimmed: counted once already

    def observe(self, pod: Mapping[str, Any] | None) -> bool:
        """Take what `pod` says of its workload's interruptions; True when it is a new one."""
        workload = None if pod is None else workload_of(pod)
        if pod is None or workload is None:
            return False
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        text = annotations.get(names.INTERRUPTIONS_ANNOTATION)
        text = text if isinstance(text, str) and text else None
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        now = self._clock()
        fresh = bool(uid) and is_interrupted(pod)
        with self._lock:
            entry = self._workloads.get(workload)
            reread = text is not None and (entry is None or entry.text != text)
            carried = Counter(parse_history(text)) if reread else Counter[float]()
            if entry is None and not carried and not fresh:
                return False
            if entry is None:
                entry = self._workloads[workload] = _Workload()
            self._workloads.move_to_end(workload)
            if reread:
                entry.text = text
            for at, count in carried.items():
                entry.carried[at] = max(entry.carried[at], count)
            counted = fresh and uid not in entry.seen and uid not in self._forgotten
            if counted:
                entry.seen[uid] = interrupted_at(pod, now)
            self._trim_locked(workload, entry, now)
        return counted

    def __len__(self) -> int:
        """The workloads remembered (each with some time within reach of a window)."""
        with self._lock:
            return len(self._workloads)

    def recent(self, workload: str | None, window: float, now: float | None = None) -> list[float]:
        """The workload's interruption times within `window` seconds of now, at most
        MAX_HISTORY, oldest first (newest last)."""
        if workload is None:
            return []
        now = self._clock() if now is None else now
        with self._lock:
            entry = self._workloads.get(workload)
            if entry is not None:
                self._workloads.move_to_end(workload)
            times = [] if entry is None else entry.times()
        return [t for t in times if t > now - window][-MAX_HISTORY:]

    def fallback(self, workload: str | None, pool: NodePool, now: float | None = None) -> Fallback | None:
        """The fallback due to the workload under `pool`'s `spec.interruption` (`fallback_of`)."""
        return fallback_of(pool, self.recent(workload, pool.interruption.window, now))

    def _trim_locked(self, workload: str, entry: _Workload, now: float) -> None:
        """Forget what no window can reach and keep MAX_HISTORY per workload; drop the workload
        when nothing is left of it, and the least recently used past `max_workloads`."""
        horizon = now - MAX_WINDOW
        for uid, _ in sorted(entry.seen.items(), key=lambda item: item[1])[:-MAX_HISTORY]:
            self._forget_locked(entry, uid)
        for uid in [u for u, at in entry.seen.items() if at <= horizon]:
            self._forget_locked(entry, uid)
        for at in sorted(entry.carried)[: max(0, len(entry.carried) - MAX_HISTORY)]:
            del entry.carried[at]
        for at in [t for t in entry.carried if t <= horizon]:
            del entry.carried[at]
        if not entry.seen and not entry.carried:
            del self._workloads[workload]
        while len(self._workloads) > self._max_workloads:
            _, evicted = self._workloads.popitem(last=False)
            for uid in list(evicted.seen):
                self._forget_locked(evicted, uid)

    def _forget_locked(self, entry: _Workload, uid: str) -> None:
        """Drop `uid` from `entry`, remembering it (bounded) so it is never counted again."""
        del entry.seen[uid]
        self._forgotten[uid] = None
        while len(self._forgotten) > MAX_FORGOTTEN:
            self._forgotten.popitem(last=False)
