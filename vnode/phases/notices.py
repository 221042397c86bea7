"""The notice intake: a provider's notices of interruptions, read ahead and recorded on their Pods.

One per Runner whose provider is a `providers.notices.NoticeSource`, on a thread of its own
(`run`), started once the pod controller has reconciled the node; its stop does not wait for
a long poll under way (what that poll returns is left unacknowledged). Each batch is handled in
`handling_order`: a notice about a Pod's current instance is recorded on the entry and in the
Pod's `nebula.io/interruption` annotation (`vnode.model.interruption`), and the Pod is queued
for the pod controller's workers, the one writer of a Pod, which stop it
(`vnode.phases.lifecycle`: `DisruptionTarget` at once, the workload stopped within the notice).
A notice is acknowledged only once its record is written on the Pod (`settle`), so a manager that
dies in between reads it again, and a restarted one finds the record and resumes the stop. A
notice delivered again (a queue's visibility timeout ran out while it waited) is acknowledged
with its newest receipt, the one a queue honours.

A rebalance recommendation takes nothing: it is an Event (`RebalanceRecommended`) unless the
Pod's pool asks `interruption.proactive`. A notice about an instance no Pod here runs is kept
unacknowledged for `ADOPTION_WAIT` poll intervals (a restarted manager may not have adopted it
yet), then dropped; one about a Pod already finished or being terminated by us (our own
terminate's state change) is acknowledged with nothing done. Everything held is bounded.
Tests: tests/vnode/test_interruptions.py.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kube import names
from providers import errors
from providers.notices import Notice, NoticeSource, handling_order
from vnode.model.interruption import WORDS, noted, record_of, sooner
from vnode.model.stopping import Why
from vnode.model.tracking import Tracked
from vnode.phases.context import PhaseContext
from vnode.phases.giveup import pool_of

logger = logging.getLogger(__name__)
LONG_POLL = 5.0  # seconds a `notices` call may wait for one when nothing is pending
SHORT_POLL = 0.5  # seconds, while a recorded notice waits for its write (to be acknowledged)
ADOPTION_WAIT = 3  # poll intervals a notice about an instance no Pod here runs is kept
MAX_HELD = 10_000  # notices held (pending, unmatched) and ids remembered as handled
BACKOFF_FIRST, BACKOFF_MAX = 1.0, 30.0  # seconds between asks of a source that cannot be reached


@dataclass
class _Pending:
    notice: Notice
    entry: Tracked
    record: str  # the annotation that must be written before the ack


class NoticeIntake:
    def __init__(self, context: PhaseContext, source: NoticeSource, *, queue: Callable[[str], None]) -> None:
        self._context = context
        self._source = source
        self._queue = queue
        self._pending: dict[str, _Pending] = {}
        self._unmatched: dict[str, tuple[Notice, float]] = {}  # id -> (notice, monotonic first seen)
        self._handled: OrderedDict[str, None] = OrderedDict()  # acknowledged ids (a late repeat is known)

    def run(self, stop: threading.Event) -> None:
        """Ask for notices until `stop`; a source that cannot be reached is asked again after a
        back-off (nothing is lost: unacknowledged notices stay with it)."""
        backoff = BACKOFF_FIRST
        while not stop.is_set():
            began = self._context.monotonic()
            wait = SHORT_POLL if self._pending or self._unmatched else LONG_POLL
            try:
                batch = self._source.notices(wait)
            except errors.ProviderError as exc:
                logger.warning("notices from %s unreadable; asking again in %.0fs: %s", self._name, backoff, exc)
                stop.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
                continue
            backoff = BACKOFF_FIRST
            if stop.is_set():
                return  # read after the stop: left unacknowledged, so the next reader has it
            fresh = self.handle(batch)
            self.settle()
            spent = self._context.monotonic() - began
            if not fresh and spent < wait:
                stop.wait(wait - spent)  # a source that answers at once with nothing new: no spin

    @property
    def _name(self) -> str:
        return self._context.provider.name

    def handle(self, batch: Sequence[Notice]) -> int:
        """Record each new notice of `batch`, and each held one whose Pod is now known (see the
        module); returns how many were new."""
        if not batch and not self._unmatched:
            return 0
        serving = {entry.instance_id: entry for entry in self._context.tracked.entries() if entry.instance_id}
        for held, _ in list(self._unmatched.values()):  # adopted since: taken now
            entry = serving.get(held.instance_id)
            if entry is not None and held.id not in self._pending:
                del self._unmatched[held.id]
                self._take(held, entry)
        fresh = 0
        for notice in handling_order(batch):
            if notice.id in self._handled:  # a repeat of one already acknowledged: its new receipt too
                self._ack(notice)
                continue
            if notice.id in self._pending:  # delivered again while it waits: the newest receipt acks it
                self._pending[notice.id].notice = notice
                continue
            entry = serving.get(notice.instance_id)
            if entry is None:
                fresh += notice.id not in self._unmatched
                self._hold(notice)
                continue
            self._unmatched.pop(notice.id, None)
            fresh += 1
            self._take(notice, entry)
        return fresh

    def _take(self, notice: Notice, entry: Tracked) -> None:
        value = noted(notice, self._name)
        pools = self._context.pools
        if not notice.takes_capacity and not (pools is not None and pools.replaces_on_rebalance(pool_of(entry.pod))):
            self._context.events.pod(
                entry.pod, "Normal", names.EVENT_REBALANCE_RECOMMENDED, f"{value.message()} (nothing is stopped)"
            )
            self._ack(notice)
            return
        with entry.lock:
            current = entry.notice if entry.notice is not None and entry.notice.instance == entry.instance_id else None
            interrupting = entry.stop is not None and entry.stop.why is Why.INTERRUPTED
            ending = entry.runs.finished or entry.terminal or entry.terminate_asked or entry.stop is not None
            if current is None:
                replace = not ending
            else:  # one already governs: a sooner one (a spot warning after a rebalance) takes over
                replace = (interrupting or not ending) and sooner(value, current)
            if replace:
                entry.notice, current = value, value
                entry.desired_annotations[names.INTERRUPTION_ANNOTATION] = record_of(value)
            taken = current is not None
            record = entry.desired_annotations.get(names.INTERRUPTION_ANNOTATION, "") if taken else ""
        if not record:  # already ending for another reason (our own terminate's state change, say)
            logger.info(
                "%s: %s of instance %s: the Pod already ends", entry.key, WORDS[notice.kind], notice.instance_id
            )
            self._ack(notice)
            return
        if len(self._pending) < MAX_HELD:
            self._pending[notice.id] = _Pending(notice, entry, record)
        logger.info(
            "%s: %s gave notice (%s) for instance %s", entry.key, self._name, notice.kind.value, notice.instance_id
        )
        self._queue(entry.key)

    def _hold(self, notice: Notice) -> None:
        held = self._unmatched.get(notice.id)
        if held is not None:
            self._unmatched[notice.id] = (notice, held[1])  # the newest receipt, the first sighting
        elif len(self._unmatched) < MAX_HELD:
            self._unmatched[notice.id] = (notice, self._context.monotonic())

    def settle(self) -> None:
        """Acknowledge each recorded notice whose record is now written on its Pod (or whose
        Pod is gone), and drop the unmatched ones held past `ADOPTION_WAIT` poll intervals."""
        tracked = self._context.tracked
        for key, pending in list(self._pending.items()):
            entry = pending.entry
            written = entry.written_annotations.get(names.INTERRUPTION_ANNOTATION) == pending.record
            if written or tracked.get(entry.key) is not entry:
                if self._ack(pending.notice):
                    del self._pending[key]
        limit = ADOPTION_WAIT * self._context.poll_interval()
        now = self._context.monotonic()
        for key, (notice, seen) in list(self._unmatched.items()):
            if now - seen >= limit:
                logger.info(
                    "%s: notice %s (%s) is about instance %s, which no Pod on this node runs: dropped",
                    self._name,
                    notice.id,
                    notice.kind.value,
                    notice.instance_id,
                )
                if self._ack(notice):
                    del self._unmatched[key]

    def _ack(self, notice: Notice) -> bool:
        try:
            self._source.ack(notice)
        except errors.ProviderError as exc:
            logger.info("%s: acknowledging notice %s failed; it comes again: %s", self._name, notice.id, exc)
            return False
        self._handled[notice.id] = None
        while len(self._handled) > MAX_HELD:
            self._handled.popitem(last=False)
        return True
