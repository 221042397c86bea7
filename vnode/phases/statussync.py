"""Status sync from the provider: the poll loop and its tick, one `provider.list()` per poll interval.

The pod controller starts `StatusSync.run` on its poll thread; `StatusSync.poll_once` is one
tick. A tick recomputes every tracked Pod's desired metadata and status from the list,
sweeps orphans, and hands back the keys due for a write or a step (the pod controller's
workers write them through `PodWriter.flush`), among them a Pod whose instance is still queued
past its pool's timeout (`vnode.phases.giveup` gives it up). A list that saw every open billing
span billing moves the node's billing-seen-at (`vnode.model.billing.BillingSeen`). Never writes
to the API itself.

Invariant (I3): a failed list changes nothing (but the Pods' `nebula.io/ProviderReachable`
condition, `vnode.model.reachability`, which says why they hear nothing), and one list that
misses an instance changes nothing either; see
tests/vnode/test_invariants.py::test_I3_provider_unreachable_across_a_restart_changes_nothing and
tests/vnode/test_lifecycle.py::test_one_list_missing_an_instance_changes_nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from kube import observe
from providers import errors
from providers.base import ClaimName, Instance
from vnode.model import assess, billing
from vnode.model.quiet import forget_rules, settled, written
from vnode.model.reachability import Reachability
from vnode.model.runs import Step
from vnode.model.tracking import Rules, Tracked
from vnode.phases.context import PhaseContext
from vnode.phases.giveup import GiveUp
from vnode.phases.teardown import OrphanSweep

logger = logging.getLogger(__name__)
MISSES_BEFORE_GET = 2  # successful lists in a row without the instance before `get` is asked


class StatusSync:
    def __init__(self, context: PhaseContext, *, sweep: OrphanSweep, give_up: GiveUp | None = None) -> None:
        self._provider = context.provider
        self._give_up = give_up
        self._tracked = context.tracked
        self._inventory = context.inventory
        self._writer = context.writer
        self._sweep = sweep
        self._capabilities = context.capabilities
        self._rules = context.rules
        self._monotonic = context.monotonic
        self._now = context.now
        self._billing_seen = context.billing_seen
        self.reachability = Reachability()  # what each Pod says of the provider's answers
        self._quiet_rules: Rules | None = None  # the rules the quiet path's billing answers hold for

    def poll_once(
        self,
        live_claims: Iterable[ClaimName] | None = None,
        open_spans: Callable[[], set[ClaimName] | None] | None = None,
    ) -> list[str]:
        """One tick: one provider.list(), statuses recomputed, orphans swept.

        Returns the keys whose desired metadata or status changed, or whose next step is due
        (to be flushed and carried out), and the keys of Pods that waited for this provider to
        answer. A failed list changes nothing (I3). `live_claims` (the claims of every Pod on the
        node, or None while the Pod cache is not synced) enables the orphan sweep. `open_spans`
        (the claims of the node's Pods whose billing record is open, None while unknown): a list
        that saw each of them billing moves the node's billing-seen-at (`BillingSeen.saw`).
        """
        begun, begun_at = self._monotonic(), self._now().timestamp()
        try:
            snapshot = self._inventory.list()
            read = self._monotonic()  # the list's facts were read before this
        except errors.ProviderError as exc:
            logger.warning("list on %s failed; nothing changes this tick: %s", self._provider.name, exc)
            if not self.reachability.failed(str(exc), self._now()):
                return []
            keys = [entry.key for entry in self._tracked.entries() if not entry.terminal]
            observe.current().reachability(self._provider.name, False, len(keys))
            return keys  # each Pod says why it hears nothing (vnode.model.reachability)
        changed: list[str] = list(self._inventory.take_waiting())
        if self.reachability.answered():
            changed += [entry.key for entry in self._tracked.entries()]
            observe.current().reachability(self._provider.name, True, 0)
        rules = self._rules()
        if rules != self._quiet_rules:  # a setting changed what bills: decide it afresh
            self._quiet_rules = rules
            forget_rules(self._tracked.entries())
        # The node's billing-seen-at is written at most once a minute: other ticks need not
        # check which instances bill.
        want_billing = open_spans is not None and self._billing_seen.wanted(begun_at)
        all_billing = True  # every tracked open span's instance is in this list, billing
        billing_now: set[ClaimName] = set()
        seen_at = self._now().timestamp()  # this list's sighting, for the quiet path's billing
        needs_flush, quiet, get = self._writer.needs_flush, settled, snapshot.get
        for entry in self._tracked.entries():
            instance = get(entry.claim)
            if want_billing:
                if self._seen_billing(entry, instance, rules):
                    billing_now.add(entry.claim)
                elif billing.current(entry).open is not None:
                    all_billing = False
            if entry.terminal or entry.instance_id is None:
                continue
            if entry.terminate_asked and entry.runs.due is None:
                continue  # being torn down (or released): teardown looks at it on its own back-off
            if instance is not None:
                with entry.lock:
                    unmoved = quiet(entry, instance, rules=rules, seen_at=seen_at)
                if unmoved:  # the same facts, nothing due (vnode.model.quiet): only a failed write is
                    if not written(entry) and needs_flush(entry):
                        changed.append(entry.key)
                    continue
            with entry.lock:
                moved = self._observe(entry, instance, begun=begun, read=read, rules=rules)
            due = entry.next_due()
            queued = self._give_up.deadline(entry) if self._give_up is not None else None
            late = any(at is not None and at <= self._monotonic() for at in (due, queued))
            if moved or needs_flush(entry) or late:
                changed.append(entry.key)  # a queued instance past its deadline: given up (vnode.phases.giveup)
        if live_claims is not None:
            self._sweep.sweep(snapshot, set(live_claims) | self._tracked.claims())
        if want_billing and all_billing and open_spans is not None and self._billing_seen.wanted(begun_at):
            spans = open_spans()  # the Pods' own records: an untracked Pod's open span counts too
            if spans is not None and spans <= billing_now:
                self._billing_seen.saw(begun_at)
        return changed

    @staticmethod
    def _seen_billing(entry: Tracked, instance: Instance | None, rules: Rules) -> bool:
        """This list shows the entry's instance billing."""
        return instance is not None and instance.id == entry.instance_id and rules.billing(instance)

    def _observe(self, entry: Tracked, instance: Instance | None, *, begun: float, read: float, rules: Rules) -> bool:
        """Apply one list's view of the entry's instance. Gone only when lists past the list
        lag keep missing it AND `get` says so: one list that misses it changes nothing."""
        now, at = self._now(), self._monotonic()
        if instance is not None and instance.id == entry.instance_id:
            entry.misses, entry.missing_since = 0, None
            if _older_than_recorded(entry, begun):
                return False
            entry.facts_read = read
            return assess.observe(entry, instance, now=now, at=at, rules=rules)
        if entry.runs.finished or entry.runs.due is not None and entry.runs.due.step is Step.REPLACE:
            return False
        # Only a list begun `lag` after the instance was recorded can say it is gone: one
        # begun earlier may have been read before the provision completed.
        lag = self._capabilities().list_lag
        if begun - entry.provisioned_at < lag:
            return False
        entry.misses += 1
        entry.missing_since = begun if entry.missing_since is None else entry.missing_since
        if entry.misses < MISSES_BEFORE_GET or begun - entry.missing_since < lag:
            return False
        assert entry.instance_id is not None
        try:
            found = self._provider.get(entry.instance_id)
        except errors.ProviderError as exc:
            logger.info("%s missing from lists; get failed, so nothing changes: %s", entry.instance_id, exc)
            return False
        if found is not None:  # the list was late or partial: the instance lives
            entry.misses, entry.missing_since, entry.facts_read = 0, None, self._monotonic()
            return assess.observe(entry, found, now=now, at=at, rules=rules)
        assess.lose(entry, now=now, at=at, rules=rules)
        return True

    def run(
        self,
        stop: threading.Event,
        *,
        interval: Callable[[], float],
        live_claims: Callable[[], set[ClaimName] | None],
        changed: Callable[[str], None],
        open_spans: Callable[[], set[ClaimName] | None] | None = None,
    ) -> None:
        """The poll loop: a tick every `interval()` seconds until `stop`; each changed key
        goes to `changed` (the pod controller's queue)."""
        while not stop.is_set():
            for key in self.poll_once(live_claims(), open_spans):
                changed(key)
            stop.wait(interval())


def _older_than_recorded(entry: Tracked, begun: float) -> bool:
    """A list begun before the read behind the entry's applied facts returned (`facts_read`:
    provisioning's own `get`, the adoption's, a get here) may have read the instance before
    them: applied after them, it could move the Pod back (Running to Pending). Skipped; the
    next list, begun after, is applied. Tests: tests/vnode/test_one_pod_latency.py."""
    return entry.facts_read is not None and begun < entry.facts_read
