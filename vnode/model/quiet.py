"""The quiet check of one poll tick: whether a list's facts for a tracked Pod change nothing at all.

Called by `vnode.phases.statussync.StatusSync.poll_once` for every tracked Pod, under the entry's
lock, before the full `vnode.model.assess.observe`; must answer True only where `observe` would
change nothing but the time the instance was last seen billing, and never does I/O. Tests:
tests/vnode/test_quiet.py::test_a_settled_pod_takes_the_quiet_path_only_when_observe_would_change_nothing.
"""

from __future__ import annotations

from providers.base import Instance, InstanceState
from vnode.model.runs import Rules
from vnode.model.tracking import Tracked


def settled(entry: Tracked, instance: Instance, *, rules: Rules, seen_at: float) -> bool:
    """True if `instance` (the entry's, in this list) changes nothing: the facts equal the last
    ones its status was computed from, with the same probe verdicts, no step due, no list miss to
    forget, not queued (a queued instance has a deadline), and a billing record that already
    says what these facts say (a billing instance's span open for it, else none open). Then only
    `entry.billing_seen` moves to `seen_at` (epoch seconds), as `vnode.model.billing.observe`
    would move it. False: the caller takes the full path (`assess.observe`)."""
    runs = entry.runs
    if (
        runs.finished
        or runs.due is not None
        or entry.containers  # each container's own runs and dues: the full path weighs them
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
    if record is None:
        return False
    if rules.billing(instance):
        if record.open is None or record.instance != instance.id:
            return False
        entry.billing_seen = seen_at
    elif record.open is not None:
        return False
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
