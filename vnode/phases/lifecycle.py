"""Carrying out a Pod's due step (vnode.model.runs): a restart in place, a replacement instance, or a release.

Called by the pod controller's workers (`carry_out`, `step_due`), when a tracked
Pod's `runs.due` time (or one of its containers') has come. A restart in place calls the
provider's `restart` (with the container, for an instance that reports container facts); a
provider that cannot (or an instance that is gone) gets the instance replaced: terminate,
look until it is gone, provision the same claim again, counted as a restart. A finished
Pod's instance that still bills is terminated once (`Teardown.release`), its final status
written first. A Pod past its `activeDeadlineSeconds` (counted from `status.startTime`) is
written `Failed/DeadlineExceeded` at once, its containers stopped within its grace
(`vnode.phases.stopping`), its final status written, and its instance terminated; a Pod annotated
`nebula.io/stop-reason: BudgetExceeded` is stopped the same way, `Failed/BudgetExceeded` with
`DisruptionTarget` (tests/vnode/test_budget_stop.py), and a Pod whose provider gave notice of
an interruption (`vnode.model.interruption`, recorded by `vnode.phases.notices`) within the
smaller of its grace and the notice's time, `DisruptionTarget` at once and `Failed` with the
notice's reason once its containers ended (tests/vnode/test_interruptions.py). Before any of it,
`vnode.phases.giveup` reports a preemption's block and gives up an instance queued too long (and
says when to look again for one still queued). Never deletes Pods.
Tests: tests/vnode/test_lifecycle.py.
"""

from __future__ import annotations

import logging
from typing import Any, cast

from kube import names
from kube.times import rfc3339
from kube.worker import Retry
from providers import errors
from providers.base import Instance, InstanceState, Restarter
from vnode.model import assess, billing
from vnode.model.interruption import Noted, grace_for, noted_on
from vnode.model.runs import Step
from vnode.model.stopping import (
    DEADLINE_MESSAGE,
    DEADLINE_REASON,
    Why,
    budget_status,
    deadline_of,
    deadline_status,
    disrupted_status,
    stop_asked,
    termination_grace,
    with_disruption_target,
)
from vnode.model.tracking import Tracked
from vnode.phases.context import PhaseContext
from vnode.phases.giveup import GiveUp
from vnode.phases.provision import Provisioner
from vnode.phases.stopping import Stopping
from vnode.phases.teardown import RECHECK_FIRST, STOPPED, Teardown

logger = logging.getLogger(__name__)
JsonDict = dict[str, Any]


