"""Which of the fake cloud's instances a call may see: the owner's (provider calls) or any
(control calls, by id or claim).

Called by `FakeCloud` under its lock. Pure selection over the stored records; it never
changes a record. A record whose owner is "" (made before owners existed) matches no owner.
Tests: tests/providers/fake/test_fake_ownership.py.
"""

from __future__ import annotations

from collections.abc import Iterable

from providers import errors
from providers.fake.records import GOING_STATES, InstanceRecord

MAX_OWNER = 127  # `<cluster>.<alias>`: two DNS labels and a dot


def check_owner(owner: str) -> None:
    """InvalidRequest unless `owner` names one (every provider call carries its owner key)."""
    if not owner or len(owner) > MAX_OWNER:
        raise errors.InvalidRequest("fake: the call names no owner (an Owner.key such as 'cluster.alias')")


def owned(record: InstanceRecord | None, owner: str) -> InstanceRecord | None:
    """`record` if this owner made it, else None (another owner's instance is taken as gone)."""
    return record if record is not None and record.owner and record.owner == owner else None


def claim_holder(records: Iterable[InstanceRecord], claim: str, owner: str) -> InstanceRecord | None:
    """The owner's instance for `claim` that provision adopts: one that is not going away."""
    return next(
        (r for r in records if r.claim == claim and owned(r, owner) is not None and r.state not in GOING_STATES),
        None,
    )


def control_target(records: Iterable[InstanceRecord], instance: str | None, claim: str | None) -> InstanceRecord | None:
    """The instance a control call (exit, lose) names, whoever owns it: by id, else by claim,
    the newest one not going away, else the newest."""
    found = list(records)
    by_id = next((r for r in found if instance and r.id == instance), None)
    if by_id is not None or not claim:
        return by_id
    named = [r for r in found if r.claim == claim]
    staying = [r for r in named if r.state not in GOING_STATES]
    chosen = staying or named
    return chosen[-1] if chosen else None
