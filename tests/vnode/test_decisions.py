"""`vnode.decisions.decide`: every row of observed state (the Pod in the API, the Handler's
record of it, a tombstone) gives one decision, carrying what the pod controller needs."""

from __future__ import annotations

from typing import Any

import pytest

from providers.claim import claim_name
from vnode.decisions import Action, Decision, decide
from vnode.tracking import Tracked


def pod(uid: str = "u1", *, deleting: bool = False, phase: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "default", "name": "web", "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase} if phase else {}}


def tracked(uid: str = "u1") -> Tracked:
    return Tracked("default", "web", uid, claim_name("default", "web", uid), pod(uid))


TOMBSTONE = pod("u0")

# (case, Pod in the API, tracked entry, tombstone) -> (action, pod acted on, uid, successor)
ROWS: list[tuple[str, Any, Tracked | None, Any, Action, Any, str | None, bool]] = [
    ("gone and untracked", None, None, None, Action.NOTHING, None, None, False),
    ("gone, tracked", None, tracked(), None, Action.TERMINATE_GONE, None, "u1", False),
    ("gone, tracked, tombstone too", None, tracked(), TOMBSTONE, Action.TERMINATE_GONE, None, "u1", False),
    ("gone, untracked, tombstone", None, None, TOMBSTONE, Action.TERMINATE_TOMBSTONE, TOMBSTONE, None, False),
    ("deleting, untracked", pod(deleting=True), None, None, Action.TERMINATE_THEN_DELETE, "live", None, False),
    ("deleting, tracked", pod(deleting=True), tracked(), None, Action.TERMINATE_THEN_DELETE, "live", None, False),
    (
        "deleting, tracked other uid",
        pod(deleting=True),
        tracked("u0"),
        None,
        Action.TERMINATE_THEN_DELETE,
        "live",
        None,
        False,
    ),
    ("live, tracked same uid", pod(), tracked(), None, Action.UPDATE, "live", None, False),
    ("live terminal, tracked same uid", pod(phase="Failed"), tracked(), None, Action.UPDATE, "live", None, False),
    ("live, tracked older uid", pod("u2"), tracked("u1"), None, Action.TERMINATE_GONE, None, "u1", True),
    # Never provisioned again; only its instance (if any) is looked up: logs, and a release if it bills.
    ("live Succeeded, untracked", pod(phase="Succeeded"), None, None, Action.ADOPT_FINISHED, "live", None, False),
    ("live Failed, untracked", pod(phase="Failed"), None, None, Action.ADOPT_FINISHED, "live", None, False),
    ("live Pending, untracked", pod(phase="Pending"), None, None, Action.CREATE_OR_ADOPT, "live", None, False),
    ("live, untracked, no status", pod(), None, None, Action.CREATE_OR_ADOPT, "live", None, False),
    ("live, untracked, stale tombstone", pod(), None, TOMBSTONE, Action.CREATE_OR_ADOPT, "live", None, False),
]


@pytest.mark.parametrize(
    ("case", "live", "entry", "tombstone", "action", "acted_on", "uid", "successor"), ROWS, ids=[r[0] for r in ROWS]
)
def test_every_observed_state_gives_one_decision(
    case: str,
    live: Any,
    entry: Tracked | None,
    tombstone: Any,
    action: Action,
    acted_on: Any,
    uid: str | None,
    successor: bool,
) -> None:
    decision = decide(live, entry, tombstone)
    assert decision.action is action, case
    assert decision.pod is (live if acted_on == "live" else acted_on)
    assert (decision.uid, decision.successor) == (uid, successor)
    assert decision.why  # every decision says why, for the log


def test_a_decision_is_frozen() -> None:
    decision = decide(None, None)
    assert isinstance(decision, Decision)
    with pytest.raises(AttributeError):
        decision.why = "changed"  # type: ignore[misc]


def test_decide_never_mutates_what_it_observes() -> None:
    live, entry = pod(deleting=True), tracked()
    before = (repr(live), repr(entry))
    decide(live, entry, TOMBSTONE)
    assert (repr(live), repr(entry)) == before
