"""The assessment of one tracked Pod: its instance's facts and probe verdicts turned into runs, Events, a status.

Functions that move a `vnode.model.tracking.Tracked` record, called by the phases (provisioning,
adoption, the poll tick, a replacement, the flush), under the entry's lock where threads meet;
the record holds the state, this module decides how it moves. Never does I/O, imports no phase.
Tests: tests/vnode/test_runs_containers.py,
tests/vnode/test_status.py::test_a_status_rebuilt_before_the_watch_returns_our_write_keeps_its_transition_times.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from kube import names
from kube.times import rfc3339
from providers.base import Instance, InstanceState
from providers.shape import ContainerState
from vnode.model import billing, containerstatus, status, stopping
from vnode.model.runs import (
    DEFAULT_RULES,
    ENDED,
    BackoffPolicy,
    Due,
    Ending,
    Rules,
    Runs,
    Step,
    ending_of,
    ending_of_container,
    replace_all,
    runs_again,
)
from vnode.model.tracking import Tracked, TrackedMap

JsonDict = dict[str, Any]


def observe(
    entry: Tracked, instance: Instance, *, now: datetime, at: float = 0.0, rules: Rules = DEFAULT_RULES
) -> bool:
    """Recompute the desired metadata and status from the instance's facts; False if
    the facts are unchanged (and a status was already computed). `at` is the monotonic
    time of the observation (for the back-off)."""
    if entry.instance_id is not None and instance.id != entry.instance_id:
        return False  # another instance of the claim (the one a restart replaced)
    billing.observe(entry, instance, now=now, rules=rules)  # a change is a desired annotation
    if entry.runs.finished:
        if not entry.runs.released and entry.runs.due is None and rules.billing(instance):
            entry.runs.due = Due(Step.RELEASE, at)  # it bills behind a finished Pod
        entry.last_instance = instance
        return False
    if entry.runs.stale(instance) or _stale_containers(entry, instance):
        return False
    if entry.runs.due is not None and entry.runs.due.step is Step.REPLACE:
        return False
    if (instance is entry.last_instance or instance == entry.last_instance) and entry.desired_status is not None:
        # Same facts: only a probe verdict that changed since the last status moves it.
        return entry.probe_verdicts is not entry.judged_by and reassess(entry, now=now, at=at, rules=rules)
    entry.last_instance = instance
    if instance.endpoint:
        entry.desired_annotations[names.ENDPOINT_ANNOTATION] = instance.endpoint
    entry.desired_annotations[names.INSTANCE_ID_ANNOTATION] = instance.id
    if _by_container(entry, instance):
        _observe_containers(entry, instance, now=now, at=at, rules=rules)
        _recompute_containers(entry, instance, now=now, at=at, rules=rules)
        return True
    _note_start(entry, instance)
    if instance.state in ENDED:
        entry.runs.end(
            ending_of(instance, now=now), seen_at=at, in_place=rules.in_place, bills=rules.bills, policy=rules.backoff
        )
    elif instance.state is InstanceState.TERMINATED:
        if instance.preempted and not _interrupted(entry):  # the capacity is gone: the Pod fails
            return preempted(entry, instance, now=now)
        ending = ending_of(instance, now=now, reason=names.REASON_TERMINATED)
        entry.runs.end(ending, seen_at=at, in_place=False, bills=False, policy=rules.backoff)
        if not entry.runs.finished:
            return _wait_for_replacement(entry, now, at)
    entry.desired_status = status.status_from_instance(
        _latest(entry), instance, now=now, run=_view(entry, at), verdicts=_judge(entry)
    )
    _note_backoff(entry, at)
    return True


def reassess(entry: Tracked, *, now: datetime, at: float, rules: Rules) -> bool:
    """Recompute the desired status from the last facts and the probes' current verdicts
    (the prober calls it when a verdict changes); True if the status changed. Called under
    the same one-operation-per-Pod rule as `observe`."""
    instance = entry.last_instance
    if instance is None or entry.terminal or entry.runs.finished or entry.desired_status is None:
        return False
    if entry.runs.stale(instance) or _stale_containers(entry, instance):
        return False  # facts from before a restart we asked for: they say nothing of the new run
    if _by_container(entry, instance):
        return _recompute_containers(entry, instance, now=now, at=at, rules=rules)
    if instance.state is InstanceState.TERMINATED or entry.runs.due is not None and entry.runs.due.step is Step.REPLACE:
        return False  # waiting for a replacement: no container to be ready
    run, verdicts = _view(entry, at), _judge(entry)
    desired = status.status_from_instance(_latest(entry), instance, now=now, run=run, verdicts=verdicts)
    changed, entry.desired_status = desired != entry.desired_status, desired
    return changed


def adopt(
    tracked: TrackedMap, pod: JsonDict, instance: Instance, *, at: float, now: datetime, rules: Rules = DEFAULT_RULES
) -> Tracked:
    """Track an instance found again (after a restart, or a cold map); no provider call."""
    entry = tracked.track(pod)
    entry.instance_id = instance.id
    entry.provisioned_at = entry.facts_read = at  # the lookup's list returned before `at`
    adopted(entry, instance)  # its start was told before the restart
    observe(entry, instance, now=now, at=at, rules=rules)
    return entry


def adopted(entry: Tracked, instance: Instance) -> None:
    """An instance found again: its runs, and each container's, were told before."""
    entry.runs.awaiting_run = instance.runs
    entry.runs.started_runs += (instance.runs,)
    for fact in instance.containers:
        runs = entry.container_runs(fact.name)
        if runs is not None:
            runs.awaiting_run = fact.runs
            runs.started_runs += (fact.runs,)


