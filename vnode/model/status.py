"""Instance facts -> Pod status: the one pure mapping every provider's Pods go through.

Called through `assess.observe` (provisioning, adoption, the poll tick), by
`vnode.phases.provision` for refusals and by `vnode.phases.giveup` for a given-up instance. Takes the
Pod as the API returned it (for its containers and the times already stamped) and never
does I/O. An instance that reports per-container facts goes through
`vnode.model.containerstatus` instead, which shares the helpers below.
Tested in tests/vnode/test_status.py.
"""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kube import names
from kube.times import rfc3339
from providers.base import Instance, InstanceState
from vnode.model import imageref, qos, shared

JsonDict = dict[str, Any]


@dataclass(frozen=True)
class RunView:
    """The container's history as `vnode.model.runs` keeps it: `restarts` (restartCount), `last`
    (lastState.terminated), and for a run that ended and will run again (`again`), the
    `waiting` message of its back-off (None: it restarts at once)."""

    restarts: int = 0
    last: Mapping[str, Any] | None = None
    again: bool = False
    waiting: str | None = None


NO_HISTORY = RunView()


@dataclass(frozen=True)
class Verdicts:
    """The prober's verdicts (`Tracked.probe_verdicts`), container -> passed, and the run of
    the container each was made for (`runs`: the instance id and the run's number in it).
    A container without the probe needs no verdict; one with it counts as failing until told."""

    ready: Mapping[str, bool] = field(default_factory=dict)
    started: Mapping[str, bool] = field(default_factory=dict)
    runs: Mapping[str, tuple[str, int] | None] = field(default_factory=dict)

    def for_runs(self, current: Callable[[str], tuple[str, int] | None]) -> Verdicts:
        """Only the verdicts made for each container's `current` run: a restarted container
        or a replaced instance has none until it is probed (a kubelet's new container starts
        not ready, and not started behind a startup probe)."""
        stale = {name for name in (*self.ready, *self.started) if self.runs.get(name) != current(name)}
        if not stale:
            return self  # every verdict is for the run the facts show (the poll tick's usual case)
        return Verdicts(
            ready={name: ok for name, ok in self.ready.items() if name not in stale},
            started={name: ok for name, ok in self.started.items() if name not in stale},
            runs={name: run for name, run in self.runs.items() if name not in stale},
        )

    def started_ok(self, container: Mapping[str, Any], *, running: bool) -> bool:
        """The kubelet's `started`: running, and its startupProbe (if any) has passed."""
        if not running:
            return False
        return not container.get("startupProbe") or self.started.get(str(container.get("name", "")), False)

    def ready_ok(self, container: Mapping[str, Any], *, running: bool) -> bool:
        """The kubelet's `ready`: started, and its readinessProbe (if any) passes."""
        if not self.started_ok(container, running=running):
            return False
        return not container.get("readinessProbe") or self.ready.get(str(container.get("name", "")), False)


NO_VERDICTS = Verdicts()


def stamp(moment: datetime) -> str:
    """`rfc3339(moment)`, one string for each second shown: the statuses of many Pods hold the
    same stamps (the conditions of one status, Pods started together), so they share it."""
    return sys.intern(rfc3339(moment))


def _phase_reason_message(instance: Instance) -> tuple[str, str, str]:
    state = instance.state
    if state is InstanceState.PROVISIONING:
        return "Pending", names.REASON_PROVISIONING, "allocating external instance"
    if state is InstanceState.INITIALIZING:
        return "Pending", names.REASON_INITIALIZING, "external instance is initializing"
    if state is InstanceState.RUNNING:
        return "Running", names.REASON_RUNNING, "external instance is running"
    if state is InstanceState.TERMINATING:
        return "Running", names.REASON_TERMINATING, "external instance is terminating"
    if state is InstanceState.SUCCEEDED:
        return "Succeeded", names.REASON_COMPLETED, "workload exited with code 0"
    if state is InstanceState.FAILED:
        detail = f"workload exited with code {instance.exit_code}" if instance.exit_code is not None else ""
        return "Failed", names.REASON_FAILED, instance.message or detail or "external instance failed"
    return "Failed", names.REASON_TERMINATED, instance.message or "external instance is gone"


