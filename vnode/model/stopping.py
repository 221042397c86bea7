"""A Pod's containers stopped as a kubelet stops them: the grace, the deadline, one stop's record.

Pure. `vnode.phases.stopping` carries a stop out (preStop hooks, the provider's
`stop_container`, the look until the containers ended); the teardown starts one for a Pod
deleted gracefully, the lifecycle one for a Pod past its `activeDeadlineSeconds` or annotated
`nebula.io/stop-reason: BudgetExceeded` (`stop_asked`, `budget_status`) or interrupted by its
provider (`vnode.model.interruption`). What a
kubelet does is the reference: the grace is `metadata.deletionGracePeriodSeconds` of a Pod being
deleted, else `spec.terminationGracePeriodSeconds`, else 30 s; the time the preStop hooks took is
spent from it, but a container that ran one keeps at least 2 s after its SIGTERM; the deadline
counts from `status.startTime` (so it survives a manager restart and an adoption).
Tests: tests/vnode/test_stopping.py.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from kube import names
from kube.times import parse_rfc3339
from vnode.model.probespec import ExecAction, HttpAction, InvalidProbe, TcpAction, handler_action

JsonDict = dict[str, Any]
DEFAULT_GRACE = 30.0  # seconds: the API server's default terminationGracePeriodSeconds
MINIMUM_GRACE = 2.0  # seconds a container keeps after SIGTERM once its preStop hook ran (the kubelet's)
DEADLINE_REASON = "DeadlineExceeded"
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"
# The kubelet's `DisruptionTarget` condition: set when the kubelet itself ends the Pod for the
# node's sake (an eviction, a graceful node shutdown; for Nebula, the provider taking the
# capacity back). A deadline or a deletion carries none.
DISRUPTION_TARGET = "DisruptionTarget"
TERMINATION_BY_KUBELET = "TerminationByKubelet"


MAX_STOP_MESSAGE = 1000  # characters of `nebula.io/stop-message` kept in the Pod's status
BUDGET_MESSAGE = "the budget of the Pod's pool is exceeded"  # when no stop-message says more


class Why(enum.Enum):
    DELETED = "the Pod is being deleted"
    DEADLINE = "the Pod ran past its activeDeadlineSeconds"
    BUDGET = "the Pod's pool ran out of budget (nebula.io/stop-reason: BudgetExceeded)"
    INTERRUPTED = "the provider gave notice that it takes the instance back (nebula.io/interruption)"


def stop_asked(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """`nebula.io/stop-reason` and `nebula.io/stop-message` of the Pod (the message bounded to
    `MAX_STOP_MESSAGE` characters; `BUDGET_MESSAGE` when absent), or None when no stop is asked."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    reason = annotations.get(names.STOP_REASON_ANNOTATION)
    if not isinstance(reason, str) or not reason.strip():
        return None
    message = annotations.get(names.STOP_MESSAGE_ANNOTATION)
    message = message.strip() if isinstance(message, str) and message.strip() else BUDGET_MESSAGE
    if len(message) > MAX_STOP_MESSAGE:
        message = message[: MAX_STOP_MESSAGE - 3] + "..."
    return reason.strip(), message


def termination_grace(pod: Mapping[str, Any]) -> float:
    """`spec.terminationGracePeriodSeconds`, else 30 s (never negative)."""
    value = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return _seconds(value, DEFAULT_GRACE)


def deletion_grace(pod: Mapping[str, Any]) -> float:
    """The grace of a Pod being deleted: `metadata.deletionGracePeriodSeconds` (what
    `kubectl delete --grace-period` sets), else its termination grace."""
    value = (pod.get("metadata") or {}).get("deletionGracePeriodSeconds")
    return _seconds(value, termination_grace(pod)) if value is not None else termination_grace(pod)


def deadline_of(pod: Mapping[str, Any]) -> datetime | None:
    """When the Pod's `activeDeadlineSeconds` runs out: counted from `status.startTime`, as
    the kubelet counts it. None: no deadline, or the Pod has not started."""
    seconds = (pod.get("spec") or {}).get("activeDeadlineSeconds")
    started = (pod.get("status") or {}).get("startTime")
    if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds <= 0 or not started:
        return None
    try:
        return parse_rfc3339(str(started)) + timedelta(seconds=seconds)
    except ValueError:
        return None


@dataclass
class Stop:
    """One stop of a Pod's containers, under way. `began` and `ends` are monotonic seconds:
    the hooks run and the containers get their SIGTERM before `ends`; the provider kills what
    still runs at `kill_by` (`ends`, or 2 s after the SIGTERM of a container whose hook ran)."""

    why: Why
    began: float
    grace: float
    message: str = ""  # what the Pod's status says of a stop asked with a message (BUDGET, INTERRUPTED)
    reason: str = ""  # the status reason of an interruption's stop (vnode.model.interruption.reason_of)
    hooks_done: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)
    hooks_ran: bool = False  # a preStop hook was started (its container keeps >= 2 s after SIGTERM)
    told: bool = False  # the Killing Event of each running container was told as the stop began
    signalled_at: float | None = None  # monotonic: when stop_container was asked
    kill_by: float | None = None  # monotonic: when the provider kills what still runs
    look_after: float = 0.0  # monotonic: a wake-up before this does not look again

    @property
    def ends(self) -> float:
        return self.began + self.grace

    def remaining(self, now: float) -> float:
        """The grace left for the containers' SIGTERM (`grace_left`)."""
        return grace_left(self.grace, now - self.began, hooks_ran=self.hooks_ran)

    def shorten(self, grace: float, now: float) -> bool:
        """A later delete with a shorter grace (a `--force` after a graceful delete) moves the
        end closer; a longer one never moves it out. True if it moved (ask the provider again)."""
        if now + grace >= self.ends:
            return False
        self.grace = max(now + grace - self.began, 0.0)
        return True