def replaced(entry: Tracked, *, policy: BackoffPolicy, cause: Ending | None) -> None:
    """A new instance replaced the old one (`cause`: the Pod's run that ended): every
    container that ran there has restarted (`runs.replace_all`), its run count afresh."""
    replace_all(entry.containers, cause, policy=policy)


def lose(entry: Tracked, *, now: datetime, at: float = 0.0, rules: Rules = DEFAULT_RULES, why: str = "") -> None:
    """The provider confirms the instance is gone (absent from lists past the list lag,
    and `get` says so): a crash with exit code 137 under the restart policy."""
    entry.last_instance = None
    billing.close(entry, None)  # at the time it was last seen billing
    gone = why or f"instance {entry.instance_id} is gone: the provider no longer lists it and get finds nothing"
    ending = Ending(137, names.REASON_INSTANCE_LOST, None, now, gone)
    if runs_again(entry.runs.policy, ending.exit_code):
        entry.say("Warning", names.EVENT_INSTANCE_LOST, f"{gone}; a new instance replaces it")
        entry.runs.end(ending, seen_at=at, in_place=False, bills=False, policy=rules.backoff)
        _wait_for_replacement(entry, now, at)
        return
    entry.say("Warning", names.EVENT_INSTANCE_LOST, gone)
    entry.runs.finished, entry.runs.ended = True, ending
    entry.desired_status = status.lost_status(_latest(entry), now=now, message=gone, run=_view(entry, at))


def preempted(entry: Tracked, instance: Instance, *, now: datetime) -> bool:
    """The provider took `instance` back: the Pod fails `Preempted` whatever its restartPolicy
    (see vnode.phases.giveup, which reports the Spot block left in `entry.preemption`). Returns True
    (the desired status changed)."""
    told = instance.message or "the provider took the capacity back"
    message = f"the provider reclaimed instance {instance.id}: {told}"
    entry.say("Warning", names.EVENT_PREEMPTED, message)
    ending = ending_of(instance, now=now)  # 137 and `Error` unless the provider said otherwise
    entry.runs.finished, entry.runs.ended, entry.runs.due = True, ending, None
    for runs in entry.containers.values():
        runs.stop()
    entry.preemption = f"{names.REASON_PREEMPTED}: {message}"
    given_up = status.given_up_status(
        entry.pod,
        reason=names.REASON_PREEMPTED,
        message=message,
        terminated=ending.terminated(container_id=f"nebula://{instance.id}"),
        now=now,
        run=status.RunView(restarts=entry.runs.restarts, last=entry.runs.last),
    )
    # As a kubelet marks a Pod it ends for its node's sake (a graceful node shutdown): a Job's
    # podFailurePolicy reads DisruptionTarget as a disruption, not the workload's failure.
    entry.desired_status = stopping.with_disruption_target(given_up, message=message, now=rfc3339(now))
    return True


def _interrupted(entry: Tracked) -> bool:
    """A notice ahead already stops the Pod: the capacity's going is no news (no second Event
    or block); its status stays the interruption's (`vnode.phases.lifecycle.stopped_status`)."""
    return entry.stop is not None and entry.stop.why is stopping.Why.INTERRUPTED


def _latest(entry: Tracked) -> Mapping[str, Any]:
    """The Pod with the status last decided for it: rebuilt before the watch brings our write
    back, a status keeps its transition times and startTime (not now's)."""
    return entry.pod if entry.desired_status is None else {**entry.pod, "status": entry.desired_status}


def _judge(entry: Tracked) -> status.Verdicts:
    """The verdicts a status is computed from; the prober's, as written, are remembered
    (`judged_by`: the prober replaces them whole, so a new one is a new object)."""
    entry.judged_by = entry.probe_verdicts
    return entry.verdicts()


