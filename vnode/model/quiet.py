"""The quiet check of one poll tick: whether a list's facts for a tracked Pod change nothing at all.

Called by `vnode.phases.statussync.StatusSync.poll_once` for every tracked Pod, under the entry's
lock, before the full `vnode.model.assess.observe`; must answer True only where `observe` would
change nothing but the time the instance was last seen billing, and never does I/O. Tests:
tests/vnode/test_quiet.py::test_a_settled_pod_takes_the_quiet_path_only_when_observe_would_change_nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from providers.base import Instance, InstanceState
from vnode.model.runs import Rules
from vnode.model.tracking import Tracked


def settled(entry: Tracked, instance: Instance, *, rules: Rules, seen_at: float) -> bool:
    """True if `instance` (the entry's, in this list) changes nothing: the facts equal the last
    ones its status was computed from (each container's included: equal facts are where the full
    assessment stops too, before it weighs containers), with the same probe verdicts, no step
    of the Pod or of a container due, no list miss to
    forget, not queued (a queued instance has a deadline), and a billing record that already
    says what these facts say (a billing instance's span open for it, else none open). Then only
    `entry.billing_seen` moves to `seen_at` (epoch seconds), as `vnode.model.billing.observe`
    would move it. False: the caller takes the full path (`assess.observe`). Whether the record
    agrees is remembered on the entry with the facts and record it was found for (both immutable;
    the caller forgets it when `rules` change, `forget_rules`)."""
    runs = entry.runs
    if (
        runs.finished
        or runs.due is not None
        or any(runs.due is not None for runs in entry.containers.values())  # a container's step due
        or entry.misses
        or entry.desired_status is None
        or entry.probe_verdicts is not entry.judged_by
        or instance.id != entry.instance_id
        or instance.state is InstanceState.PROVISIONING
    ):
        return False
    last = entry.last_instance
    if instance is not last and instance != last:
        return False
    record = entry.billing
    if entry.quiet_facts is last and entry.quiet_record is record:
        bills = entry.quiet_bills  # the same facts and record as last tick: they agreed then
    else:
        if record is None:
            return False
        bills = rules.billing(instance)
        if bills and (record.open is None or record.instance != instance.id):
            return False  # a span to open (or another instance's to close): the full path
        if not bills and record.open is not None:
            return False  # a span to close: the full path
        entry.quiet_facts, entry.quiet_record, entry.quiet_bills = last, record, bills
    if bills:
        entry.billing_seen = seen_at
    return True


def written(entry: Tracked) -> bool:
    """Nothing waits to be written: the status written is the one desired, the annotations
    written are the desired ones, no Event or credential is held. A cheap sufficient check for
    a settled Pod; False says only "ask `PodWriter.needs_flush`", which decides."""
    return (
        entry.desired_status is entry.written_status
        and not entry.events
        and entry.credential is None
        and entry.desired_annotations == entry.written_annotations
    )


def forget_rules(entries: Iterable[Tracked]) -> None:
    """The provider's rules changed: whether facts bill is to be decided again for every entry."""
    for entry in entries:
        entry.quiet_facts = entry.quiet_record = None
