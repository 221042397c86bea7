"""Per-container facts -> Pod status: each init and app container's own state, and the Pod's
phase and conditions derived from them as the kubelet derives them (`getPhase`, and the
conditions of `pkg/kubelet/status/generate.go`).

Called by `assess.observe` and `assess.reassess` (vnode.model.assess) in place of
`status.status_from_instance` when the provider reports `Instance.containers` (or while a Pod
with init containers waits for its instance, so `Initialized` never says True too early).
Pure; never does I/O. Tests: tests/vnode/test_status_containers.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from kube import names
from providers.base import ClaimName, Instance, InstanceId, InstanceState
from providers.shape import ContainerFacts, ContainerState
from vnode.model import imageref, shared, status, stopping
from vnode.model.runs import GONE_EXIT_CODE
from vnode.model.status import NO_HISTORY, RunView, Verdicts

JsonDict = dict[str, Any]
POD_INITIALIZING = "PodInitializing"
CONTAINER_CREATING = "ContainerCreating"
NOT_INITIALIZED = "ContainersNotInitialized"
NOT_READY = "ContainersNotReady"


def uses_container_facts(pod: Mapping[str, Any], instance: Instance) -> bool:
    """Is `instance` mapped container by container? Yes when it reports container facts, and
    while a Pod with init containers waits for its first facts."""
    if instance.containers:
        return True
    waiting = instance.state in (InstanceState.PROVISIONING, InstanceState.INITIALIZING)
    return waiting and bool(init_containers(pod))


def init_containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((pod.get("spec") or {}).get("initContainers") or [])


def app_containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((pod.get("spec") or {}).get("containers") or [])


def is_sidecar(container: Mapping[str, Any]) -> bool:
    """A native sidecar: an init container with `restartPolicy: Always`."""
    return container.get("restartPolicy") == "Always"


def default_waiting_reason(pod: Mapping[str, Any]) -> str:
    """The kubelet's reason for a container not started yet: `PodInitializing` in a Pod with
    init containers, else `ContainerCreating`."""
    return POD_INITIALIZING if init_containers(pod) else CONTAINER_CREATING


def before_start_status(pod: Mapping[str, Any], *, now: datetime) -> JsonDict:
    """The status of a Pod none of whose containers can start yet (its volumes wait for a
    ConfigMap or Secret): Pending, every container waiting (`PodInitializing` behind init
    containers, else `ContainerCreating`), as a kubelet writes it before it mounts, so kubectl
    shows `Init:0/1` or `ContainerCreating` rather than a bare `Pending`."""
    nothing = Instance(InstanceId(""), ClaimName(""), InstanceState.PROVISIONING, now)
    return status_from_containers(pod, nothing, now=now, views={}, verdicts=status.NO_VERDICTS)


def config_error_status(pod: Mapping[str, Any], failed: Mapping[str, str], *, now: datetime) -> JsonDict:
    """The status of a Pod whose containers' environment cannot be resolved (`failed`: container
    name -> the kubelet's message, `secret "x" not found`), as a kubelet writes it: Pending,
    started (`startTime`), each such container waiting `CreateContainerConfigError` with its
    message. A kubelet starts init containers one by one and the app containers after them, so
    the first failing init container is the one that waits so, the others as before they start;
    with no init container failing, every failing app container does. The rest wait as for
    `before_start_status` (the instance runs them all: none of them starts either)."""
    result = before_start_status(pod, now=now)
    inits = {str(c.get("name")) for c in init_containers(pod)}
    blocking = next((name for name in failed if name in inits), None)
    chosen = {blocking} if blocking is not None else set(failed) - inits
    for entry in [*result.get("initContainerStatuses", ()), *result["containerStatuses"]]:
        if entry["name"] in chosen:
            message = failed[entry["name"]]
            entry["state"] = {"waiting": {"reason": names.REASON_CREATE_CONTAINER_CONFIG_ERROR, "message": message}}
    result.setdefault("startTime", status.stamp(now))  # a kubelet stamps it when it first syncs the Pod
    return result


def status_from_containers(
    pod: Mapping[str, Any],
    instance: Instance,
    *,
    now: datetime,
    views: Mapping[str, RunView],
    verdicts: Verdicts,
) -> JsonDict:
    """The full `status` for `pod` from its instance's container facts, each container's run
    history (`views`, by name: restartCount, lastState, its back-off) and the probes' verdicts."""
    facts = {c.name: c for c in instance.containers}
    waiting = default_waiting_reason(pod)
    inits = [
        _container_status(c, facts.get(str(c.get("name"))), views, instance, verdicts, waiting=waiting, init=True)
        for c in init_containers(pod)
    ]
    apps = [
        _container_status(c, facts.get(str(c.get("name"))), views, instance, verdicts, waiting=waiting, init=False)
        for c in app_containers(pod)
    ]
    terminal = bool(apps) and all(
        "terminated" in s["state"] and not views.get(s["name"], NO_HISTORY).again for s in apps
    )
    phase = pod_phase(pod, inits, apps, terminal=terminal)
    result: JsonDict = {
        "phase": phase,
        "reason": "",
        "message": instance.message if phase == "Failed" else "",
        "conditions": _conditions(pod, inits, apps, phase=phase, now=now),
        "initContainerStatuses": inits,
        "containerStatuses": sorted(apps, key=lambda s: str(s["name"])),  # the kubelet sorts them by name
    }
    if not inits:
        del result["initContainerStatuses"]
    status.pod_details(result, pod)
    if "startTime" not in result and instance.state is not InstanceState.PROVISIONING:
        result["startTime"] = status.stamp(instance.started_at or now)
    status.add_pod_ip(result, instance)
    return result


