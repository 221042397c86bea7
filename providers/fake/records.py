"""One fake instance as the cloud stores it, and its lifecycle derived from the clock:
start, its containers' sequence and exits (`workload`), restart in place, termination
and the retention that follows.

Owned and mutated only by `FakeCloud` under its lock; serialised into the state file.
Never holds a secret: the connect credential is returned once and not kept.
Tests: tests/providers/fake/test_fake_cloud.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from providers import base, errors
from providers.fake import workload
from providers.fake.scenario import OfferingSpec, Scenario, parse_tier
from providers.fake.workload import ContainerRecord
from providers.shape import ContainerState

LIVE_STATES = frozenset({base.InstanceState.PROVISIONING, base.InstanceState.INITIALIZING, base.InstanceState.RUNNING})
ENDED_STATES = frozenset(
    {base.InstanceState.SUCCEEDED, base.InstanceState.FAILED}
)  # the workload ended, the VM is there
GOING_STATES = frozenset({base.InstanceState.TERMINATING, base.InstanceState.TERMINATED})


@dataclass
class InstanceRecord:
    id: str
    claim: str
    state: base.InstanceState
    created_at: float
    ready_at: float  # when PROVISIONING turns to the workload's start
    accelerator: str | None
    gpu_count: int
    tier: base.Tier
    region: str
    image: str = ""
    started_at: float | None = None  # the current run's start (the earliest of its containers')
    stopped_at: float | None = None  # the workload stopped: exit, loss or terminate
    gone_at: float | None = None  # the record is forgotten at this time (after the retention)
    exit_code: int | None = None
    message: str = ""
    # `Owner.key` of the provider that made it; "" for a record made before owners
    # existed: such a record is never listed, returned or terminated for any owner.
    owner: str = ""
    runs: int = 1
    exit_reason: str = ""
    preempted: bool = False
    terminated_at: float | None = None  # a TERMINATING instance turns TERMINATED at this time
    containers: list[ContainerRecord] = field(default_factory=list)  # init containers first, then apps
    reports_containers: bool = False  # provisioned with a PodSpec listing its containers
    restart_policy: str = "Always"
    begun_at: float | None = None  # when the current sequence of containers began
    volumes: list[tuple[str, str]] = field(default_factory=list)  # (name, kind)

    @property
    def endpoint(self) -> str:
        return f"fake://{self.id}"

    def holds(self, spec: OfferingSpec) -> bool:
        """True while this instance uses capacity of `spec`."""
        return self.state in LIVE_STATES and (self.accelerator, self.gpu_count, self.tier, self.region) == spec.key()

    def container(self, name: str) -> ContainerRecord | None:
        """The container `name`; "" is the first app container."""
        if not name:
            return next((c for c in self.containers if not c.init), None)
        return next((c for c in self.containers if c.name == name), None)

    def require(self, name: str) -> ContainerRecord:
        """The container `name` ("": the first app container); NotFound if it has none."""
        found = self.container(name)
        if found is None:
            raise errors.NotFound(f"fake: instance {self.id} has no container {name!r}")
        return found

    def exit_container(self, at: float, name: str, code: int, scenario: Scenario) -> None:
        """One running container exits with `code`; InvalidRequest if it is not running."""
        target = self.require(name)
        if not target.running or self.state in GOING_STATES:
            raise errors.InvalidRequest(f"fake: container {name} of {self.id} is not running")
        target.finish(at, code)
        self._step(at, scenario)

    def advance(self, now: float, scenario: Scenario) -> None:
        """Apply the transitions that time alone causes (the start, the containers' scripted
        exits and sequence, the end of termination)."""
        if self.state is base.InstanceState.PROVISIONING and now >= self.ready_at:
            self.begun_at = self.ready_at
        # An ended workload has nothing that time alone changes: skip it (most of a big
        # benchmark's records), until a restart or a control call acts on it.
        if self.state not in GOING_STATES and self.state not in ENDED_STATES:
            self._step(now, scenario)
        if (
            self.state is base.InstanceState.TERMINATING
            and self.terminated_at is not None
            and now >= self.terminated_at
        ):
            self.state = base.InstanceState.TERMINATED
            self.message = "terminated on request"

    def finish(self, at: float, code: int, scenario: Scenario) -> None:
        """The workload exited with `code` at time `at`: every running container ends."""
        if self.state not in LIVE_STATES:
            return
        if self.begun_at is None:
            self.begun_at = at
            workload.advance(self.containers, at, at, scenario, self.restart_policy)
        for container in self.containers:
            container.finish(at, code)
        self._step(at, scenario)

    def restart(self, at: float, name: str, scenario: Scenario) -> None:
        """Run container `name` ("": the whole workload, from its first container) again
        from `at`; the run that ended becomes the previous one. NotFound for no such
        container or a going instance; InvalidRequest unless it has ended."""
        if self.state in GOING_STATES:
            raise errors.NotFound(f"fake: instance {self.id} is {self.state.value}")
        container = self.require(name) if name else None
        if container is not None and container.state is not ContainerState.TERMINATED:
            raise errors.InvalidRequest(f"fake: container {name} of {self.id} has not ended")
        if container is None and self.state not in ENDED_STATES:
            raise errors.InvalidRequest(f"fake: the workload of {self.id} has not ended ({self.state.value})")
        if container is None:
            for each in self.containers:
                each.state = ContainerState.WAITING
            self.begun_at = at
        else:
            container.start(at)
        self.runs += 1
        self._step(at, scenario)

    def stop_container(self, at: float, container: ContainerRecord, grace: float, scenario: Scenario) -> None:
        """SIGTERM to `container` if it runs, SIGKILL `grace` seconds later (`workload`'s
        rule: its script says how it reacts); it ends when the clock gets there."""
        container.stop(at, grace)
        self._step(at, scenario)

    def lose(self, at: float, retention: float) -> None:
        """A spot interruption: the provider took the instance back; listed as TERMINATED
        for `retention` seconds."""
        if self.state in GOING_STATES:
            return
        self._stop(at)
        self.state = base.InstanceState.TERMINATED
        self.terminated_at = at
        self.gone_at = at + retention
        self.preempted = True
        self.message = "interrupted: the provider reclaimed the instance"

    def terminate(self, at: float, delay: float, retention: float) -> None:
        """TERMINATING for `delay` seconds, then TERMINATED for `retention` seconds, then gone."""
        if self.state in GOING_STATES:
            return
        self._stop(at)
        self.state = base.InstanceState.TERMINATING
        self.terminated_at = at + delay
        self.gone_at = at + delay + retention
        self.message = "terminating on request"

    def _step(self, now: float, scenario: Scenario) -> None:
        """Run the containers' sequence up to `now` and derive the instance's facts."""
        if self.state not in GOING_STATES and self.begun_at is not None:
            workload.advance(self.containers, self.begun_at, now, scenario, self.restart_policy)
            self._derive()

    def _stop(self, at: float) -> None:
        """The instance goes: its running containers are killed."""
        self.stopped_at = self.stopped_at if self.stopped_at is not None else at
        for container in self.containers:
            container.finish(at, workload.KILLED)

    def _derive(self) -> None:
        """The instance's state and facts from its containers'."""
        if self.begun_at is None or self.state in GOING_STATES:
            return
        phase, code, started, stopped = workload.summary(self.containers)
        self.started_at = started
        if phase == "ended":
            assert code is not None
            self.state = base.InstanceState.SUCCEEDED if code == 0 else base.InstanceState.FAILED
            self.stopped_at, self.exit_code, self.exit_reason = stopped, code, workload.exit_reason(code)
            self.message = f"the workload exited with code {code}"
            return
        self.stopped_at, self.exit_code, self.exit_reason = None, None, ""
        if phase == "initializing":
            self.state, self.message = base.InstanceState.INITIALIZING, "initializing: init containers run"
        else:
            self.state = base.InstanceState.RUNNING
            self.message = "running" if self.runs == 1 else f"running (run {self.runs})"

    def to_instance(self) -> base.Instance:
        """The seam's frozen view. The same object is returned while nothing changed, so a
        poll of thousands of quiet instances compares by identity, not field by field."""
        key = (
            self.state,
            self.started_at,
            self.stopped_at,
            self.exit_code,
            self.message,
            self.runs,
            self.preempted,
            tuple(c.key() for c in self.containers) if self.reports_containers else (),
        )
        cached: tuple[tuple[object, ...], base.Instance] | None = self.__dict__.get("_view")
        if cached is not None and cached[0] == key:
            return cached[1]
        view = self._build_instance()
        self.__dict__["_view"] = (key, view)
        return view

    def _build_instance(self) -> base.Instance:
        return base.Instance(
            id=base.InstanceId(self.id),
            claim=base.ClaimName(self.claim),
            state=self.state,
            created_at=_datetime(self.created_at),
            endpoint=self.endpoint,
            started_at=_datetime(self.started_at) if self.started_at is not None else None,
            finished_at=_datetime(self.stopped_at) if self.state in _FINISHED and self.stopped_at else None,
            exit_code=self.exit_code,
            message=self.message,
            region=self.region,
            capacity_type=self.tier,
            exit_reason=self.exit_reason,
            runs=self.runs,
            preempted=self.preempted,
            containers=tuple(c.facts() for c in self.containers) if self.reports_containers else (),
        )

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if k != "containers"}
        data["state"] = self.state.value
        data["tier"] = self.tier.value
        data["containers"] = [c.to_dict() for c in self.containers]
        data["volumes"] = [[name, kind] for name, kind in self.volumes]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InstanceRecord:
        """A record from the state file; keys added since (owner, runs, containers, ...)
        take their defaults, so a file written before them still loads (its one container
        rebuilt from the record's own facts)."""
        values = dict(data)
        values["state"] = base.InstanceState(values["state"])
        values["tier"] = parse_tier(values["tier"])
        previous = (values.pop("previous_started_at", None), values.pop("previous_stopped_at", None))
        values["volumes"] = [(str(name), str(kind)) for name, kind in values.get("volumes") or ()]
        if "containers" in values:
            values["containers"] = [ContainerRecord.from_dict(c) for c in values["containers"]]
            return cls(**values)
        record = cls(**values)
        record.containers = [_legacy_container(record, *previous)]
        record.begun_at = None if record.state is base.InstanceState.PROVISIONING else record.ready_at
        return record


def _legacy_container(
    record: InstanceRecord, previous_start: float | None, previous_stop: float | None
) -> ContainerRecord:
    """The one container of a record saved before records kept containers."""
    state = ContainerState.WAITING
    if record.state in (base.InstanceState.RUNNING, base.InstanceState.INITIALIZING):
        state = ContainerState.RUNNING
    elif record.started_at is not None:
        state = ContainerState.TERMINATED
    code = record.exit_code if record.exit_code is not None else workload.KILLED
    return ContainerRecord(
        "",
        state=state,
        started_at=record.started_at,
        stopped_at=record.stopped_at,
        exit_code=code if state is ContainerState.TERMINATED else None,
        runs=0 if state is ContainerState.WAITING else record.runs,
        previous_started_at=previous_start,
        previous_stopped_at=previous_stop,
    )


_FINISHED = frozenset({base.InstanceState.SUCCEEDED, base.InstanceState.FAILED, base.InstanceState.TERMINATED})


def _datetime(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
