"""Whether the provider answers, as each of its Pods says it: the "unreachable" cause.

The status sync (`vnode.phases.statussync`) moves one `Reachability` per node: a failed list
begins an outage, the next list that answers ends it. While it lasts, every Pod still running
on the node carries the condition `nebula.io/ProviderReachable=False` (reason
`ProviderUnreachable`, since when, the provider's error): nothing is failed or terminated for
it (I3), and a Pod never reads as interrupted or failed because a list could not be read. Once
the provider answers, the condition turns True (reason `ProviderReachable`) on the Pods that
carried it. The Node says the same in its own condition. Pure but for a lock.
Tests: tests/vnode/test_unreachable.py.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kube import names
from kube.times import rfc3339

JsonDict = dict[str, Any]
MAX_ERROR = 300  # characters of the provider's error a Pod's condition carries


@dataclass
class Reachability:
    since: datetime | None = None  # the first failed list of the outage under way; None: it answers
    error: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def failed(self, error: str, now: datetime) -> bool:
        """A list failed: True when this begins an outage."""
        with self._lock:
            self.error = error if len(error) <= MAX_ERROR else error[: MAX_ERROR - 3] + "..."
            began, self.since = self.since is None, self.since or now
            return began

    def answered(self) -> bool:
        """A list answered: True when this ends an outage."""
        with self._lock:
            ended, self.since, self.error = self.since is not None, None, ""
            return ended

    def view(self) -> tuple[datetime | None, str]:
        with self._lock:
            return self.since, self.error


def with_reachability(
    status: Mapping[str, Any],
    state: Reachability,
    *,
    provider: str,
    now: str,
    seen: tuple[Mapping[str, Any] | None, ...] = (),
) -> Mapping[str, Any]:
    """`status` with the Pod's reachability condition as `state` says: False during an outage
    (for a Pod not yet ended), True after one on a Pod that carried it (in `status`, or in one of
    `seen`: the status last written, the one the API server last showed; kept from then on),
    else unchanged (the same object, so the writer has nothing new to write)."""
    since, error = state.view()
    conditions = list(status.get("conditions") or [])
    carried = _condition(conditions)
    old = carried
    for other in seen:
        old = old or _condition((other or {}).get("conditions") or [])
    if since is None:
        if old is None:
            return status
        wanted = (
            ("True", str(old.get("reason")), str(old.get("message")))
            if old.get("status") == "True"
            else ("True", names.REASON_PROVIDER_REACHABLE, f"{provider} answers again")
        )  # once a Pod carried it, it keeps it: a status rebuilt without it would drop it
    else:
        if status.get("phase") in ("Succeeded", "Failed"):
            return status
        wanted = (
            "False",
            names.REASON_PROVIDER_UNREACHABLE,
            f"{provider} has not answered since {rfc3339(since)}: {error}; nothing is stopped or taken as lost "
            "while it does not answer",
        )
    if carried is not None and (carried.get("status"), carried.get("reason"), carried.get("message")) == wanted:
        return status
    moved = old.get("lastTransitionTime") if old is not None and old.get("status") == wanted[0] else now
    condition = {
        "type": names.POD_CONDITION_PROVIDER_REACHABLE,
        "status": wanted[0],
        "lastProbeTime": None,
        "lastTransitionTime": moved,
        "reason": wanted[1],
        "message": wanted[2],
    }
    others = [c for c in conditions if c.get("type") != names.POD_CONDITION_PROVIDER_REACHABLE]
    return {**status, "conditions": [*others, condition]}


def _condition(conditions: Any) -> Mapping[str, Any] | None:
    return next((c for c in conditions if c.get("type") == names.POD_CONDITION_PROVIDER_REACHABLE), None)
