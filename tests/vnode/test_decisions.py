"""`vnode.model.decisions.decide`: every row of observed state (the Pod in the API, the Handler's
record of it, a tombstone) gives one decision, carrying what the pod controller needs; and
`take_up`: every row of what was seen of an untracked Pod's claim gives one step."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from kube import names
from providers.base import ClaimName, Instance, InstanceId, InstanceState
from providers.claim import claim_name
from vnode.model.decisions import Action, Decision, Seen, TakeUp, decide, take_up
from vnode.model.tracking import Lookup, Tracked


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


# -- take_up: a Pod the Handler does not track ------------------------------------------------
CLAIM = claim_name("default", "web", "u1")
SEEN_AT = datetime(2026, 12, 1, tzinfo=UTC)
MINE = Instance(InstanceId("i-1"), CLAIM, InstanceState.RUNNING, created_at=SEEN_AT)
OTHERS = Instance(InstanceId("i-1"), ClaimName("another-claim"), InstanceState.RUNNING, created_at=SEEN_AT)
RETRY_AFTER = 15.0


def untracked(*, phase: str | None = None, recorded: str | None = None) -> dict[str, Any]:
    live = pod(phase=phase)
    if recorded is not None:
        live["metadata"]["annotations"] = {names.INSTANCE_ID_ANNOTATION: recorded}
    return live


UNKNOWN, NOT_FOUND = Seen(Lookup.UNKNOWN), Seen(Lookup.NOT_FOUND)
# (case, Pod in the API, what was seen of its claim) -> (step, instance adopted, instance id, delay, finished)
TAKE_UP_ROWS: list[tuple[str, Any, Seen, TakeUp, Instance | None, str | None, float | None, bool]] = [
    ("could not ask", untracked(), UNKNOWN, TakeUp.WAIT, None, None, RETRY_AFTER, False),
    ("could not ask, recorded", untracked(recorded="i-1"), UNKNOWN, TakeUp.WAIT, None, None, RETRY_AFTER, False),
    ("finished, could not ask", untracked(phase="Failed"), UNKNOWN, TakeUp.WAIT, None, None, RETRY_AFTER, True),
    ("listed", untracked(), Seen(Lookup.FOUND, MINE), TakeUp.ADOPT, MINE, None, None, False),
    ("listed, recorded", untracked(recorded="i-1"), Seen(Lookup.FOUND, MINE), TakeUp.ADOPT, MINE, None, None, False),
    ("finished, listed", untracked(phase="Succeeded"), Seen(Lookup.FOUND, MINE), TakeUp.ADOPT, MINE, None, None, True),
    ("finished, not listed", untracked(phase="Succeeded"), NOT_FOUND, TakeUp.NOTHING, None, None, None, True),
    # A finished Pod is never confirmed gone, let alone run again.
    (
        "finished, recorded",
        untracked(phase="Failed", recorded="i-1"),
        NOT_FOUND,
        TakeUp.NOTHING,
        None,
        None,
        None,
        True,
    ),
    ("new", untracked(), NOT_FOUND, TakeUp.PROVISION, None, None, None, False),
    ("new, Pending", untracked(phase="Pending"), NOT_FOUND, TakeUp.PROVISION, None, None, None, False),
    ("recorded, not listed", untracked(recorded="i-1"), NOT_FOUND, TakeUp.CONFIRM_GONE, None, "i-1", None, False),
    (
        "recorded, get finds it (a late list)",
        untracked(recorded="i-1"),
        Seen(Lookup.NOT_FOUND, confirmed=True, got=MINE),
        TakeUp.ADOPT,
        MINE,
        None,
        None,
        False,
    ),
    (
        "recorded, get finds another claim's",
        untracked(recorded="i-1"),
        Seen(Lookup.NOT_FOUND, confirmed=True, got=OTHERS),
        TakeUp.LOSE,
        None,
        "i-1",
        None,
        False,
    ),
    (
        "recorded, get says gone",
        untracked(recorded="i-1"),
        Seen(Lookup.NOT_FOUND, confirmed=True),
        TakeUp.LOSE,
        None,
        "i-1",
        None,
        False,
    ),
]


@pytest.mark.parametrize(
    ("case", "live", "seen", "step", "instance", "instance_id", "delay", "finished"),
    TAKE_UP_ROWS,
    ids=[r[0] for r in TAKE_UP_ROWS],
)
def test_every_observed_state_of_an_untracked_pod_gives_one_step(
    case: str,
    live: Any,
    seen: Seen,
    step: TakeUp,
    instance: Instance | None,
    instance_id: str | None,
    delay: float | None,
    finished: bool,
) -> None:
    untracked_step = take_up(live, seen, retry_after=RETRY_AFTER)
    assert untracked_step.step is step, case
    assert untracked_step.instance is instance
    assert (untracked_step.instance_id, untracked_step.delay, untracked_step.finished) == (instance_id, delay, finished)
    assert untracked_step.slow is (step in (TakeUp.PROVISION, TakeUp.CONFIRM_GONE))
    assert untracked_step.why  # every step says why, for the log


def test_an_instance_recorded_on_the_pod_and_gone_is_lost_with_a_message_naming_it() -> None:
    lost = take_up(untracked(recorded="i-9"), Seen(Lookup.NOT_FOUND, confirmed=True), retry_after=RETRY_AFTER)
    assert lost.why == ("instance i-9 recorded on the Pod is gone (found so when the node started tracking the Pod)")


def test_take_up_never_mutates_what_it_observes() -> None:
    live = untracked(recorded="i-1")
    before = repr(live)
    take_up(live, Seen(Lookup.NOT_FOUND, confirmed=True, got=OTHERS), retry_after=RETRY_AFTER)
    assert repr(live) == before