def _container_status(
    container: Mapping[str, Any],
    facts: ContainerFacts | None,
    views: Mapping[str, RunView],
    instance: Instance,
    verdicts: Verdicts,
    *,
    waiting: str,
    init: bool,
) -> JsonDict:
    """One container's status: waiting (not started, or in its back-off), running or terminated."""
    name = str(container.get("name", ""))
    view = views.get(name, NO_HISTORY)
    running = facts is not None and facts.state is ContainerState.RUNNING
    if facts is None or facts.state is ContainerState.WAITING:
        state: JsonDict = {"waiting": {"reason": waiting}}
    elif running:
        started = facts.started_at or instance.started_at or instance.created_at
        state = shared.running(status.stamp(started))
    elif view.again and view.waiting is not None:
        state = {"waiting": {"reason": names.REASON_CRASH_LOOP, "message": view.waiting}}
    else:
        state = {"terminated": terminated_of(facts, instance)}
    if init and not is_sidecar(container):
        ready = "terminated" in state and state["terminated"]["exitCode"] == 0
    else:
        ready = verdicts.ready_ok(container, running=running)
    entry: JsonDict = {
        "name": name,
        "image": container.get("image", ""),
        "imageID": "",
        "ready": ready,
        "started": verdicts.started_ok(container, running=running),
        "restartCount": view.restarts,
        "state": state,
    }
    if view.last:
        entry["lastState"] = {"terminated": dict(view.last)}
    if facts is not None and facts.runs > 0:
        imageref.identify(entry, instance.id)
    return entry


def terminated_of(facts: ContainerFacts, instance: Instance) -> JsonDict:
    """`state.terminated` of a container whose run ended."""
    code = GONE_EXIT_CODE if facts.exit_code is None else facts.exit_code
    result: JsonDict = {"exitCode": code, "reason": facts.exit_reason or ("Completed" if code == 0 else "Error")}
    if facts.started_at is not None:
        result["startedAt"] = status.stamp(facts.started_at)
    result["finishedAt"] = status.stamp(facts.finished_at or facts.started_at or instance.created_at)
    if facts.message:
        result["message"] = facts.message
    return result


UNLOCATED = "ContainerStatusUnknown"  # the kubelet's reason for a container it can no longer find
UNLOCATED_AT_TERMINATION = "The container could not be located when the pod was terminated"
UNLOCATED_WHEN_DELETED = (
    "The container could not be located when the pod was deleted.  The container used to be Running"
)


