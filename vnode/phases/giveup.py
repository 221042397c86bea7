"""Giving an instance up: a spot reclaim (`Preempted`) and an instance queued past its pool's timeout (`QueuedTooLong`).

Both fail the Pod whatever its restartPolicy, and block the candidate through the
Blocklister, so placement's replacement (it deletes a controller-owned Failed Pod with one
of these reasons, `placement.request.is_replaceable_failure`) goes elsewhere:

- `assess.preempted` (pure, in the model; called by `assess.observe` on the poll thread, under the entry's lock)
  turns a TERMINATED instance the provider reports `preempted` into `Failed/Preempted`, its
  container terminated as the kubelet reports one it killed (137, `Error`), with a Warning
  `Preempted` Event. The capacity is gone: placement's replacement is the restart. The block
  of the offering it ran on is left on the entry (`Tracked.preemption`) and reported once by
  `GiveUp.settle`, as an interruption (`GiveUp.interrupted`: the pool's interruption TTL, the
  `Reclaimed` kind counted). A notice ahead (`vnode.phases.notices`) blocks the same way.
- `GiveUp.settle` (called first by `Lifecycle.carry_out`, on the pod controller's workers)
  reports that block, and gives up an instance still PROVISIONING (the provider has not
  confirmed capacity: Modal queues sandboxes when it has none) `provisioning_timeout_of(pool)`
  seconds after it was provisioned: after `get` confirms it is still queued (I3: a provider
  we could not ask changes nothing), the offering is blocked, the Pod fails `QueuedTooLong`,
  and a RELEASE step is due at once, so the instance is terminated through the teardown path
  (`Teardown.release`; a failing terminate is retried, never lost: I10). Until the deadline it
  returns the seconds left, so the pod controller looks again then even if nothing changes;
  the poll tick (`vnode.phases.statussync`) also queues the Pod once `deadline` has passed.

The QueuedTooLong block's breadth is the provider's own for a capacity refusal
(`classify_provision_error(NoCapacity)`, its reason replaced): an instance that waits for
capacity past the timeout is a "no capacity" said slowly, so it blocks exactly what a refused
provision of the same workload would. The clock is the entry's `provisioned_at` (monotonic:
a manager restart starts it again at adoption, so it never gives up early).
Tests: tests/vnode/test_preempted.py, tests/vnode/test_queued_too_long.py.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from kube import names, observe
from kube.worker import Retry
from providers import errors
from providers.base import BlockBreadth, BlockScope, Instance, InstanceState, Tier
from providers.podspec import pod_spec_from_dict, requested_tier
from vnode.model import status
from vnode.model.runs import Due, Step
from vnode.model.tracking import Tracked
from vnode.phases.context import PhaseContext

logger = logging.getLogger(__name__)
RECLAIMED = "Reclaimed"  # the metric's kind of an interruption seen only after the fact (`Instance.preempted`)


def pool_of(pod: Mapping[str, Any]) -> str | None:
    """The Pod's `nebula.io/pool` label (None: placed from no pool)."""
    return ((pod.get("metadata") or {}).get("labels") or {}).get(names.POOL_LABEL) or None


