"""Teardown: terminating the instance of a deleted Pod, and sweeping orphans.

A Pod deleted gracefully has its containers stopped first (`vnode.phases.stopping`: preStop
hooks, SIGTERM, SIGKILL at the end of its `deletionGracePeriodSeconds`) and its final status
written, then its instance terminated; a Pod already gone from the API (a force delete) is
stopped with no grace. `Teardown.terminate` (one entry point: a Pod, or the `Tombstone` of a tracked one) is called by
the pod controller's workers, `Teardown.release` by the lifecycle phase, and `OrphanSweep.sweep`
by the status sync's poll tick. A stopped instance's billing span is closed and written before
the Pod object goes (vnode.model.billing). Calls only `provider.terminate` and `provider.get`; never
deletes a Pod object (the pod controller does, once the instance is gone) and never terminates
an instance a live Pod claims.

Tests: tests/vnode/test_teardown.py.

Invariant (I2): an instance no Pod claims (a Pod force-deleted while the manager was down)
is terminated after two successful lists in a row; see
tests/vnode/test_invariants.py::test_I2_instance_of_a_pod_force_deleted_while_the_manager_was_down_is_swept.
Invariant (I3): a provider we could not ask keeps the Pod object; see
tests/vnode/test_invariants.py::test_I3_provider_unreachable_across_a_restart_changes_nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kube import names, observe
from kube.times import rfc3339
from kube.worker import Retry
from providers import errors
from providers.base import ClaimName, Instance, InstanceId, InstanceState
from vnode.model import assess, billing, containerstatus
from vnode.model.stopping import Why, deletion_grace
from vnode.model.tracking import Lookup, Tracked, pod_key
from vnode.phases.context import PhaseContext
from vnode.phases.stopping import Stopping

logger = logging.getLogger(__name__)
RECHECK_FIRST = 0.5  # seconds before the first look at an instance asked to terminate
_GOING = frozenset({InstanceState.TERMINATING, InstanceState.TERMINATED})
# After a terminate, nothing of the instance runs any more: gone, terminated while still shown
# (the fake's retention, EC2's hour), or ended (a terminated VM whose exit the provider read).
STOPPED = frozenset({InstanceState.TERMINATED, InstanceState.SUCCEEDED, InstanceState.FAILED})


@dataclass(frozen=True)
class Tombstone:
    """What is left of a tracked Pod deleted from the API: its key, and the UID of the entry
    to terminate (a Pod that took the name since is another Pod, with its own entry)."""

    key: str
    uid: str | None = None


class Teardown:
    def __init__(self, context: PhaseContext, *, stopping: Stopping) -> None:
        self._provider = context.provider
        self._stopping = stopping
        self._writer = context.writer
        self._tracked = context.tracked
        self._inventory = context.inventory
        self._events = context.events
        self._ephemerals = context.ephemerals
        self._recheck_cap = context.poll_interval  # the looks back off up to the poll interval
        self._monotonic = context.monotonic
        self._now = context.now

    def terminate(self, target: Mapping[str, Any] | Tombstone, *, gone: bool = False) -> float | None:
        """Terminate the instance of a Pod: None once the instance is gone (or released) and
        the Pod dropped from tracking; else the seconds until the next look. Retry if we could
        not ask (I3: the Pod object stays until the provider answers).

        `target` is a Pod (one being deleted, or a deleted Pod's last state), tracked or not:
        an untracked one (cold map, or its object already gone) has its claim looked up and
        its instance adopted first. Or it is the `Tombstone` of a tracked Pod deleted from the
        API: only the entry of that UID is terminated, and its ephemeral containers end.
        `gone`: `target` is the last state of a Pod whose object is gone from the API: nothing is
        written to its name (a new Pod may have taken it), as for a Tombstone.

        Bounded calls: terminate is asked once (again only if a look shows it did not take),
        and the looks back off from RECHECK_FIRST doubling to the poll interval, so an
        instance that takes minutes to stop costs a few calls, not one per half second."""
        if isinstance(target, Tombstone):
            if self._ephemerals is not None:
                self._ephemerals.forget(target.key)  # the Pod's deletion ends its ephemeral containers
            return self._terminate_tracked(target.key, uid=target.uid, grace=0.0)
        key = pod_key(target)
        if key not in self._tracked:
            found, instance = self._inventory.lookup(target)
            if found is Lookup.UNKNOWN:
                raise Retry("provider unreachable: cannot tell whether the Pod has an instance")
            if instance is None or instance.state is InstanceState.TERMINATED:
                if not gone:
                    self.close_untracked(target, instance, deleted=True)
                return None  # nothing of it is left to stop
            entry = assess.adopt(self._tracked, dict(target), instance, at=self._monotonic(), now=self._now())
            entry.terminate_asked = instance.state is InstanceState.TERMINATING  # going already: look until gone
        return self._terminate_tracked(key, grace=deletion_grace(target), pod=None if gone else target)

    def _terminate_tracked(
        self, key: str, *, uid: str | None = None, grace: float, pod: Mapping[str, Any] | None = None
    ) -> float | None:
        """`terminate` of the tracked entry `key` (of UID `uid`, when given): its running
        containers stopped within `grace` first, and the final status written onto `pod` (the
        Pod being deleted; None when its object is gone already)."""
        entry = self._tracked.get(key)
        if entry is None or (uid is not None and entry.uid != uid):
            return None
        if entry.instance_id is None:
            self._tracked.forget(entry)
            return None
        if not entry.terminate_asked:
            self._stopping.begin(entry, Why.DELETED, grace)
            after = self._stopping.advance(entry)
            if after is not None:
                return after
        now = self._monotonic()
        if entry.terminate_asked and now < entry.look_after:
            return entry.look_after - now  # woken early (an Event, a status write): the look is not due
        try:
            instance = self._terminate_and_look(entry, key)
        except BaseException:
            if pod is not None:  # the containers' ends are told while the provider cannot be asked
                try:
                    self._writer.flush(entry, pod)
                except Retry as exc:
                    logger.info("%s: the final status waits for the API server: %s", key, exc)
            raise
        if pod is not None and (entry.desired_status or {}).get("phase") not in ("Succeeded", "Failed"):
            # No end was seen (an instance found already going after a restart, or one that
            # could only be terminated whole): the end a kubelet writes for containers it can
            # no longer find, from what the provider still says of them.
            self._end_unseen(entry, entry.desired_status or pod.get("status") or {}, instance)
        if instance is None or instance.state in STOPPED:
            # The containers' ends and the closed span in one write, then the Pod object goes.
            # A manager that dies before that write finds the instance stopped (or still going)
            # when it starts again, and writes the Pod's end as above.
            self._close_billing(entry, instance, pod)
            self._tracked.forget(entry)
            return None
        if pod is not None:
            self._writer.flush(entry, pod)  # the containers' ends, while the instance goes
        entry.recheck = min(max(entry.recheck * 2, RECHECK_FIRST), self._recheck_cap())
        entry.look_after = now + entry.recheck
        return entry.recheck

    def _terminate_and_look(self, entry: Tracked, key: str) -> Instance | None:
        """Ask the instance to terminate (once), then look at it: its state, None once gone.
        Retry when the provider could not be asked."""
        assert entry.instance_id is not None
        who = observe.Subject(key, entry.claim, entry.instance_id)
        try:
            if not entry.terminate_asked:
                self._provider.terminate(entry.instance_id)
                observe.current().terminated(self._provider.name, "ok", who)
                entry.terminate_asked = True
                if entry.stop is None or not entry.stop.told:  # else its Killing Events were told
                    self._events.pod(entry.pod, "Normal", names.EVENT_KILLING, f"Stopping container {entry.container}")
            instance = self._provider.get(entry.instance_id)
            if instance is not None and instance.state not in _GOING | STOPPED:
                self._provider.terminate(entry.instance_id)  # it did not take (or it came back)
        except errors.Unavailable as exc:
            observe.current().terminated(self._provider.name, "unavailable", who)
            raise Retry(f"provider unreachable: {exc}", delay=exc.retry_after) from exc
        except errors.ProviderError as exc:
            observe.current().terminated(self._provider.name, "error", who)
            raise Retry(f"{type(exc).__name__}: {exc}") from exc
        return instance

    def _close_billing(self, entry: Tracked, instance: Instance | None, pod: Mapping[str, Any] | None) -> None:
        """The instance stopped: its billing span closes (at the provider's end fact, else when
        it was last seen billing) and is written, with whatever else is due (the containers'
        ends), before the Pod object goes. Retry if not written. Written whether this close
        moved it or the poll thread's look did meanwhile: the entry is forgotten next, and with
        it anything unwritten (tests/vnode/test_teardown.py::
        test_a_span_the_poll_closed_meanwhile_is_written_before_the_pod_goes).
        A Pod whose object is gone already (`pod` None: a force delete) has nowhere to keep it."""
        with entry.lock:
            ended = instance if instance is not None and instance.state is InstanceState.TERMINATED else None
            billing.close(entry, ended)
        if pod is not None and self._writer.needs_flush(entry):
            self._writer.flush(entry, pod)

    def close_untracked(self, pod: Mapping[str, Any], instance: Instance | None, *, deleted: bool = False) -> None:
        """A Pod found with no instance left (after a restart; being deleted, or finished and
        taken up with nothing to track): a span still open on it closes at its end fact, else at
        the node's billing-seen-at (or its own start), and is written. A closed record writes nothing.
        `deleted`: the Pod is being deleted and its instance is gone or terminated, so its
        containers' ends are written as a kubelet writes those it can no longer find
        (`containerstatus.unlocated_status`; a status the API shows terminal stays)."""
        entry = self._tracked.track(dict(pod))
        try:
            if deleted:
                self._end_unseen(entry, pod.get("status") or {}, instance)
            self._close_billing(entry, instance, pod)
        finally:
            self._tracked.forget(entry)

    def _end_unseen(self, entry: Tracked, base: Mapping[str, Any], instance: Instance | None) -> None:
        """The entry's status becomes `base` ended as a kubelet ends containers it can no longer
        find (`containerstatus.unlocated_status`), from what `instance` still says of them."""
        with entry.lock:
            entry.desired_status = containerstatus.unlocated_status(entry.pod, base, instance, now=rfc3339(self._now()))

    def release(self, entry: Tracked) -> None:
        """The Pod finished and its instance still bills: terminate it once. The Pod stays
        tracked (its logs are served where the provider keeps them)."""
        assert entry.instance_id is not None
        who = observe.Subject(entry.key, entry.claim, entry.instance_id)
        try:
            self._provider.terminate(entry.instance_id)
        except errors.Unavailable as exc:
            raise Retry(f"provider unreachable: {exc}", delay=exc.retry_after) from exc
        except errors.ProviderError as exc:
            raise Retry(f"{type(exc).__name__}: {exc}") from exc
        observe.current().terminated(self._provider.name, "released", who)
        with entry.lock:
            billing.close(entry, None)  # at the time it was last seen billing; the flush writes it
        entry.runs.release_done()
        entry.terminate_asked = True
        logger.info("%s finished: terminated its instance %s so it stops billing", entry.key, entry.instance_id)
        self._events.pod(
            entry.pod,
            "Normal",
            names.EVENT_TERMINATED,
            f"terminated instance {entry.instance_id}: the Pod has finished",
        )


class OrphanSweep:
    """Terminates instances whose claim matched no live Pod on two successful lists in a
    row, each once: one already going (TERMINATING/TERMINATED), or one this sweep already
    terminated and the provider still shows, is not asked again."""

    def __init__(self, context: PhaseContext) -> None:
        self._provider = context.provider
        self._events = context.events
        self._suspects: set[InstanceId] = set()
        self._terminated: set[InstanceId] = set()
        self.swept = 0  # instances terminated by this sweep (also counted in metrics)

    def sweep(self, snapshot: Mapping[ClaimName, Instance], live: set[ClaimName]) -> None:
        orphans = {i.id: i for claim, i in snapshot.items() if claim not in live}
        self._terminated &= set(orphans)  # forget ids the provider no longer shows
        suspects = {i for i, instance in orphans.items() if instance.state not in _GOING and i not in self._terminated}
        confirmed = suspects & self._suspects
        self._suspects = suspects - confirmed
        for instance_id in sorted(confirmed):
            try:
                self._provider.terminate(instance_id)
            except errors.ProviderError as exc:
                logger.warning("orphan %s on %s: terminate failed: %s", instance_id, self._provider.name, exc)
                self._suspects.add(instance_id)
                continue
            self._terminated.add(instance_id)
            self.swept += 1
            logger.info("terminated orphan instance %s on %s (no live Pod claims it)", instance_id, self._provider.name)
            observe.current().orphan_swept(self._provider.name, observe.Subject(instance=instance_id))
            node_name = names.node_name(self._provider.name)
            node = {"metadata": {"name": node_name, "uid": node_name}}
            self._events.node(
                node, "Normal", names.EVENT_ORPHAN_TERMINATED, f"terminated instance {instance_id}: no Pod claims it"
            )