# -- an instance that reports container facts: each container's own runs ----------------------
def _by_container(entry: Tracked, instance: Instance) -> bool:
    return instance.state is not InstanceState.TERMINATED and containerstatus.uses_container_facts(entry.pod, instance)


def _stale_containers(entry: Tracked, instance: Instance) -> bool:
    """Facts read before a container restart we asked for."""
    return any(c.name in entry.containers and entry.containers[c.name].stale_run(c.runs) for c in instance.containers)


def _observe_containers(entry: Tracked, instance: Instance, *, now: datetime, at: float, rules: Rules) -> None:
    """Each container's start and end under its own policy. App containers first: a
    sidecar that stops once every app container is done does not run again."""
    facts = {c.name: c for c in instance.containers}
    apps_done = True
    names_in_order = [str(c.get("name")) for c in containerstatus.app_containers(entry.pod)]
    apps = len(names_in_order)
    names_in_order += [str(c.get("name")) for c in containerstatus.init_containers(entry.pod)]
    for index, name in enumerate(names_in_order):
        runs, fact = entry.container_runs(name), facts.get(name)
        if runs is None or fact is None:
            apps_done = apps_done and index >= apps
            continue
        if fact.state is not ContainerState.WAITING and fact.runs > 0 and fact.runs not in runs.started_runs:
            # A short run may have ended between two lists: it started all the same.
            runs.started_runs += (fact.runs,)
            entry.say("Normal", names.EVENT_STARTED, f"Started container {name}")
        if fact.state is ContainerState.TERMINATED:
            if index >= apps and apps_done and runs.policy == "Always":
                runs.stop()  # a sidecar stopped after the app containers finished
            else:
                _end_container(entry, runs, ending_of_container(fact, now=now), at=at, rules=rules)
        if index < apps:
            apps_done = apps_done and fact.state is ContainerState.TERMINATED and runs.finished


def _end_container(entry: Tracked, runs: Runs, ending: Ending, *, at: float, rules: Rules) -> None:
    runs.end(ending, seen_at=at, in_place=True, bills=False, policy=rules.backoff)
    if not rules.in_place and runs.due is not None:
        # No restart in place: the whole instance is replaced (vnode.phases.lifecycle), when this
        # container's own policy and back-off say so (the Pod's policy may not: a sidecar).
        entry.runs.ended, entry.runs.ended_seen_at = ending, at
        entry.runs.due, runs.due = Due(Step.REPLACE, runs.due.at), None


def _recompute_containers(entry: Tracked, instance: Instance, *, now: datetime, at: float, rules: Rules) -> bool:
    """The status from the container facts; a terminal phase finishes the Pod."""
    views = {name: _view(entry, at, runs, name) for name, runs in entry.containers.items()}
    desired = containerstatus.status_from_containers(
        _latest(entry), instance, now=now, views=views, verdicts=_judge(entry)
    )
    changed, entry.desired_status = desired != entry.desired_status, desired
    if desired["phase"] in ("Succeeded", "Failed"):
        entry.runs.finished = True
        for runs in entry.containers.values():
            runs.stop()
        if rules.billing(instance):
            entry.runs.due = Due(Step.RELEASE, at)
    for name, view in views.items():
        runs = entry.containers[name]
        if view.waiting is not None and not runs.backoff_told:
            runs.backoff_told = True
            entry.say(
                "Warning", names.EVENT_BACKOFF, f"Back-off restarting failed container {name} in pod {entry.pod_ref}"
            )
    return changed


# -- the Pod's own runs ---------------------------------------------------------------------
def _wait_for_replacement(entry: Tracked, now: datetime, at: float) -> bool:
    entry.desired_status = status.replacing_status(_latest(entry), now=now, run=_view(entry, at))
    _note_backoff(entry, at)
    return True


def _view(entry: Tracked, at: float, runs: Runs | None = None, container: str = "") -> status.RunView:
    runs = runs or entry.runs
    again = runs.ended is not None and not runs.finished
    waiting = runs.waiting_message(container or entry.container, entry.pod_ref, at)
    last = runs.ended.terminated() if again and waiting is not None and runs.ended else runs.last
    return status.RunView(restarts=runs.restarts, last=last, again=again, waiting=waiting)


def _note_start(entry: Tracked, instance: Instance) -> None:
    if instance.state is InstanceState.RUNNING and instance.runs not in entry.runs.started_runs:
        entry.runs.started_runs += (instance.runs,)
        entry.say("Normal", names.EVENT_STARTED, f"Started container {entry.container}")


def _note_backoff(entry: Tracked, at: float) -> None:
    if _view(entry, at).waiting is not None:
        message = f"Back-off restarting failed container {entry.container} in pod {entry.pod_ref}"
        entry.say("Warning", names.EVENT_BACKOFF, message)