def _container_state(instance: Instance, reason: str) -> tuple[JsonDict, bool]:
    """(state, ready) of every container of the Pod: one instance runs them all."""
    state = instance.state
    if state in (InstanceState.RUNNING, InstanceState.TERMINATING):
        started = instance.started_at or instance.created_at
        return shared.running(stamp(started)), state is InstanceState.RUNNING
    if state in (InstanceState.PROVISIONING, InstanceState.INITIALIZING):
        return {"waiting": {"reason": reason}}, False
    exit_code = instance.exit_code
    if exit_code is None:
        exit_code = 0 if state is InstanceState.SUCCEEDED else 137
    word = instance.exit_reason or ("Completed" if exit_code == 0 else "Error")
    terminated: JsonDict = {
        "exitCode": exit_code,
        "reason": word if state in (InstanceState.SUCCEEDED, InstanceState.FAILED) else reason,
    }
    if instance.started_at:
        terminated["startedAt"] = stamp(instance.started_at)
    terminated["finishedAt"] = stamp(instance.finished_at or instance.started_at or instance.created_at)
    return {"terminated": terminated}, False


def old_conditions(pod: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return {str(c.get("type")): c for c in conditions if isinstance(c, Mapping)}


def condition(
    old: Mapping[str, Mapping[str, Any]], kind: str, status: str, now: datetime, reason: str = "", message: str = ""
) -> JsonDict:
    """A condition whose lastTransitionTime moves only when its status changes; `reason` and
    `message` are kept only while it is not True."""
    previous = old.get(kind)
    if previous is None or previous.get("status") != status:
        moved_at = stamp(now)
    else:
        moved_at = previous.get("lastTransitionTime") or stamp(now)
    if status == "True":
        reason = message = ""
    if isinstance(moved_at, str):  # equal conditions of many Pods: one frozen dict (bench/poll.py: RSS)
        return shared.condition(kind, status, moved_at, reason, message)
    return shared.condition_dict(kind, status, moved_at, reason, message)


def _compose(
    pod: Mapping[str, Any],
    *,
    phase: str,
    reason: str,
    message: str,
    state: JsonDict,
    ready: bool,
    instance_id: str,
    now: datetime,
    run: RunView = NO_HISTORY,
    verdicts: Verdicts = NO_VERDICTS,
) -> JsonDict:
    """The status shape shared by every mapping: conditions, one status per container (each
    ready only if its probes say so), and the details every status carries (`pod_details`).
    `instance_id`: the instance whose containers these are ("" for none: a container keeps
    the containerID it had, as a kubelet's keeps its last container's)."""
    old = old_conditions(pod)
    containers = (pod.get("spec") or {}).get("containers") or []
    ready = ready and all(verdicts.ready_ok(c, running=True) for c in containers)
    ready_word = "True" if ready else "False"
    not_ready = "" if ready else ("PodCompleted" if phase in ("Succeeded", "Failed") else "ContainersNotReady")
    container_statuses = []
    for container in containers:
        name = str(container.get("name", ""))
        entry: JsonDict = {
            "name": name,
            "image": container.get("image", ""),
            "imageID": "",
            "ready": ready,
            "started": verdicts.started_ok(container, running="running" in state),
            "restartCount": run.restarts,
            "state": state,
        }
        if run.last:
            entry["lastState"] = {"terminated": dict(run.last)}
        identify(entry, pod, instance_id)
        if "containerID" in state.get("terminated", {}):  # each container its own, as in its status
            entry["state"] = {"terminated": {**state["terminated"], "containerID": entry.get("containerID", "")}}
        container_statuses.append(entry)
    status: JsonDict = {
        "phase": phase,
        "reason": reason,
        "message": message,
        "conditions": shared.conditions(
            [
                condition(old, "PodScheduled", "True", now),
                condition(old, "Initialized", "True", now),
                condition(old, "ContainersReady", ready_word, now, not_ready),
                condition(old, "Ready", ready_word, now, not_ready),
            ]
        ),
        "containerStatuses": container_statuses,
    }
    pod_details(status, pod)
    return status


def pod_details(status: JsonDict, pod: Mapping[str, Any]) -> None:
    """What every status carries over from the Pod's own (`startTime`, `hostIP`/`hostIPs`,
    `podIP`/`podIPs`: a restart or an adoption never moves them; an instance's address
    replaces the Pod IP afterwards, `add_pod_ip`), and `qosClass`: the API server's, else the
    one it would set (`vnode.model.qos`)."""
    old: Mapping[str, Any] = pod.get("status") or {}
    for key in ("startTime", "hostIP", "hostIPs", "podIP", "podIPs"):
        if key in old:
            status[key] = old[key]
    status["qosClass"] = old.get("qosClass") or qos.qos_class(pod)


def identify(entry: JsonDict, pod: Mapping[str, Any], instance_id: str) -> None:
    """`containerID` and `imageID` of one container status (`vnode.model.imageref`): those of
    its container in `instance_id`; with no instance, those it had in the Pod's status."""
    name = entry["name"]
    if instance_id:
        imageref.identify(entry, instance_id)
        return
    status: Mapping[str, Any] = pod.get("status") or {}
    previous = [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]
    had = next((s for s in previous if isinstance(s, Mapping) and s.get("name") == name), None)
    if had is not None and had.get("containerID"):
        entry["containerID"] = had["containerID"]
        entry["imageID"] = had.get("imageID") or ""


def status_from_instance(
    pod: Mapping[str, Any],
    instance: Instance,
    *,
    now: datetime,
    run: RunView = NO_HISTORY,
    verdicts: Verdicts = NO_VERDICTS,
) -> JsonDict:
    """The full `status` for `pod`, given what the provider reports of its instance and the
    container's run history. A run that ended and will run again keeps the Pod Running, as
    the kubelet's phase rule does for `Always` and a failed `OnFailure` container: the
    container waits in `CrashLoopBackOff` during its back-off, else shows its exit."""
    phase, reason, message = _phase_reason_message(instance)
    state, ready = _container_state(instance, reason)
    if run.again and instance.state in (InstanceState.SUCCEEDED, InstanceState.FAILED):
        phase, reason, message = "Running", "", ""
        if run.waiting is not None:
            state = {"waiting": {"reason": names.REASON_CRASH_LOOP, "message": run.waiting}}
    status = _compose(
        pod,
        phase=phase,
        reason=reason,
        message=message,
        state=state,
        ready=ready,
        instance_id=instance.id,
        now=now,
        run=run,
        verdicts=verdicts,
    )
    if "startTime" not in status and phase != "Pending":
        status["startTime"] = stamp(instance.started_at or now)
    add_pod_ip(status, instance)
    return status


def add_pod_ip(status: JsonDict, instance: Instance) -> None:
    """`podIP`/`podIPs` from the instance's endpoint when it is an IP address (a hostname is not)."""
    if instance.endpoint and _is_ip(instance.endpoint):
        status["podIP"] = instance.endpoint
        status["podIPs"] = [{"ip": instance.endpoint}]


def lost_status(pod: Mapping[str, Any], *, now: datetime, message: str = "", run: RunView = NO_HISTORY) -> JsonDict:
    """`Failed/InstanceLost`: the provider confirms the Pod's instance is gone."""
    state = {"terminated": {"exitCode": 137, "reason": names.REASON_INSTANCE_LOST, "finishedAt": stamp(now)}}
    message = message or "the provider no longer lists this Pod's instance, and says it is gone"
    return _compose(
        pod,
        phase="Failed",
        reason=names.REASON_INSTANCE_LOST,
        message=message,
        state=state,
        ready=False,
        instance_id="",
        now=now,
        run=run,
    )


def replacing_status(pod: Mapping[str, Any], *, now: datetime, run: RunView) -> JsonDict:
    """Running, its container waiting for a new instance (a restart by replacement): in its
    back-off (`CrashLoopBackOff`) or being provisioned (`ContainerCreating`)."""
    if run.waiting is not None:
        state: JsonDict = {"waiting": {"reason": names.REASON_CRASH_LOOP, "message": run.waiting}}
    else:
        state = {"waiting": {"reason": "ContainerCreating"}}
    return _compose(
        pod, phase="Running", reason="", message="", state=state, ready=False, instance_id="", now=now, run=run
    )


def given_up_status(
    pod: Mapping[str, Any],
    *,
    reason: str,
    message: str,
    terminated: Mapping[str, Any],
    now: datetime,
    run: RunView = NO_HISTORY,
    instance_id: str = "",
) -> JsonDict:
    """`Failed/<reason>` for a Pod whose instance the provider took back (vnode.phases.giveup): its
    container `terminated` as the kubelet reports one it killed, the run history kept. The
    instance is `instance_id`, else the one `terminated`'s containerID names."""
    state = {"terminated": dict(terminated)}
    status = _compose(
        pod,
        phase="Failed",
        reason=reason,
        message=message,
        state=state,
        ready=False,
        instance_id=instance_id or imageref.instance_of(str(terminated.get("containerID") or "")),
        now=now,
        run=run,
    )
    if "startTime" not in status and terminated.get("startedAt"):
        status["startTime"] = terminated["startedAt"]
    return status


def failed_status(pod: Mapping[str, Any], *, reason: str, message: str, now: datetime) -> JsonDict:
    """A terminal status for a Pod that never got an instance (a refused provision)."""
    state = {"waiting": {"reason": reason, "message": message}}
    return _compose(
        pod, phase="Failed", reason=reason, message=message, state=state, ready=False, instance_id="", now=now
    )


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