class GiveUp:
    """One per Handler: reports preemptions' blocks and gives up instances queued too long."""

    def __init__(self, context: PhaseContext) -> None:
        self._provider = context.provider
        self._blocklister = context.blocklister
        self._pools = context.pools
        self._monotonic = context.monotonic
        self._now = context.now

    def settle(self, entry: Tracked) -> float | None:
        """Report a preemption's block (once); give up an instance queued past its deadline.
        Returns the seconds until that deadline while it is still ahead, else None. Raises
        Retry when the provider could not be asked whether the instance is still queued."""
        self._report_preemption(entry)
        deadline = self.deadline(entry)
        if deadline is None:
            return None
        wait = deadline - self._monotonic()
        if wait > 0:
            return wait
        self._queued_too_long(entry)
        return None

    def deadline(self, entry: Tracked) -> float | None:
        """The monotonic time the entry's instance is given up if still PROVISIONING then;
        None when it is not queued, or its pool sets no limit."""
        instance = entry.last_instance
        if self._pools is None or instance is None or instance.id != entry.instance_id:
            return None
        if instance.state is not InstanceState.PROVISIONING or entry.terminal or entry.runs.finished:
            return None
        if entry.terminate_asked:
            return None
        timeout = self._pools.provisioning_timeout_of(pool_of(entry.pod))
        return None if timeout is None else entry.provisioned_at + timeout

    def _report_preemption(self, entry: Tracked) -> None:
        with entry.lock:
            reason, entry.preemption = entry.preemption, ""
            instance = entry.last_instance
        if not reason:
            return
        self.interrupted(entry, instance, kind=RECLAIMED, reason=reason)

    def interrupted(self, entry: Tracked, instance: Instance | None, *, kind: str, reason: str) -> None:
        """The provider takes (or took) `entry`'s instance back: count it (`kind`, a notice's or
        RECLAIMED) and block the candidate it ran on (its offering: accelerator, tier, region)
        for its pool's `interruption.blocklistTTL`, so the replacement goes elsewhere."""
        scope = self._candidate_scope(entry, instance, reason)
        tier = scope.tier.value if scope.tier is not None else ""
        observe.current().interrupted(
            self._provider.name, tier, kind, observe.Subject(entry.key, entry.claim, entry.instance_id or "")
        )
        if self._blocklister is None:
            return
        self._blocklister.record(self._provider.name, scope, pool=pool_of(entry.pod), interrupted=True)
        logger.info("%s: blocked %s of %s: %s", entry.key, _described(scope), self._provider.name, reason)

    def _queued_too_long(self, entry: Tracked) -> None:
        instance_id = entry.instance_id
        assert instance_id is not None
        try:
            current = self._provider.get(instance_id)
        except errors.Unavailable as exc:
            raise Retry(
                f"cannot tell whether instance {instance_id} is still queued: {exc}", delay=exc.retry_after
            ) from exc
        except errors.ProviderError as exc:
            raise Retry(f"cannot tell whether instance {instance_id} is still queued: {exc}") from exc
        with entry.lock:  # never between a poll's look at the facts and its use of them
            timeout = self._pools.provisioning_timeout_of(pool_of(entry.pod)) if self._pools is not None else None
            if self.deadline(entry) is None or timeout is None:
                return  # a poll got there first (it started, or went)
            if current is None or current.state is not InstanceState.PROVISIONING:
                entry.last_instance = None  # it found capacity, or went: the next list's facts tell
                return
            pool = pool_of(entry.pod)
            of_pool = f" of pool {pool}" if pool else ""
            message = (
                f"instance {instance_id} was still provisioning after {timeout:g}s, the provisioning timeout"
                f"{of_pool}: {self._provider.name} has not confirmed capacity, so it is given up"
            )
            scope = self._offering_scope(entry, current, message)
            if self._blocklister is not None:
                self._blocklister.record(self._provider.name, scope, pool=pool)
            entry.runs.finished, entry.runs.due = True, Due(Step.RELEASE, self._monotonic())  # terminate it now
            for runs in entry.containers.values():
                runs.stop()
            entry.desired_status = status.failed_status(
                entry.pod, reason=names.REASON_QUEUED_TOO_LONG, message=message, now=self._now()
            )
            entry.say("Warning", names.EVENT_QUEUED_TOO_LONG, message)
        logger.info("%s: %s", entry.key, message)

    def _offering_scope(self, entry: Tracked, instance: Instance, message: str) -> BlockScope:
        """What a capacity refusal of this workload would block (see the module), naming why."""
        accelerator, tier, region = _candidate(entry.pod, instance)
        refusal = errors.NoCapacity(message)
        scope = self._provider.classify_provision_error(refusal, accelerator=accelerator, tier=tier, region=region)
        return dataclasses.replace(scope, reason=f"{names.REASON_QUEUED_TOO_LONG}: {message}")

    def _candidate_scope(self, entry: Tracked, instance: Instance | None, reason: str) -> BlockScope:
        accelerator, tier, region = _candidate(entry.pod, instance)
        return BlockScope(
            self._provider.name, BlockBreadth.OFFERING, tier=tier, accelerator=accelerator, region=region, reason=reason
        )


def _candidate(pod: Mapping[str, Any], instance: Instance | None) -> tuple[str | None, Tier | None, str | None]:
    """The accelerator, tier and region the Pod's instance ran on (the instance's facts first,
    then what placement wrote on the Pod)."""
    try:
        accelerator = pod_spec_from_dict(pod).accelerator
    except ValueError:  # it was provisioned, so the provider read it; never in practice
        accelerator = None
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    tier = (instance.capacity_type if instance is not None else None) or requested_tier(pod)
    region = (instance.region if instance is not None else None) or annotations.get(names.REGION_ANNOTATION) or None
    return accelerator, tier, region


def _described(scope: BlockScope) -> str:
    parts = [
        scope.accelerator or "cpu",
        scope.tier.value if scope.tier is not None else "any tier",
        scope.region or "any region",
    ]
    return "offering " + "/".join(parts)
