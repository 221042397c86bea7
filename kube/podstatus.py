"""A Pod as `kubectl get pods` prints it: STATUS, READY, RESTARTS and AGE.

The rules are kube-apiserver's `printPod` (pkg/printers/internalversion) and apimachinery's
`HumanDuration`; the console (its mirror rows) calls `summarize` and `human_duration`, and the
embedded server's Tables could too. Pure: the clock is a parameter; never raises on a
malformed Pod (a missing field reads as kubectl reads it).
Tests: tests/kube/test_podstatus.py::test_status_as_kubectl_prints_it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kube.times import moment_of

NODE_LOST = "NodeLost"  # the node controller's reason for a Pod on an unreachable node


@dataclass(frozen=True)
class PodSummary:
    """kubectl's columns for one Pod: `status` (the phase or a container's reason),
    `ready`/`total` containers (sidecars count), `restarts` and when the last one ended."""

    status: str
    ready: int
    total: int
    restarts: int
    last_restart: datetime | None

    @property
    def ready_text(self) -> str:
        return f"{self.ready}/{self.total}"

    def restarts_text(self, now: datetime) -> str:
        """`0`, or `5 (2m3s ago)` as kubectl prints a restart count with its last restart."""
        if self.restarts and self.last_restart is not None:
            return f"{self.restarts} ({human_duration((now - self.last_restart).total_seconds())} ago)"
        return str(self.restarts)


def summarize(pod: Mapping[str, Any]) -> PodSummary:
    """printPod's STATUS, READY and RESTARTS of `pod` (a Pod as JSON)."""
    spec, status, meta = _section(pod, "spec"), _section(pod, "status"), _section(pod, "metadata")
    phase = str(status.get("phase") or "")
    reason = str(status.get("reason") or phase)
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, Mapping)]
    if any(c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated" for c in conditions):
        reason = "SchedulingGated"
    init_specs = {str(c.get("name")): c for c in spec.get("initContainers") or [] if isinstance(c, Mapping)}
    total = len(spec.get("containers") or []) + sum(1 for c in init_specs.values() if _is_sidecar(c))
    restarts = sidecar_restarts = ready = 0
    last: datetime | None = None
    sidecar_last: datetime | None = None
    initializing = False
    init_statuses = status.get("initContainerStatuses") or []
    for index, container in enumerate(init_statuses):
        restarts += int(container.get("restartCount") or 0)
        last = _later(last, _last_finished(container))
        sidecar = _is_sidecar(init_specs.get(str(container.get("name"))))
        if sidecar:
            sidecar_restarts += int(container.get("restartCount") or 0)
            sidecar_last = _later(sidecar_last, _last_finished(container))
        state = container.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and int(terminated.get("exitCode") or 0) == 0:
            continue
        if sidecar and container.get("started"):
            ready += 1 if container.get("ready") else 0
            continue
        initializing = True
        if terminated:
            reason = _ended("Init:", terminated)
        elif waiting and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = "Init:" + str(waiting["reason"])
        else:
            reason = f"Init:{index}/{len(spec.get('initContainers') or [])}"
        break
    initialized = any(c.get("type") == "Initialized" and c.get("status") == "True" for c in conditions)
    if not initializing or initialized:
        restarts, last, has_running = sidecar_restarts, sidecar_last, False
        for container in reversed(status.get("containerStatuses") or []):
            restarts += int(container.get("restartCount") or 0)
            last = _later(last, _last_finished(container))
            state = container.get("state") or {}
            waiting, terminated = state.get("waiting") or {}, state.get("terminated")
            if waiting.get("reason"):
                reason = str(waiting["reason"])
            elif terminated:
                reason = _ended("", terminated)
            elif container.get("ready") and state.get("running") is not None:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            pod_ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
            reason = "Running" if pod_ready else "NotReady"
    if meta.get("deletionTimestamp") and status.get("reason") == NODE_LOST:
        reason = "Unknown"
    elif meta.get("deletionTimestamp") and phase not in ("Succeeded", "Failed"):
        reason = "Terminating"
    return PodSummary(reason, ready, total, restarts, last)


def human_duration(seconds: float) -> str:
    """apimachinery's duration.HumanDuration: `5s`, `3m2s`, `15m`, `5h3m`, `2d3h`, `400d`, `3y20d`."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        return f"{minutes}m{whole % 60}s" if whole % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def age(since: datetime | None, now: datetime) -> str:
    """kubectl's translateTimestampSince: `<unknown>` without a time."""
    return "<unknown>" if since is None else human_duration((now - since).total_seconds())


def created_at(pod: Mapping[str, Any]) -> datetime | None:
    """The Pod's creationTimestamp, None when absent or unparsable."""
    return moment_of(_section(pod, "metadata").get("creationTimestamp"))


def _ended(prefix: str, terminated: Mapping[str, Any]) -> str:
    """A terminated state's word: its reason, else `Signal:N`, else `ExitCode:N`."""
    if terminated.get("reason"):
        return prefix + str(terminated["reason"])
    if terminated.get("signal"):
        return f"{prefix}Signal:{terminated['signal']}"
    return f"{prefix}ExitCode:{int(terminated.get('exitCode') or 0)}"


def _is_sidecar(container: Mapping[str, Any] | None) -> bool:
    """A restartable init container (`restartPolicy: Always`): printPod counts it as a container."""
    return container is not None and container.get("restartPolicy") == "Always"


def _last_finished(container: Mapping[str, Any]) -> datetime | None:
    return moment_of(((container.get("lastState") or {}).get("terminated") or {}).get("finishedAt"))


def _later(one: datetime | None, other: datetime | None) -> datetime | None:
    if one is None or other is None:
        return one or other
    return max(one, other)


def _section(obj: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = obj.get(name)
    return value if isinstance(value, Mapping) else {}