class Lifecycle:
    def __init__(
        self,
        context: PhaseContext,
        *,
        provisioner: Provisioner,
        teardown: Teardown,
        stopping: Stopping,
        give_up: GiveUp | None = None,
    ) -> None:
        self._provider = context.provider
        self._stopping = stopping
        self._writer = context.writer
        self._tracked = context.tracked
        self._give_up = give_up
        self._provisioner = provisioner
        self._teardown = teardown
        self._rules = context.rules
        self._recheck_cap = context.poll_interval  # a replaced instance's looks back off up to it
        self._monotonic = context.monotonic
        self._now = context.now

    def step_due(self, key: str) -> bool:
        """Whether `carry_out` would call the provider now for the tracked Pod `key`: a
        restart, replacement or release is due, or a queued instance's deadline has passed."""
        entry = self._tracked.get(key)
        if entry is None:
            return False
        left = self.until_deadline(entry)
        if left is not None and left <= 0 or self.budget_stop(entry) is not None:
            return True
        if self.interruption(entry) is not None:
            return True
        now = self._monotonic()
        first = entry.next_due()
        if first is not None and first <= now:
            return True
        deadline = self._give_up.deadline(entry) if self._give_up is not None else None
        return deadline is not None and deadline <= now

    def carry_out(self, key: str, pod: JsonDict) -> float | None:
        """Do the due step of the tracked Pod `key` (of `pod`'s UID; else nothing) if its time
        has come. Returns seconds until the entry wants another look (its step not yet due, or
        an instance still going away), or None. Raises Retry when the provider could not be
        asked. First, a preemption's block is reported and an instance queued too long is given
        up (vnode.phases.giveup)."""
        entry = self._tracked.get(key)
        if entry is None or entry.uid != (pod.get("metadata") or {}).get("uid"):
            return None
        left = self.until_deadline(entry)
        if left is not None and left <= 0:
            return self._deadline_exceeded(entry, pod)
        message = self.budget_stop(entry)
        if message is not None:
            return self._budget_exceeded(entry, pod, message)
        notice = self.interruption(entry)
        if notice is not None:
            return self._interrupted(entry, pod, notice)
        after = self._due_step(entry, pod)
        if left is None:
            return after
        return left if after is None else min(after, left)

    def until_deadline(self, entry: Tracked) -> float | None:
        """Seconds until the Pod's `activeDeadlineSeconds` runs out (<= 0: it has); None when
        none applies (no deadline, not started, finished before it, or already carried out)."""
        stop = entry.stop
        if stop is not None and stop.why is not Why.DEADLINE or entry.runs.released:
            return None
        if stop is None and (entry.runs.finished or entry.terminal):
            return None
        started = (
            entry.pod
            if (entry.pod.get("status") or {}).get("startTime")
            else {**entry.pod, "status": entry.desired_status or {}}
        )
        at = deadline_of(started)
        return None if at is None else (at - self._now()).total_seconds()

    def budget_stop(self, entry: Tracked) -> str | None:
        """The message of a budget stop asked on the Pod (`nebula.io/stop-reason: BudgetExceeded`,
        written by placement's spend book) and not yet carried out; None when none applies (no
        such annotation, another reason, a Pod already terminal or stopping for another reason)."""
        stop = entry.stop
        if stop is not None:
            return stop.message if stop.why is Why.BUDGET and not entry.runs.released else None
        asked = stop_asked(entry.pod)
        if asked is None or entry.runs.finished or entry.terminal or entry.instance_id is None:
            return None
        reason, message = asked
        if reason != names.REASON_BUDGET_EXCEEDED:
            if entry.ignored_stop != reason:  # logged once per Pod and reason, kept with the entry
                entry.ignored_stop = reason
                logger.warning(
                    "%s: %s %r is not a stop Nebula knows; ignored", entry.key, names.STOP_REASON_ANNOTATION, reason
                )
            return None
        return message

    def interruption(self, entry: Tracked) -> Noted | None:
        """The provider's notice recorded for the Pod's current instance (by the notice intake,
        or on the Pod by an earlier manager) whose stop is not yet carried out; None when none
        applies (no notice, another instance's, a Pod finished or stopping for another reason)."""
        notice = entry.notice or noted_on(entry.pod)
        if notice is None or entry.instance_id is None or notice.instance != entry.instance_id:
            return None
        stop = entry.stop
        if stop is not None:
            return notice if stop.why is Why.INTERRUPTED and not entry.runs.released else None
        if entry.runs.finished or entry.terminal or entry.terminate_asked:
            return None
        return notice

    def _interrupted(self, entry: Tracked, pod: JsonDict, notice: Noted) -> float | None:
        """An interruption, through the one stop path: `DisruptionTarget` at once, a Warning
        Event, the offering blocked, the containers stopped within the smaller of the Pod's grace
        and the notice's time; then, as a kubelet shutting its node down, `Failed` with the
        notice's reason once they ended (so an owner replaces it only then: no two run at once),
        and the instance terminated (I10)."""
        message = notice.message()
        if entry.stop is None or entry.stop.message != message:
            grace = grace_for(termination_grace(entry.pod), notice, self._now())
            first = entry.stop is None  # else a sooner notice came while it stops: the end moves closer
            stop = self._stopping.begin(entry, Why.INTERRUPTED, grace, message=message, reason=notice.reason)
            with entry.lock:
                stop.message, stop.reason = message, notice.reason
            entry.say("Warning", notice.reason, message)
            if first and self._give_up is not None:  # one interruption of one instance: counted once
                self._give_up.interrupted(entry, entry.last_instance, kind=notice.kind.value, reason=message)
            self._flush(entry, pod)
        return self._finish_stop(entry, pod)

    def _budget_exceeded(self, entry: Tracked, pod: JsonDict, message: str) -> float | None:
        """A budget stop, through the one stop path: `Failed/BudgetExceeded` with the message and
        `DisruptionTarget` at once, a Warning Event, the containers stopped within the Pod's
        grace (preStop hooks run), the final status written, then the instance terminated (I10)."""
        if entry.stop is None:
            self._stopping.begin(entry, Why.BUDGET, termination_grace(entry.pod), message=message)
            entry.say("Warning", names.EVENT_BUDGET_EXCEEDED, message)
            self._flush(entry, pod)
        return self._finish_stop(entry, pod)

    def _deadline_exceeded(self, entry: Tracked, pod: JsonDict) -> float | None:
        """The kubelet's answer to a deadline: `Failed/DeadlineExceeded` at once, the containers
        stopped within the Pod's grace, the final status written, then the instance terminated."""
        if entry.stop is None:
            self._stopping.begin(entry, Why.DEADLINE, termination_grace(entry.pod))
            entry.say("Normal", DEADLINE_REASON, DEADLINE_MESSAGE)
            self._flush(entry, pod)  # Failed now, while the containers stop
        return self._finish_stop(entry, pod)

    def _finish_stop(self, entry: Tracked, pod: JsonDict) -> float | None:
        """Move a deadline's or a budget's stop on; once the containers ended, their final status
        is written, then the instance terminated."""
        after = self._stopping.advance(entry)
        if after is not None:
            return after
        entry.runs.finished = True
        self._flush(entry, pod)  # the containers' ends, before the instance goes
        if entry.instance_id is not None and not entry.terminate_asked:
            self._teardown.release(entry)
        else:
            entry.runs.release_done()
        return None

    def _flush(self, entry: Tracked, pod: JsonDict) -> None:
        with entry.lock:
            status = entry.desired_status or dict(entry.pod.get("status") or {})
            entry.desired_status = stopped_status(entry, status, now=rfc3339(self._now()))
        self._writer.flush(entry, pod)

    def _due_step(self, entry: Tracked, pod: JsonDict) -> float | None:
        """The restart, replacement or release due for `entry`, if its time has come."""
        queued = self._give_up.settle(entry) if self._give_up is not None else None
        first = entry.next_due()
        if first is None:
            return queued  # the seconds until a queued instance's deadline, or None
        wait = first - self._monotonic()
        if wait > 0:
            return wait if queued is None else min(wait, queued)
        due = entry.runs.due
        if due is None or due.at > first:
            return self._restart_containers(entry)
        if due.step is Step.RELEASE:
            self._writer.flush(entry, pod)  # the Pod reads Succeeded/Failed before its instance goes
            self._teardown.release(entry)
            return None
        if due.step is Step.RESTART:
            return self._restart_in_place(entry, pod)
        return self._replace(entry, pod)

    def _restart_in_place(self, entry: Tracked, pod: JsonDict) -> float | None:
        assert entry.instance_id is not None
        runs = entry.last_instance.runs if entry.last_instance is not None else entry.runs.awaiting_run or 1
        assert entry.runs.ended is not None
        of = (entry.runs.ended, entry.runs.ended_seen_at)
        try:
            cast(Restarter, self._provider).restart(entry.instance_id)
        except errors.NotFound:
            return self._replace(entry, pod)  # the instance went away meanwhile
        except errors.InvalidRequest as exc:
            # "Not ended": an earlier attempt whose answer was lost did restart it. The
            # provider's run count says so; then that restart is the one we count.
            current = self._current(entry)
            if current is None or current.runs <= runs:
                raise Retry(f"restart refused: {exc}") from exc
            runs = current.runs - 1
        except errors.Unavailable as exc:
            raise Retry(f"provider unreachable: {exc}", delay=exc.retry_after) from exc
        except errors.ProviderError as exc:
            raise Retry(f"restart failed: {type(exc).__name__}: {exc}") from exc
        with entry.lock:  # never between a poll's look at the facts and its use of them
            entry.runs.restarted(new_run=runs + 1, policy=self._rules().backoff, of=of)
            entry.last_instance = None  # the next list's facts are taken, even if unchanged
        logger.info(
            "%s: restarted its workload in instance %s (restart %d)", entry.key, entry.instance_id, entry.runs.restarts
        )
        return None

    def _restart_containers(self, entry: Tracked) -> float | None:
        """Run each container whose restart is due again in the instance; seconds until the
        next one is due, or None."""
        for name in entry.due_containers(self._monotonic()):
            self._restart_container(entry, name)
        after = entry.next_due()
        return None if after is None else max(after - self._monotonic(), 0.0)

    def _restart_container(self, entry: Tracked, name: str) -> None:
        assert entry.instance_id is not None
        runs = entry.container_runs(name)
        assert runs is not None
        facts = entry.container_facts(name)
        ran = facts.runs if facts is not None else runs.awaiting_run
        assert runs.ended is not None
        of = (runs.ended, runs.ended_seen_at)
        try:
            cast(Restarter, self._provider).restart(entry.instance_id, container=name)
        except errors.InvalidRequest as exc:
            # "Not ended": an earlier attempt whose answer was lost did restart it (as above).
            current = self._current(entry)
            now = next((c for c in current.containers if c.name == name), None) if current is not None else None
            if now is None or now.runs <= ran:
                raise Retry(f"restart of container {name} refused: {exc}") from exc
            ran = now.runs - 1
        except errors.Unavailable as exc:
            raise Retry(f"provider unreachable: {exc}", delay=exc.retry_after) from exc
        except errors.ProviderError as exc:  # NotFound too: the poll tells a gone instance
            raise Retry(f"restart of container {name} failed: {type(exc).__name__}: {exc}") from exc
        with entry.lock:
            runs.restarted(new_run=ran + 1, policy=self._rules().backoff, of=of)
            # A poll may have seen the new run end before this: its facts are taken again
            # (they would compare equal to the last ones and be skipped, the end lost).
            entry.last_instance = None
        logger.info(
            "%s: restarted container %s in instance %s (restart %d)", entry.key, name, entry.instance_id, runs.restarts
        )

    def _current(self, entry: Tracked) -> Instance | None:
        assert entry.instance_id is not None
        try:
            return self._provider.get(entry.instance_id)
        except errors.ProviderError as exc:
            raise Retry(f"cannot read instance {entry.instance_id}: {exc}") from exc

    def _replace(self, entry: Tracked, pod: JsonDict) -> float | None:
        """Terminate the old instance, wait until it is gone, then provision the claim again."""
        old = entry.instance_id
        if old is not None:
            try:
                if not entry.terminate_asked:
                    self._provider.terminate(old)
                    entry.terminate_asked = True
                instance = self._provider.get(old)
            except errors.Unavailable as exc:
                raise Retry(f"provider unreachable: {exc}", delay=exc.retry_after) from exc
            except errors.ProviderError as exc:
                raise Retry(f"replacing instance {old} failed: {type(exc).__name__}: {exc}") from exc
            if instance is not None and instance.state not in STOPPED:
                entry.recheck = min(max(entry.recheck * 2, RECHECK_FIRST), self._recheck_cap())
                return entry.recheck
            with entry.lock:  # its span ends before the replacement's opens
                ended = instance if instance is not None and instance.state is InstanceState.TERMINATED else None
                billing.close(entry, ended)
        entry.instance_id, entry.last_instance, entry.terminate_asked, entry.recheck = None, None, False, 0.0
        entry.misses, entry.missing_since = 0, None
        pending, entry.runs.due = entry.runs.due, None  # so the new instance's facts are taken
        try:
            self._provisioner.create_pod(pod)  # the same entry: same Pod UID, same claim
        except BaseException:
            entry.runs.due = pending
            raise
        if entry.terminal:
            return None  # refused this time: Failed, with the provider's reason
        cause = entry.runs.ended
        entry.runs.restarted(new_run=1, policy=self._rules().backoff)
        assess.replaced(entry, policy=self._rules().backoff, cause=cause)
        fresh, entry.last_instance = entry.last_instance, None
        if fresh is not None:  # its status again, now with the restart counted
            assess.observe(entry, fresh, now=self._now(), at=self._monotonic(), rules=self._rules())
        message = f"instance {old} replaced by {entry.instance_id} (restart {entry.runs.restarts})"
        if old is None:
            message = f"started instance {entry.instance_id} (restart {entry.runs.restarts})"
        entry.say("Normal", names.EVENT_RESTARTING, message)
        return None


def stopped_status(entry: Tracked, status: JsonDict, *, now: str) -> JsonDict:
    """`status` as the entry's stop makes it read: past its deadline, stopped for its pool's
    budget, or interrupted by its provider; unchanged for any other stop (or none)."""
    stop = entry.stop
    if stop is not None and stop.why is Why.DEADLINE:
        return deadline_status(status, now=now)
    if stop is not None and stop.why is Why.BUDGET:
        return budget_status(status, message=stop.message, now=now)
    if stop is not None and stop.why is Why.INTERRUPTED:
        if not entry.runs.finished:  # the containers still stop: not terminal yet, as a kubelet's
            return with_disruption_target(status, message=stop.message, now=now)
        return disrupted_status(status, reason=stop.reason, message=stop.message, now=now)
    return status
