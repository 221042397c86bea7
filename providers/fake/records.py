"""One fake instance as the cloud stores it, and its lifecycle derived from the clock:
start, scripted exit, restart in place, termination and the retention that follows.

Owned and mutated only by `FakeCloud` under its lock; serialised into the state file.
Never holds a secret: the connect credential is returned once and not kept.
Tests: tests/providers/fake/test_fake_cloud.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from providers.base import ClaimName, Instance, InstanceId, InstanceState, Tier
from providers.fake.scenario import OfferingSpec, Scenario, parse_tier

LIVE_STATES = frozenset({InstanceState.PROVISIONING, InstanceState.INITIALIZING, InstanceState.RUNNING})
ENDED_STATES = frozenset({InstanceState.SUCCEEDED, InstanceState.FAILED})  # the workload ended, the VM is there
GOING_STATES = frozenset({InstanceState.TERMINATING, InstanceState.TERMINATED})


@dataclass(frozen=True)
class Run:
    """One run of the workload: when it started and stopped (None: still running)."""

    started_at: float
    stopped_at: float | None


@dataclass
class InstanceRecord:
    id: str
    claim: str
    state: InstanceState
    created_at: float
    ready_at: float  # when PROVISIONING turns RUNNING
    accelerator: str | None
    gpu_count: int
    tier: Tier
    region: str
    image: str = ""
    started_at: float | None = None  # the current run's start
    stopped_at: float | None = None  # the workload stopped: exit, loss or terminate
    gone_at: float | None = None  # the record is forgotten at this time (after the retention)
    exit_code: int | None = None
    message: str = ""
    # `Owner.key` of the provider that made it; "" for a record made before owners
    # existed: such a record is never listed, returned or terminated for any owner.
    owner: str = ""
    runs: int = 1
    previous_started_at: float | None = None  # the run before the current one (restart in place)
    previous_stopped_at: float | None = None
    exit_reason: str = ""
    preempted: bool = False
    terminated_at: float | None = None  # a TERMINATING instance turns TERMINATED at this time

    @property
    def endpoint(self) -> str:
        return f"fake://{self.id}"

    def holds(self, spec: OfferingSpec) -> bool:
        """True while this instance uses capacity of `spec`."""
        return self.state in LIVE_STATES and (self.accelerator, self.gpu_count, self.tier, self.region) == spec.key()

    def advance(self, now: float, scenario: Scenario) -> None:
        """Apply the transitions that time alone causes (start, a scripted exit, the end of
        termination)."""
        if self.state is InstanceState.PROVISIONING and now >= self.ready_at:
            self.state = InstanceState.RUNNING
            self.started_at = self.ready_at
            self.message = "running"
        if (
            self.state is InstanceState.RUNNING
            and scenario.run_seconds is not None
            and self.started_at is not None
            and now >= self.started_at + scenario.run_seconds
        ):
            self.finish(self.started_at + scenario.run_seconds, scenario.exit_code)
        if self.state is InstanceState.TERMINATING and self.terminated_at is not None and now >= self.terminated_at:
            self.state = InstanceState.TERMINATED
            self.message = "terminated on request"

    def finish(self, at: float, code: int) -> None:
        """The workload exited with `code` at time `at`."""
        if self.state not in LIVE_STATES:
            return
        if self.started_at is None:
            self.started_at = at
        self.state = InstanceState.SUCCEEDED if code == 0 else InstanceState.FAILED
        self.stopped_at = at
        self.exit_code = code
        self.exit_reason = "Completed" if code == 0 else "Error"
        self.message = f"the workload exited with code {code}"

    def restart(self, at: float) -> None:
        """Run the workload again from `at`; the run that ended becomes the previous one.
        Only for an ended workload (the cloud checks)."""
        assert self.state in ENDED_STATES and self.started_at is not None
        self.previous_started_at, self.previous_stopped_at = self.started_at, self.stopped_at
        self.state = InstanceState.RUNNING
        self.started_at = at
        self.stopped_at = None
        self.exit_code = None
        self.exit_reason = ""
        self.runs += 1
        self.message = f"running (run {self.runs})"

    def lose(self, at: float, retention: float) -> None:
        """A spot interruption: the provider took the instance back; listed as TERMINATED
        for `retention` seconds."""
        if self.state in GOING_STATES:
            return
        self.state = InstanceState.TERMINATED
        self.stopped_at = self.stopped_at if self.stopped_at is not None else at
        self.terminated_at = at
        self.gone_at = at + retention
        self.preempted = True
        self.message = "interrupted: the provider reclaimed the instance"

    def terminate(self, at: float, delay: float, retention: float) -> None:
        """TERMINATING for `delay` seconds, then TERMINATED for `retention` seconds, then gone."""
        if self.state in GOING_STATES:
            return
        self.state = InstanceState.TERMINATING
        self.stopped_at = self.stopped_at if self.stopped_at is not None else at
        self.terminated_at = at + delay
        self.gone_at = at + delay + retention
        self.message = "terminating on request"

    def run(self, *, previous: bool) -> Run | None:
        """The current run, or the one before it; None if there is none (not started yet,
        or no restart happened)."""
        if previous:
            if self.previous_started_at is None:
                return None
            return Run(self.previous_started_at, self.previous_stopped_at)
        return None if self.started_at is None else Run(self.started_at, self.stopped_at)

    def to_instance(self) -> Instance:
        """The seam's frozen view. The same object is returned while nothing changed, so a
        poll of thousands of quiet instances compares by identity, not field by field."""
        key = (self.state, self.started_at, self.stopped_at, self.exit_code, self.message, self.runs, self.preempted)
        cached: tuple[tuple[object, ...], Instance] | None = self.__dict__.get("_view")
        if cached is not None and cached[0] == key:
            return cached[1]
        view = self._build_instance()
        self.__dict__["_view"] = (key, view)
        return view

    def _build_instance(self) -> Instance:
        return Instance(
            id=InstanceId(self.id),
            claim=ClaimName(self.claim),
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
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["state"] = self.state.value
        data["tier"] = self.tier.value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InstanceRecord:
        """A record from the state file; keys added since (owner, runs, ...) take their
        defaults, so a file written before them still loads."""
        values = dict(data)
        values["state"] = InstanceState(values["state"])
        values["tier"] = parse_tier(values["tier"])
        return cls(**values)


_FINISHED = frozenset({InstanceState.SUCCEEDED, InstanceState.FAILED, InstanceState.TERMINATED})


def _datetime(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
