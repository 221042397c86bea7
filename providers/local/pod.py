"""Turn what every container folder of an instance says into the instance's facts: one
`ContainerFacts` per container (Pod order) and the instance's state from them.

Called by the provider's `get` and `list` (through `reader.InstanceReader`); pure, so every
rule has a table-driven test. Never touches the disk or the processes.

Rule for the state of an instance of several containers: TERMINATING once terminate was asked
while anything of it lives (gone once nothing does); else INITIALIZING until an app container
has started, RUNNING while any container runs, INITIALIZING again while nothing runs but a
container may start now; SUCCEEDED / FAILED once nothing runs and nothing may start, with the
first non-zero exit code of an init or app container (sidecars do not count, unless one that
never started holds the others: then its failure is the instance's), else 0. A
single-container instance keeps the rules of `providers.local.status`; both report every
container in `Instance.containers`, and `started_at` and `runs` are the first app container's.
Tests: tests/providers/local/test_local_containers.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from providers import base
from providers.local import sequence, status
from providers.shape import ContainerFacts, ContainerState

_WAITING = frozenset({base.InstanceState.PROVISIONING, base.InstanceState.INITIALIZING})


@dataclass(frozen=True)
class Seen:
    """One container as its folder was read: its kind, its observation, whether it may start."""

    name: str
    kind: str
    observation: status.Observation
    may_start: bool = True
    folder: Path | None = None  # where it was read


def container_facts(seen: Seen) -> ContainerFacts:
    """The facts of one container; `runs` counts its starts (0 until its first)."""
    obs = seen.observation
    started = obs.runs > 1 or obs.run is not None or obs.exit is not None
    facts = ContainerFacts(
        seen.name, ContainerState.WAITING, init=seen.kind != sequence.APP, runs=obs.runs if started else 0
    )
    unit = status.facts(dataclasses.replace(obs, terminate=None))
    if unit.state in _WAITING:
        message = "" if seen.may_start else "waiting for the init containers before it"
        return dataclasses.replace(facts, message=message)
    if obs.exit is None and (obs.workload_alive or obs.supervisor_alive) and obs.run is not None:
        return dataclasses.replace(facts, state=ContainerState.RUNNING, started_at=unit.started_at)
    return dataclasses.replace(
        facts,
        state=ContainerState.TERMINATED,
        started_at=unit.started_at,
        finished_at=unit.finished_at,
        exit_code=unit.exit_code,
        exit_reason=unit.exit_reason,
        message=unit.message,
    )


def instance_from(containers: Sequence[Seen]) -> base.Instance | None:
    """The instance's facts, or None when it is gone (see the module rule and `status`)."""
    first = next((seen for seen in containers if seen.kind == sequence.APP), containers[0])
    facts = tuple(container_facts(seen) for seen in containers)
    if len(containers) == 1:
        single = status.instance_from(first.observation)
        return dataclasses.replace(single, containers=facts) if single is not None else None
    alive = any(seen.observation.supervisor_alive or seen.observation.workload_alive for seen in containers)
    if first.observation.terminate is not None and not alive:
        return None
    known = status.facts(first.observation)
    state, message, ended = _state(containers, facts)
    failed = next((f for f in ended if f.exit_code != 0), None) if ended else None
    code = None if ended is None else (failed.exit_code if failed is not None else 0)
    finished = max((f.finished_at for f in ended or () if f.finished_at is not None), default=None)
    return dataclasses.replace(
        known,
        state=state,
        message=message,
        exit_code=code,
        finished_at=finished,
        exit_reason=status.exit_reason(code) if ended is not None else "",
        containers=facts,
    )


def _state(
    containers: Sequence[Seen], facts: Sequence[ContainerFacts]
) -> tuple[base.InstanceState, str, list[ContainerFacts] | None]:
    """The state, its message, and (once ended) the facts whose exit codes count."""
    if containers[0].observation.terminate is not None:
        return base.InstanceState.TERMINATING, "terminate requested", None
    apps_started = any(f.runs > 0 for seen, f in zip(containers, facts, strict=True) if seen.kind == sequence.APP)
    if any(f.state is ContainerState.RUNNING for f in facts):
        return (
            (base.InstanceState.RUNNING, "", None)
            if apps_started
            else (base.InstanceState.INITIALIZING, "init containers run", None)
        )
    pending = [
        seen for seen, f in zip(containers, facts, strict=True) if f.state is ContainerState.WAITING and seen.may_start
    ]
    if pending:
        if all(status.needs_launch(seen.observation) for seen in containers):
            return base.InstanceState.PROVISIONING, "the supervisors are being launched", None
        return base.InstanceState.INITIALIZING, "containers are starting", None
    counted = [
        f
        for seen, f in zip(containers, facts, strict=True)
        if seen.kind != sequence.SIDECAR and f.state is ContainerState.TERMINATED
    ]
    failed = next((f for f in counted if f.exit_code != 0), None)
    held = next((f for f in facts if f.state is ContainerState.WAITING), None)
    if failed is None and held is not None:  # held by a sidecar that never started: its failure is the Pod's
        sidecar = next((f for f in facts if f.state is ContainerState.TERMINATED and f.exit_code != 0), None)
        why = f"container {sidecar.name!r}: {sidecar.message}" if sidecar is not None else "it never started"
        return (
            base.InstanceState.FAILED,
            f"container {held.name!r} is held: {why}",
            [*counted, *([sidecar] if sidecar else [])],
        )
    if failed is None:
        return base.InstanceState.SUCCEEDED, "every container exited with code 0", counted
    if failed.exit_code is None:
        return base.InstanceState.FAILED, f"container {failed.name!r}: {failed.message}", counted
    return base.InstanceState.FAILED, f"container {failed.name!r} exited with code {failed.exit_code}", counted
