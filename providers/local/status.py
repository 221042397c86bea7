"""Turn what an instance folder says (records plus liveness) into an `Instance` fact.

Called by the provider's `get` and `list`; pure, so every rule has a table-driven test
(tests/providers/local/test_local_status.py). Never touches the disk or the processes.

Rule for gone: once terminate was asked AND no process of the instance lives, the
instance is gone (`instance_from` returns None) and the caller deletes the folder.

Rule for an interrupted launch: a folder whose supervisor was never started (the manager
stopped between creating it and launching) `needs_launch`; it stays PROVISIONING while
the provider resumes the launch, and is FAILED only if that resumption failed. A restart
whose launch was cut short reads the same way: the records of the current run are the
only ones an Observation holds (`providers.local.runs`).

Rule for an exit: the recorded exit code gives SUCCEEDED (0, reason `Completed`) or FAILED
(reason `Error`; death by signal N was recorded as 128+N); the folder stays until terminate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from providers import base
from providers.local import stamp

ENDPOINT = "127.0.0.1"
REGION = "local"


@dataclass(frozen=True)
class Observation:
    """Everything read from one folder; records are None when absent or of an older run."""

    instance_id: str
    claim: str
    created_at: datetime
    spec: Mapping[str, Any] | None
    launch: Mapping[str, Any] | None
    run: Mapping[str, Any] | None
    exit: Mapping[str, Any] | None
    terminate: Mapping[str, Any] | None
    supervisor_alive: bool
    workload_alive: bool
    launch_error: Mapping[str, Any] | None = None
    runs: int = 1  # the current run's number: 1 + the restarts in place


def needs_launch(obs: Observation) -> bool:
    """Nothing was ever started for this instance and nothing asked it to stop."""
    records = (obs.launch, obs.run, obs.exit, obs.terminate, obs.launch_error)
    return obs.spec is not None and all(r is None for r in records) and not obs.workload_alive


def _time(record: Mapping[str, Any] | None, key: str) -> datetime | None:
    value = (record or {}).get(key)
    return stamp.datetime_from_stamp(value) if isinstance(value, str) else None


def _state_and_message(obs: Observation) -> tuple[base.InstanceState, str]:
    alive = obs.supervisor_alive or obs.workload_alive
    if obs.exit is not None:
        code = obs.exit.get("exit_code")
        finished, asked = _time(obs.exit, "finished_at"), _time(obs.terminate, "requested_at")
        if obs.terminate is not None and (finished is None or asked is None or finished >= asked):
            return base.InstanceState.TERMINATED, f"terminated on request (exit code {code})"
        if code == 0:
            return base.InstanceState.SUCCEEDED, "exited with code 0"
        return base.InstanceState.FAILED, f"exited with code {code}"
    if obs.terminate is not None:
        return base.InstanceState.TERMINATING, "terminate requested"
    if alive:
        if obs.run is None:
            return base.InstanceState.INITIALIZING, "the supervisor is starting the workload"
        return base.InstanceState.RUNNING, ""
    if obs.spec is None:
        return base.InstanceState.FAILED, "the instance folder has no instance record"
    if obs.launch is None and obs.run is None:
        if obs.launch_error is not None:
            reason = obs.launch_error.get("message") or "unknown reason"
            return base.InstanceState.FAILED, f"the workload was never started: {reason}"
        return base.InstanceState.PROVISIONING, "the supervisor is being launched"
    return base.InstanceState.FAILED, "the process is gone without a recorded exit code (was the machine restarted?)"


def exit_reason(code: int | None) -> str:
    """The kubelet's reason for a terminated container: `Completed` for 0, else `Error`."""
    if code is None:
        return ""
    return "Completed" if code == 0 else "Error"


def instance_from(obs: Observation) -> base.Instance | None:
    """The instance's facts, or None when it is gone (see the module rule)."""
    if obs.terminate is not None and not (obs.supervisor_alive or obs.workload_alive):
        return None
    return facts(obs)


def facts(obs: Observation) -> base.Instance:
    """The facts of what the folder says, gone or not (`instance_from` applies the rule for gone)."""
    state, message = _state_and_message(obs)
    recorded = (obs.exit or {}).get("exit_code")
    code = recorded if isinstance(recorded, int) else None
    return base.Instance(
        id=base.InstanceId(obs.instance_id),
        claim=base.ClaimName(obs.claim),
        state=state,
        created_at=obs.created_at,
        endpoint=ENDPOINT,
        started_at=_time(obs.run, "started_at"),
        finished_at=_time(obs.exit, "finished_at"),
        exit_code=code,
        message=message,
        region=REGION,
        capacity_type=base.Tier.ON_DEMAND,
        exit_reason=exit_reason(code),
        runs=obs.runs,
    )
