"""Modal sandbox facts to `Instance`, and the tags that mark a sandbox as this owner's.

Called by `ModalProvider` for list and get. Pure: reads the `SandboxInfo` message Modal's
`SandboxList` answers with (its task's start and end times, its result, its tags).
A sandbox Modal has not started yet (queued for capacity) is PROVISIONING; real exit
codes are reported (no 0/137/124 folding); one its timeout (the deadline backstop) ended is
FAILED with 137, reason Error, like any other kill. One Modal preempted (its result an internal
failure or a termination whose exception names a preemption `TaskTerminationReason`) is
TERMINATED and `preempted`: an interruption seen after the fact (Modal says nothing ahead).
Tests: tests/providers/modal/test_modal_provider_provision.py, tests/providers/modal/test_modal_preemption.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from providers import base

TAG_OWNER = "nebula-owner"
TAG_CLAIM = "nebula-claim"
TAG_PROVIDER = "nebula-provider"

# GenericResult.GenericStatus values (modal_proto.api_pb2), spelled out to keep this pure.
SUCCESS, FAILURE, TERMINATED, TIMEOUT, INIT_FAILURE, INTERNAL_FAILURE, IDLE_TIMEOUT = 1, 2, 3, 4, 5, 6, 7
OOM_STATUSES = frozenset({8, 9, 10})  # memory-manager eviction, thrashing eviction, kernel OOM kill
KILLED = 137  # what a SIGKILL reports (128 + 9): a sandbox its timeout ended
# The TaskTerminationReason names (modal_proto.api_pb2) that mean Modal took the worker back.
# SandboxInfo carries no task state or termination reason of its own: a preempted task's
# result is an internal failure (or a termination) whose exception names the reason.
PREEMPTION_REASONS = (
    "TASK_TERMINATION_REASON_PREEMPTED_BY_SCHEDULER",
    "TASK_TERMINATION_REASON_WORKER_PREEMPTED",
    "TASK_TERMINATION_REASON_LOW_PRIORITY_PREEMPTED_FOR_WORKER_SHUTDOWN",
)


def preempted(result: Any) -> bool:
    """Whether a task's GenericResult says Modal preempted it."""
    said = str(result.exception)
    return int(result.status) in (TERMINATED, INTERNAL_FAILURE) and any(r in said for r in PREEMPTION_REASONS)


def _time(value: float) -> datetime | None:
    return datetime.fromtimestamp(value, UTC) if value else None


def tags_of(info: Any) -> dict[str, str]:
    return {str(tag.tag_name): str(tag.tag_value) for tag in info.tags}


def instance_from(info: Any) -> base.Instance:
    """The facts of one `SandboxInfo`."""
    task = info.task_info
    result = task.result
    started, finished = _time(task.started_at), _time(task.finished_at)
    common: dict[str, Any] = {
        "id": base.InstanceId(str(info.id)),
        "claim": base.ClaimName(tags_of(info).get(TAG_CLAIM, "")),
        "created_at": _time(info.created_at) or datetime.fromtimestamp(0, UTC),
        "started_at": started,
        "region": (list(info.regions) or [None])[0],
        "capacity_type": base.Tier.ON_DEMAND,
    }
    status = int(result.status)
    if not status:
        state = base.InstanceState.RUNNING if started else base.InstanceState.PROVISIONING
        return base.Instance(state=state, **common)
    finished = finished or started
    if preempted(result):
        message = f"modal: preempted: {str(result.exception)[:400]}"
        return base.Instance(
            state=base.InstanceState.TERMINATED, finished_at=finished, preempted=True, message=message, **common
        )
    if status == TERMINATED:
        return base.Instance(state=base.InstanceState.TERMINATED, finished_at=finished, message="terminated", **common)
    if status in (TIMEOUT, IDLE_TIMEOUT):
        # The sandbox timeout is only a backstop past the vnode's own deadline (and grace):
        # Modal killed what ran, so it reads as any kill does. `DeadlineExceeded` is the
        # vnode's word, never a provider's.
        return base.Instance(
            state=base.InstanceState.FAILED,
            finished_at=finished,
            exit_code=KILLED,
            exit_reason="Error",
            message="the modal sandbox timeout ended it (a backstop past activeDeadlineSeconds and the grace)",
            **common,
        )
    if status in OOM_STATUSES:
        return base.Instance(
            state=base.InstanceState.FAILED,
            finished_at=finished,
            exit_code=int(result.exitcode) or 137,
            exit_reason="OOMKilled",
            message="the sandbox ran out of memory",
            **common,
        )
    if status in (SUCCESS, FAILURE):
        code = int(result.exitcode)
        if code == 0 and status == SUCCESS:
            return base.Instance(state=base.InstanceState.SUCCEEDED, finished_at=finished, exit_code=0, **common)
        message = "" if code else (str(result.exception)[:500] or "failed with no exit code")
        return base.Instance(
            state=base.InstanceState.FAILED, finished_at=finished, exit_code=code or None, message=message, **common
        )
    reason = "init failure" if status == INIT_FAILURE else "internal failure"
    return base.Instance(
        state=base.InstanceState.FAILED,
        finished_at=finished,
        message=f"modal: {reason}: {str(result.exception)[:500]}",
        **common,
    )
