"""The containers of an instance that runs several (init containers, sidecars, app
containers): the roster tags that name them, the console's `NEBULA-CONTAINER` markers
(`workload.CONTAINER_MARKER`) read into events, and both turned into `ContainerFacts` and
the instance's state.

Called by `launch` (the tags), `exits` (the markers) and `status` (the facts). Pure. A
container is RUNNING only if a marker said it started and the instance still runs, and
TERMINATED with a code only if a marker said so: nothing is reported that did not happen.
Tests: tests/providers/aws/test_aws_containers.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from providers import base
from providers.aws.workload import CONTAINER_MARKER
from providers.shape import ContainerFacts, ContainerState

TAG_CONTAINERS = "nebula.io/containers"  # then `nebula.io/containers-2`, ... when one value is too short
_TAG_VALUE_LIMIT = 256  # EC2's longest tag value
_KINDS = {"i": "init", "s": "sidecar", "a": "app"}
_EVENT = re.compile(
    rb"^"
    + re.escape(CONTAINER_MARKER.encode())
    + rb" ([a-z0-9][a-z0-9-]{0,62}) (?:started|exited (\d{1,3})) (\d{1,12})\r?$",
    re.MULTILINE,
)


@dataclass(frozen=True)
class RosterEntry:
    """One container of the Pod as the instance's tags name it; `kind`: init, sidecar or app."""

    name: str
    kind: str


@dataclass(frozen=True)
class ContainerEvent:
    """What the console said last of one container: when it started, and how and when it ended."""

    name: str
    started_at: datetime | None = None
    exit_code: int | None = None
    finished_at: datetime | None = None


def roster(pod: base.PodSpec) -> tuple[RosterEntry, ...]:
    """Every container of the Pod in start order: init containers (sidecars among them), then apps."""
    inits = tuple(RosterEntry(spec.name, "sidecar" if spec.sidecar else "init") for spec in pod.init_containers)
    return inits + tuple(RosterEntry(spec.name, "app") for spec in pod.app_containers())


def roster_tags(entries: Sequence[RosterEntry]) -> dict[str, str]:
    """The tags naming the containers (`i:fetch s:metrics a:main`, split over as many tags as
    the names need); none for a Pod of one container (the instance is the container)."""
    if len(entries) < 2:
        return {}
    chunks: list[str] = []
    for entry in entries:
        token = f"{entry.kind[0]}:{entry.name}"
        if chunks and len(chunks[-1]) + 1 + len(token) <= _TAG_VALUE_LIMIT:
            chunks[-1] = f"{chunks[-1]} {token}"
        else:
            chunks.append(token)
    return {(TAG_CONTAINERS if n == 0 else f"{TAG_CONTAINERS}-{n + 1}"): chunk for n, chunk in enumerate(chunks)}


def roster_of(tags: Mapping[str, str]) -> tuple[RosterEntry, ...]:
    """The containers the tags name, in order (empty: an instance of one container)."""
    values = []
    key, n = TAG_CONTAINERS, 1
    while key in tags:
        values.append(tags[key])
        n += 1
        key = f"{TAG_CONTAINERS}-{n}"
    entries = []
    for token in " ".join(values).split():
        kind, _, name = token.partition(":")
        if kind in _KINDS and name:
            entries.append(RosterEntry(name, _KINDS[kind]))
    return tuple(entries)


def events_in(output: bytes) -> dict[str, ContainerEvent]:
    """Each container's last word in console output: a `started` line sets its start (and
    clears an earlier end), an `exited` line its code and end."""
    events: dict[str, ContainerEvent] = {}
    for match in _EVENT.finditer(output):
        name = match.group(1).decode()
        at = datetime.fromtimestamp(int(match.group(3)), UTC)
        known = events.get(name, ContainerEvent(name))
        if match.group(2) is None:
            events[name] = ContainerEvent(name, started_at=at)
        else:
            events[name] = replace(known, exit_code=int(match.group(2)), finished_at=at)
    return events


def facts(
    entries: Sequence[RosterEntry], events: Mapping[str, ContainerEvent], *, live: bool
) -> tuple[ContainerFacts, ...]:
    """Per-container facts. `live`: the instance still runs, so a started container without an
    exit runs; otherwise it ended with the instance, its code unknown."""
    result = []
    for entry in entries:
        init = entry.kind != "app"
        event = events.get(entry.name)
        if event is None:
            result.append(ContainerFacts(entry.name, ContainerState.WAITING, init=init))
        elif event.exit_code is None and live:
            result.append(
                ContainerFacts(entry.name, ContainerState.RUNNING, init=init, started_at=event.started_at, runs=1)
            )
        else:  # it exited, or the instance stopped while it ran
            exited = event.exit_code is not None
            result.append(
                ContainerFacts(
                    entry.name,
                    ContainerState.TERMINATED,
                    init=init,
                    started_at=event.started_at,
                    finished_at=event.finished_at if exited else None,
                    exit_code=event.exit_code,
                    runs=1,
                    message="" if exited else "the instance stopped while the container ran",
                )
            )
    return tuple(result)


def with_containers(
    instance: base.Instance,
    entries: Sequence[RosterEntry],
    events: Mapping[str, ContainerEvent],
    *,
    workload_code: int | None,
) -> base.Instance:
    """`instance` with its containers' facts. While EC2 runs the instance (RUNNING) it is
    INITIALIZING until every app container has started, and SUCCEEDED/FAILED once the
    workload's marker says nothing runs any more; an instance EC2 no longer runs keeps
    the state its workload marker (or EC2) gave it."""
    live = instance.state is base.InstanceState.RUNNING
    found = facts(entries, events, live=live)
    if not live:
        return replace(instance, containers=found)
    if workload_code is not None:
        ends = [fact.finished_at for fact in found if fact.finished_at is not None]
        return replace(
            instance,
            containers=found,
            state=base.InstanceState.SUCCEEDED if workload_code == 0 else base.InstanceState.FAILED,
            exit_code=workload_code,
            exit_reason="Completed" if workload_code == 0 else "Error",
            finished_at=max(ends) if ends else None,
            message=f"the workload exited with code {workload_code}",
        )
    apps = [fact for fact in found if not fact.init]
    if any(fact.state is ContainerState.WAITING for fact in apps):
        return replace(instance, containers=found, state=base.InstanceState.INITIALIZING)
    return replace(instance, containers=found)
