"""A provider's notice of an interruption, as the Pod records it and as the Pod's status reads.

Pure. The notice intake (`vnode.phases.notices`) writes `record_of(notice)` into the Pod's
`nebula.io/interruption` annotation before it acknowledges the notice, so a restarted manager
reads it back (`noted_on`) and resumes the stop; the lifecycle stops the Pod within `grace_for`
and ends it `Failed` as a kubelet's graceful node shutdown ends a Pod
(`vnode.model.stopping.disrupted_status`: its message, `DisruptionTarget` with reason
`TerminationByKubelet`), the status reason naming the cause (`reason_of`), so an interruption
never reads as the workload's failure.
Tests: tests/vnode/test_interruption_model.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kube import names
from kube.times import parse_rfc3339, rfc3339
from providers.notices import MAX_DETAIL, Notice, NoticeKind

JsonDict = dict[str, Any]
MAX_RECORD = 2048  # characters of a `nebula.io/interruption` annotation read back
# The kubelet's own words for a Pod it ends because its node shuts down.
SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
REASONS = {
    NoticeKind.SPOT_INTERRUPTION: names.REASON_SPOT_INTERRUPTED,
    NoticeKind.MAINTENANCE: names.REASON_MAINTENANCE_SCHEDULED,
    NoticeKind.STOPPING: names.REASON_INSTANCE_STOPPING,
    NoticeKind.REBALANCE: names.REASON_REBALANCE_RECOMMENDED,
}
WORDS = {
    NoticeKind.SPOT_INTERRUPTION: "a spot interruption",
    NoticeKind.MAINTENANCE: "scheduled maintenance",
    NoticeKind.STOPPING: "the instance stopping",
    NoticeKind.REBALANCE: "a rebalance recommendation",
}


@dataclass(frozen=True)
class Noted:
    """A notice as recorded on its Pod: what stops it, and when the capacity goes."""

    id: str
    kind: NoticeKind
    instance: str
    issued_at: datetime
    deadline: datetime | None
    provider: str
    detail: str = ""

    @property
    def reason(self) -> str:
        return reason_of(self.kind)

    def message(self) -> str:
        """The Pod's status message and its Event's: the kubelet's sentence, then the notice."""
        goes = f"; the capacity goes at {rfc3339(self.deadline)}" if self.deadline is not None else ""
        said = f": {self.detail}" if self.detail else ""
        return (
            f"{SHUTDOWN_MESSAGE} {self.provider} gave notice of {WORDS[self.kind]} of instance {self.instance}"
            f"{goes}{said}"
        )


def reason_of(kind: NoticeKind) -> str:
    return REASONS[kind]


def noted(notice: Notice, provider: str) -> Noted:
    return Noted(notice.id, notice.kind, notice.instance_id, notice.issued_at, notice.deadline, provider, notice.detail)


def record_of(value: Noted) -> str:
    """The `nebula.io/interruption` annotation's text (JSON, bounded: the detail is)."""
    body: JsonDict = {
        "id": value.id[:200],
        "kind": value.kind.value,
        "instance": value.instance[:200],
        "issuedAt": rfc3339(value.issued_at),
        "provider": value.provider[:100],
    }
    if value.deadline is not None:
        body["deadline"] = rfc3339(value.deadline)
    if value.detail:
        body["detail"] = value.detail[:MAX_DETAIL]
    return json.dumps(body, separators=(",", ":"), sort_keys=True)


def noted_on(pod: Mapping[str, Any]) -> Noted | None:
    """The notice recorded on the Pod, or None (none, or a record that does not read: a hand-
    written or damaged annotation is ignored, never acted on)."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(names.INTERRUPTION_ANNOTATION)
    if not isinstance(text, str) or not text or len(text) > MAX_RECORD:
        return None
    try:
        body = json.loads(text)
        kind = NoticeKind(body["kind"])
        issued = parse_rfc3339(str(body["issuedAt"]))
        deadline = parse_rfc3339(str(body["deadline"])) if body.get("deadline") else None
        fields = (str(body["id"]), str(body.get("instance", "")), str(body.get("provider", "")))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    detail = body.get("detail")
    return Noted(fields[0], kind, fields[1], issued, deadline, fields[2], detail if isinstance(detail, str) else "")


def sooner(new: Noted, old: Noted) -> bool:
    """Whether `new` takes the instance before `old` does: a capacity-taking notice after a
    rebalance recommendation, one due at once after one with a deadline, an earlier deadline."""
    if new.kind is NoticeKind.REBALANCE:
        return False
    if old.kind is NoticeKind.REBALANCE:
        return True
    if new.deadline is None:
        return old.deadline is not None
    return old.deadline is not None and new.deadline < old.deadline


def grace_for(pod_grace: float, value: Noted, now: datetime) -> float:
    """The grace of an interrupted Pod's containers: the smaller of its own and the time left
    before the capacity goes (its own when the notice names no deadline; never negative)."""
    if value.deadline is None:
        return pod_grace
    return max(min(pod_grace, (value.deadline - now).total_seconds()), 0.0)
