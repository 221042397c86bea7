"""How facts move a Pod's billing record (vnode.model.billing): a span opens at the provider's
fact time (created_at, or started_at where billing starts with the workload), closes at the end
fact or when the instance was last seen billing, a replacement opens a new span, a record read
back from the Pod is moved on and never reset; and the node's billing-seen-at at most once a minute."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from kube import billing, names
from kube.billing import Billing, Span
from providers.base import BillingStart, ClaimName, Instance, InstanceId, InstanceState
from tests.support.factories import make_pod
from vnode.model import billing as model
from vnode.model.runs import Rules
from vnode.model.tracking import TrackedMap

T0 = datetime(2026, 12, 5, 10, 0, 0, tzinfo=UTC).timestamp()
VM = Rules(bills=True)  # bills after exit (a VM), from creation
SANDBOX = Rules(bills=False, starts=BillingStart.STARTED)  # per second of container time
S = InstanceState


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, UTC)


def instance(state: InstanceState, *, iid: str = "i-1", started: float | None = None, **facts: Any) -> Instance:
    finished = facts.pop("finished", None)
    return Instance(
        id=InstanceId(iid),
        claim=ClaimName("c"),
        state=state,
        created_at=at(0),
        started_at=None if started is None else at(started),
        finished_at=None if finished is None else at(finished),
        **facts,
    )


OPEN_I1 = Billing(T0, "i-1")

FOLLOW = [
    # (what, record, instance, rules, seen (s after T0: now, and when last seen billing), expected)
    ("a VM provisioning bills from its creation", billing.EMPTY, instance(S.PROVISIONING), VM, 30, OPEN_I1),
    ("a sandbox not started yet bills nothing", billing.EMPTY, instance(S.INITIALIZING), SANDBOX, 30, billing.EMPTY),
    (
        "a sandbox bills from its start",
        billing.EMPTY,
        instance(S.RUNNING, started=12),
        SANDBOX,
        30,
        Billing(T0 + 12, "i-1"),
    ),
    ("the same instance again: unchanged", OPEN_I1, instance(S.RUNNING, started=5), VM, 90, OPEN_I1),
    ("a VM whose workload ended still bills", OPEN_I1, instance(S.SUCCEEDED, finished=50), VM, 90, OPEN_I1),
    (
        "a sandbox whose workload ended closes at its end fact",
        Billing(T0 + 12, "i-1"),
        instance(S.SUCCEEDED, started=12, finished=50),
        SANDBOX,
        45,
        Billing(None, "", (Span(T0 + 12, T0 + 50, 38),)),
    ),
    (
        "terminated without an end fact: closed when last seen billing",
        OPEN_I1,
        instance(S.TERMINATED),
        VM,
        70,
        Billing(None, "", (Span(T0, T0 + 70, 70),)),
    ),
    (
        "a replacement opens a new span, the old one closed at its start",
        OPEN_I1,
        Instance(InstanceId("i-2"), ClaimName("c"), S.PROVISIONING, created_at=at(100)),
        VM,
        110,
        Billing(T0 + 100, "i-2", (Span(T0, T0 + 100, 100),)),
    ),
    (
        "a run again in place reopens no earlier than the last span ended",
        Billing(None, "", (Span(T0 + 12, T0 + 50, 38),)),
        instance(S.RUNNING, started=60),
        Rules(bills=False, starts=BillingStart.CREATED),
        70,
        Billing(T0 + 60, "i-1", (Span(T0 + 12, T0 + 50, 38),)),
    ),
    ("terminating, nothing open: unchanged", billing.EMPTY, instance(S.TERMINATING), VM, 10, billing.EMPTY),
]


@pytest.mark.parametrize(
    ("record", "fact", "rules", "seen", "expected"), [c[1:] for c in FOLLOW], ids=[c[0] for c in FOLLOW]
)
def test_one_observation_moves_the_record_from_facts(
    record: Billing, fact: Instance, rules: Rules, seen: float, expected: Billing
) -> None:
    assert model.follow(record, fact, rules=rules, seen_at=T0 + seen, last_seen=T0 + seen) == expected


STOPPED = [
    ("gone, last seen billing at +40", OPEN_I1, None, 40.0, Billing(None, "", (Span(T0, T0 + 40, 40),))),
    ("gone, never seen: nothing counted", OPEN_I1, None, None, Billing(None, "", (Span(T0, T0, 0),))),
    (
        "a VM seen billing after its workload's end fact: the later",
        OPEN_I1,
        instance(S.TERMINATED, finished=30),
        40.0,
        Billing(None, "", (Span(T0, T0 + 40, 40),)),
    ),
    (
        "an end fact after the last sighting",
        OPEN_I1,
        instance(S.TERMINATED, finished=55),
        40.0,
        Billing(None, "", (Span(T0, T0 + 55, 55),)),
    ),
    (
        "a seen time before the start counts nothing",
        Billing(T0 + 20, "i-1"),
        None,
        10.0,
        Billing(None, "", (Span(T0 + 20, T0 + 20, 0),)),
    ),
    ("another instance's span is left open", OPEN_I1, instance(S.TERMINATED, iid="i-0", finished=5), 40.0, OPEN_I1),
    ("nothing open: unchanged", billing.EMPTY, None, 40.0, billing.EMPTY),
]


@pytest.mark.parametrize(("record", "fact", "seen", "expected"), [c[1:] for c in STOPPED], ids=[c[0] for c in STOPPED])
def test_a_stopped_or_gone_instance_closes_at_the_later_of_its_end_fact_and_when_last_seen_billing(
    record: Billing, fact: Instance | None, seen: float | None, expected: Billing
) -> None:
    assert model.stopped(record, fact, last_seen=None if seen is None else T0 + seen) == expected


def test_a_record_read_back_from_the_pod_is_moved_on_never_reset() -> None:
    """After a restart the entry starts from the Pod's annotation: the same instance seen again
    writes nothing; a close is added to the spans already there."""
    earlier = Billing(T0 + 100, "i-1", (Span(T0, T0 + 50, 50),))
    pod = make_pod("kept", metadata={"annotations": {names.BILLING_ANNOTATION: billing.dump(earlier)}})
    tracked = TrackedMap()
    tracked.restore_billing_anchor(T0 + 300)
    entry = tracked.track(pod)
    assert entry.billing_seen == T0 + 300  # the node's billing-seen-at, until it is seen again
    assert not model.observe(entry, instance(S.RUNNING, started=100), now=at(400), rules=VM)
    assert names.BILLING_ANNOTATION not in entry.desired_annotations
    assert model.close(entry, None)  # gone: last seen billing at +400
    kept = billing.parse(entry.desired_annotations[names.BILLING_ANNOTATION])
    assert kept == Billing(None, "", (Span(T0, T0 + 50, 50), Span(T0 + 100, T0 + 400, 300)))


def test_a_gone_instance_after_a_restart_closes_at_the_nodes_billing_seen_at_or_its_own_start() -> None:
    open_since = Billing(T0 + 100, "i-1")
    pod = make_pod("gone", metadata={"annotations": {names.BILLING_ANNOTATION: billing.dump(open_since)}})
    for anchor, end in ((T0 + 160, T0 + 160), (T0 + 40, T0 + 100), (None, T0 + 100)):
        tracked = TrackedMap()
        if anchor is not None:
            tracked.restore_billing_anchor(anchor)
        entry = tracked.track(pod)
        model.close(entry, None)
        assert entry.billing is not None and entry.billing.closed[-1].end == end


def test_the_nodes_billing_seen_at_is_due_at_most_once_a_minute() -> None:
    seen = model.BillingSeen()
    assert seen.due() is None and seen.wanted(T0)  # no list saw every span billing yet
    seen.saw(T0)
    assert seen.due() == T0
    seen.written(T0)
    assert not seen.wanted(T0 + 30) and seen.wanted(T0 + 60)
    seen.saw(T0 + 30)
    assert seen.due() is None
    seen.saw(T0 + 20)  # an older list changes nothing
    seen.saw(T0 + 61)
    assert seen.due() == T0 + 61