def unlocated_status(
    pod: Mapping[str, Any], status: Mapping[str, Any], instance: Instance | None, *, now: str
) -> JsonDict:
    """`status` (of `pod`) as a kubelet's TerminatePod leaves a deleted Pod whose containers it
    can no longer find: a manager that died between terminating the instance and writing the
    final status, or an instance found already going. Each container the rules below reach that
    is not terminated reads the end `instance` (a terminated one the provider still lists)
    reports for it (its own facts, or the instance's exit for a Pod of one container), else
    terminated `ContainerStatusUnknown` (137); one that was running also gets that unseen end as
    `lastState`, as the kubelet's status conversion gives it. As the kubelet: app containers only
    once the Pod has initialized (`_initialized`), and init containers all but the trailing ones
    that never started (`_started_inits`). The phase turns `Failed` (a terminal one stays);
    nothing is ready. Tests: tests/vnode/test_teardown.py."""
    ended = {c.name: c for c in (instance.containers if instance else ()) if c.state is ContainerState.TERMINATED}
    apps = list(status.get("containerStatuses") or [])
    inits = list(status.get("initContainerStatuses") or [])
    if instance is not None and not instance.containers and instance.exit_code is not None and len(apps) == 1:
        # The instance's facts are its one container's: an exit the provider learnt is that end.
        name = str(apps[0].get("name"))
        ended[name] = ContainerFacts(
            name,
            ContainerState.TERMINATED,
            started_at=instance.started_at,
            finished_at=instance.finished_at,
            exit_code=instance.exit_code,
            exit_reason=instance.exit_reason,
        )

    def end(old: Mapping[str, Any], reached: bool) -> JsonDict:
        entry = {**old, "ready": False, "started": False}
        state = old.get("state") or {}
        if not reached or "terminated" in state:
            return entry
        fact = ended.get(str(old.get("name")))
        if fact is not None and instance is not None:
            entry["state"] = {"terminated": terminated_of(fact, instance)}
            return entry
        if "running" in state:
            entry["lastState"] = {"terminated": _unlocated(UNLOCATED_WHEN_DELETED)}
        entry["state"] = {"terminated": _unlocated(UNLOCATED_AT_TERMINATION)}
        return entry

    result = dict(status)
    if "containerStatuses" in result:
        reached = _initialized(pod, apps, inits)
        result["containerStatuses"] = [end(old, reached) for old in apps]
    if "initContainerStatuses" in result:
        started = _started_inits(inits)
        result["initContainerStatuses"] = [end(old, index < started) for index, old in enumerate(inits)]
    if result.get("phase") not in ("Succeeded", "Failed"):
        result["phase"] = "Failed"
    result["conditions"] = stopping.not_ready(result.get("conditions") or [], now=now)
    return result


def _initialized(pod: Mapping[str, Any], apps: Sequence[Mapping[str, Any]], inits: Sequence[Mapping[str, Any]]) -> bool:
    """The kubelet's hasPodInitialized: no init containers, or an app container that ever left
    waiting, or a last init container that completed with 0."""
    if not (pod.get("spec") or {}).get("initContainers"):
        return True
    if any(_left_waiting(s) for s in apps):
        return True
    last = ((inits[-1].get("state") or {}).get("terminated") or {}) if inits else {}
    return bool(last) and last.get("exitCode") == 0


def _started_inits(inits: Sequence[Mapping[str, Any]]) -> int:
    """The kubelet's initializedContainers: how many init containers, from the first, to treat
    as started (all but the trailing ones still waiting with no earlier end; at least one)."""
    for index in range(len(inits) - 1, -1, -1):
        if _left_waiting(inits[index]):
            return index + 1
    return min(1, len(inits))


def _left_waiting(entry: Mapping[str, Any]) -> bool:
    """Not waiting, or waiting after an earlier end (the kubelet's evidence of a start)."""
    return "waiting" not in (entry.get("state") or {}) or _ended_before(entry)


def _unlocated(message: str) -> JsonDict:
    # The kubelet leaves both times at their zero value, which the API writes as null.
    return {"exitCode": GONE_EXIT_CODE, "reason": UNLOCATED, "message": message, "startedAt": None, "finishedAt": None}


