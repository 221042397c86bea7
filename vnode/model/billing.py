"""How facts move a Pod's billing record (`kube.billing`, the annotation `nebula.io/billing`).

Pure decisions, called by the phases through `assess` (an observation), the teardown and the
lifecycle (an instance terminated, released or gone): a span opens at the provider's fact time
(`Rules.starts`: `created_at`, or `started_at` once the workload runs), never at the time the
vnode looked, and closes at the later of the instance's `finished_at` and the time the vnode last
saw it billing (both times it still billed: an under-count, never an over-count). A record is read back from the Pod and
only ever moved on, never reset. `BillingSeen` keeps the node's `nebula.io/billing-seen-at`.
Does no I/O. Tests: tests/vnode/test_billing_model.py,
tests/vnode/test_billing_devcluster.py::test_I12_the_billing_record_is_written_from_facts_and_never_reset.
"""

from __future__ import annotations

import threading
from datetime import datetime

from kube import billing, names
from kube.billing import Billing
from providers.base import BillingStart, Instance
from vnode.model.runs import Rules
from vnode.model.tracking import Tracked

SEEN_EVERY = 60.0  # seconds: the node's billing-seen-at is written at most this often


def start_of(instance: Instance, *, starts: BillingStart) -> float | None:
    """Epoch seconds at which the provider began billing `instance`; None: not yet (a provider
    that bills from the start of the workload, which has not started)."""
    if starts is BillingStart.STARTED:
        return None if instance.started_at is None else instance.started_at.timestamp()
    return instance.created_at.timestamp()


def follow(record: Billing, instance: Instance, *, rules: Rules, seen_at: float, last_seen: float | None) -> Billing:
    """The record after one observation (at epoch `seen_at`) of the Pod's current `instance`,
    last seen billing at `last_seen` (None: never).

    Billing (`rules.billing`): its span opens at the fact time (a replacement's span closes the
    previous one at its start, `Billing.opened`); a span reopened for the same instance (its
    workload ran again in place) starts no earlier than the last one ended. Not billing any more
    (its workload ended where nothing bills after exit, or it is terminating or terminated):
    its open span closes as `stopped` says."""
    if rules.billing(instance):
        start = start_of(instance, starts=rules.starts)
        if start is None or record.open is not None and record.instance == instance.id:
            return record
        last_end = record.closed[-1].end if record.closed and record.open is None else None
        if last_end is not None and start < last_end:
            rerun = instance.started_at.timestamp() if instance.started_at is not None else seen_at
            start = max(rerun, last_end)
        return record.opened(start, instance.id)
    return stopped(record, instance, last_seen=last_seen)


def stopped(record: Billing, instance: Instance | None, *, last_seen: float | None) -> Billing:
    """The record once `instance` stopped billing (None: it is gone): closed at its end fact
    (`finished_at`) or at `last_seen`, the time it was last seen billing, whichever is later:
    billing went on until both, so neither over-counts (a VM's workload may end before the VM
    stops billing). Neither known: at the span's own start, nothing counted. Another instance's
    open span is left as it is."""
    if record.open is None or instance is not None and record.instance and record.instance != instance.id:
        return record
    ends = [last_seen] if last_seen is not None else []
    if instance is not None and instance.finished_at is not None:
        ends.append(instance.finished_at.timestamp())
    return record.closed_at(max(ends, default=record.open))


def current(entry: Tracked) -> Billing:
    """The entry's record: the one it holds, else the one on its Pod (read back after a
    restart or an adoption, never started afresh). One Nebula did not write reads as empty."""
    if entry.billing is not None:
        return entry.billing
    text = ((entry.pod.get("metadata") or {}).get("annotations") or {}).get(names.BILLING_ANNOTATION)
    try:
        return billing.parse(text)
    except billing.BillingError:
        return billing.EMPTY


def record(entry: Tracked, moved: Billing) -> bool:
    """Keep `moved` as the entry's record; a change becomes a desired annotation (written with
    the Pod's metadata, before its status). True if it changed."""
    before = current(entry)
    entry.billing = moved
    if moved == before:
        return False
    entry.desired_annotations[names.BILLING_ANNOTATION] = billing.dump(moved)
    return True


def unwritten(entry: Tracked) -> bool:
    """The entry's record has moved since it was last written to its Pod (by this thread or
    another: the poll thread may close a span while a worker stops the Pod)."""
    desired = entry.desired_annotations.get(names.BILLING_ANNOTATION)
    return desired is not None and entry.written_annotations.get(names.BILLING_ANNOTATION) != desired


def observe(entry: Tracked, instance: Instance, *, now: datetime, rules: Rules) -> bool:
    """One observation (at `now`) of the entry's instance moves its record; True if it changed."""
    if entry.instance_id is not None and instance.id != entry.instance_id:
        return False
    if rules.billing(instance):
        entry.billing_seen = seen_at = now.timestamp()
        return record(entry, follow(current(entry), instance, rules=rules, seen_at=seen_at, last_seen=seen_at))
    return record(entry, stopped(current(entry), instance, last_seen=entry.billing_seen))


def close(entry: Tracked, instance: Instance | None) -> bool:
    """The entry's instance stopped billing (terminated, released; `instance`: its last facts,
    if any) or is gone: its span closes at the end fact, else when it was last seen billing
    (`entry.billing_seen`: after a restart, the node's billing-seen-at until it is seen again).
    True if it changed."""
    return record(entry, stopped(current(entry), instance, last_seen=entry.billing_seen))


class BillingSeen:
    """The node's `nebula.io/billing-seen-at`: the time of the last `list()` that saw every open
    span billing (`saw`), written at most once a `SEEN_EVERY` (`due`, `written`). The value read
    back at start-up goes to `TrackedMap.billing_anchor`. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: float | None = None
        self._written: float | None = None

    def wanted(self, at: float) -> bool:
        """Whether a list begun at `at` that saw every open span billing would be written (a
        minute since the last write): else nothing need be checked."""
        with self._lock:
            return self._written is None or at - self._written >= SEEN_EVERY

    def saw(self, at: float) -> None:
        """A list begun at `at` saw every open span billing."""
        with self._lock:
            if self._latest is None or at > self._latest:
                self._latest = at

    def due(self) -> float | None:
        """The value to write now (at most once a `SEEN_EVERY`), or None."""
        with self._lock:
            latest = self._latest
            if latest is None or self._written is not None and latest - self._written < SEEN_EVERY:
                return None
            return latest

    def written(self, at: float) -> None:
        with self._lock:
            self._written = at