def grace_left(grace: float, spent: float, *, hooks_ran: bool) -> float:
    """What is left of `grace` after `spent` seconds, for a SIGTERM; at least 2 s once a
    preStop hook ran (a grace of 0 stays 0: SIGKILL at once)."""
    left = max(grace - spent, 0.0)
    return max(left, MINIMUM_GRACE) if hooks_ran and grace > 0 else left


@dataclass(frozen=True)
class SleepAction:
    """`lifecycle.preStop.sleep`: wait this long before the SIGTERM."""

    seconds: int


Hook = ExecAction | HttpAction | SleepAction


def pre_stop(container: Mapping[str, Any]) -> Hook | None:
    """The container's `lifecycle.preStop` handler, or None. InvalidProbe names the field of
    one that cannot run (tcpSocket, which a kubelet does not run as a hook, included)."""
    body = (container.get("lifecycle") or {}).get("preStop")
    if not isinstance(body, Mapping):
        return None
    where = f"lifecycle.preStop of container {container.get('name', '')}"
    sleep = body.get("sleep")
    if isinstance(sleep, Mapping):
        seconds = sleep.get("seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 0:
            raise InvalidProbe(f"{where}.sleep.seconds", "must be a whole number >= 0")
        return SleepAction(seconds)
    action = handler_action(body, container=container, where=where)
    if isinstance(action, TcpAction):
        raise InvalidProbe(f"{where}.tcpSocket", "is deprecated and not run as a lifecycle hook")
    return action


def deadline_status(status: Mapping[str, Any], *, now: str) -> JsonDict:
    """`status` as a Pod past its deadline reads: `Failed/DeadlineExceeded` with the kubelet's
    message whatever its containers show (they may still be stopping), not ready. A status
    that already reads so is returned as it is (the writer then has nothing new to write)."""
    return failed_status(status, reason=DEADLINE_REASON, message=DEADLINE_MESSAGE, now=now)


def budget_status(status: Mapping[str, Any], *, message: str, now: str) -> JsonDict:
    """`status` as a Pod stopped for its pool's budget reads: `Failed/BudgetExceeded` with
    `message`, not ready, and `DisruptionTarget=True` (`TerminationByKubelet`), as a kubelet
    marks a Pod it ends for the node's sake. Applied again, it changes nothing."""
    return disrupted_status(status, reason=names.REASON_BUDGET_EXCEEDED, message=message, now=now)


def disrupted_status(status: Mapping[str, Any], *, reason: str, message: str, now: str) -> JsonDict:
    """`status` as a Pod ended for the node's sake reads (a budget stop, an interruption):
    `Failed` with `reason` and `message`, not ready, `DisruptionTarget=True`
    (`TerminationByKubelet`). Applied again, it changes nothing."""
    failed = failed_status(status, reason=reason, message=message, now=now)
    return with_disruption_target(failed, message=message, now=now)


def failed_status(status: Mapping[str, Any], *, reason: str, message: str, now: str) -> JsonDict:
    """`status` turned `Failed` with `reason` and `message` whatever its containers show, not
    ready; one that already reads so is returned as it is."""
    if _reads_failed(status, reason, message):
        return dict(status) if not isinstance(status, dict) else status
    result = dict(status)
    result["phase"], result["reason"], result["message"] = "Failed", reason, message
    result["conditions"] = not_ready(result.get("conditions") or [], now=now)
    for key in ("containerStatuses", "initContainerStatuses"):
        if key in result:
            result[key] = [{**entry, "ready": False} for entry in result[key]]
    return result


def not_ready(conditions: Sequence[Mapping[str, Any]], *, now: str) -> list[JsonDict]:
    """`conditions` of a Pod that failed: `Ready` and `ContainersReady` False (`PodFailed`),
    moved at `now` unless they were False already; the others as they are."""
    result = []
    for condition in conditions:
        kind = condition.get("type")
        if kind in ("Ready", "ContainersReady"):
            moved = condition.get("lastTransitionTime") if condition.get("status") == "False" else now
            condition = {**condition, "status": "False", "reason": "PodFailed", "lastTransitionTime": moved}
            condition.pop("message", None)
        result.append(dict(condition))
    return result


def _reads_failed(status: Mapping[str, Any], reason: str, message: str) -> bool:
    if (status.get("phase"), status.get("reason"), status.get("message")) != ("Failed", reason, message):
        return False
    ready = [c for c in status.get("conditions") or [] if c.get("type") in ("Ready", "ContainersReady")]
    statuses = [*(status.get("containerStatuses") or []), *(status.get("initContainerStatuses") or [])]
    return all(c.get("status") == "False" for c in ready) and not any(s.get("ready") for s in statuses)


def with_disruption_target(status: Mapping[str, Any], *, message: str, now: str) -> JsonDict:
    """`status` with the kubelet's `DisruptionTarget=True` (reason `TerminationByKubelet`),
    which a Job's `podFailurePolicy` reads as a disruption, not a failure of the workload."""
    result = dict(status)
    old = next((c for c in result.get("conditions") or [] if c.get("type") == DISRUPTION_TARGET), None)
    moved = old.get("lastTransitionTime") if old is not None and old.get("status") == "True" else now
    condition = {
        "type": DISRUPTION_TARGET,
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": moved,
        "reason": TERMINATION_BY_KUBELET,
        "message": message,
    }
    others = [c for c in result.get("conditions") or [] if c.get("type") != DISRUPTION_TARGET]
    result["conditions"] = [condition, *others]
    return result


def _seconds(value: Any, default: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return max(float(value), 0.0)