def _by_name(statuses: Sequence[JsonDict]) -> dict[str, JsonDict]:
    return {str(s["name"]): s for s in statuses}


def _ended_before(entry: Mapping[str, Any]) -> bool:
    return "terminated" in (entry.get("lastState") or {})


def any_app_started(apps: Sequence[JsonDict]) -> bool:
    """The kubelet's HasAnyRegularContainerStarted: an app container runs, ran, or waits to run again."""
    return any("running" in s["state"] or "terminated" in s["state"] or _ended_before(s) for s in apps)


def pod_phase(pod: Mapping[str, Any], inits: Sequence[JsonDict], apps: Sequence[JsonDict], *, terminal: bool) -> str:
    """The kubelet's getPhase over the container statuses. `terminal`: every app container
    ended and none will run again."""
    policy = str((pod.get("spec") or {}).get("restartPolicy") or "Always")
    pending = failed_init = running = waiting = stopped = succeeded = 0
    init_status = _by_name(inits)  # every container has a status (waiting until it starts)
    for container in init_containers(pod):
        entry = init_status.get(str(container.get("name")))
        state = (entry or {}).get("state") or {}
        if is_sidecar(container):
            if entry is None:
                pending += 1
            elif "running" in state:
                pending += 0 if entry.get("started") else 1
                running += 1
            elif "waiting" in state and not _ended_before(entry):
                pending += 1
                waiting += 1
            continue
        if entry is None or "running" in state:
            pending += 1
        elif "terminated" in state:
            failed_init += 1 if state["terminated"]["exitCode"] != 0 else 0
        elif _ended_before(entry):
            failed_init += 1 if entry["lastState"]["terminated"]["exitCode"] != 0 else 0
        else:
            pending += 1
    for entry in apps:
        state = entry["state"]
        if "running" in state:
            running += 1
        elif "terminated" in state:
            stopped += 1
            succeeded += 1 if state["terminated"]["exitCode"] == 0 else 0
        elif _ended_before(entry):
            stopped += 1
        else:
            waiting += 1
    if failed_init and policy == "Never":
        return "Failed"
    if (pending and not any_app_started(apps)) or waiting:
        return "Pending"
    if running:
        return "Running"
    if stopped:
        if terminal:
            return "Succeeded" if stopped == succeeded else "Failed"
        if policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        return "Failed" if policy == "Never" else "Running"
    return "Pending"


def _conditions(
    pod: Mapping[str, Any], inits: Sequence[JsonDict], apps: Sequence[JsonDict], *, phase: str, now: datetime
) -> list[JsonDict]:
    """PodScheduled, Initialized, ContainersReady and Ready as the kubelet generates them."""
    old = status.old_conditions(pod)
    init_status = _by_name(inits)
    incomplete = []
    for container in init_containers(pod):
        entry = init_status.get(str(container.get("name"))) or {}
        done = entry.get("started") if is_sidecar(container) else entry.get("ready")
        if not done:
            incomplete.append(str(container.get("name")))
    if not incomplete or phase == "Succeeded" or any_app_started(apps):
        initialized = status.condition(old, "Initialized", "True", now)
    else:
        message = f"containers with incomplete status: [{' '.join(incomplete)}]"
        initialized = status.condition(old, "Initialized", "False", now, NOT_INITIALIZED, message)
    unready = [str(s["name"]) for s in apps if not s["ready"]]
    unready += [
        str(c.get("name"))
        for c in init_containers(pod)
        if is_sidecar(c) and not (init_status.get(str(c.get("name"))) or {}).get("ready")
    ]
    if phase in ("Succeeded", "Failed"):
        reason, message = ("PodCompleted" if phase == "Succeeded" else "PodFailed"), ""
    else:
        reason, message = NOT_READY, f"containers with unready status: [{' '.join(sorted(unready))}]"
    word = "False" if unready or phase in ("Succeeded", "Failed") else "True"
    return shared.conditions(
        [
            status.condition(old, "PodScheduled", "True", now),
            initialized,
            status.condition(old, "ContainersReady", word, now, reason, message),
            status.condition(old, "Ready", word, now, reason, message),
        ]
    )
