"""One fake instance as the cloud stores it, and its lifecycle derived from the clock.

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
    started_at: float | None = None
    stopped_at: float | None = None  # the workload stopped: exit, loss or terminate
    gone_at: float | None = None  # a TERMINATING instance disappears at this time
    exit_code: int | None = None
    message: str = ""

    @property
    def endpoint(self) -> str:
        return f"fake://{self.id}"

    def holds(self, spec: OfferingSpec) -> bool:
        """True while this instance uses capacity of `spec`."""
        return self.state in LIVE_STATES and (self.accelerator, self.gpu_count, self.tier, self.region) == spec.key()

    def advance(self, now: float, scenario: Scenario) -> None:
        """Apply the transitions that time alone causes (start, a scripted exit)."""
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

    def finish(self, at: float, code: int) -> None:
        """The workload exited with `code` at time `at`."""
        if self.state not in LIVE_STATES:
            return
        if self.started_at is None:
            self.started_at = at
        self.state = InstanceState.SUCCEEDED if code == 0 else InstanceState.FAILED
        self.stopped_at = at
        self.exit_code = code
        self.message = f"the workload exited with code {code}"

    def lose(self, at: float) -> None:
        """A spot interruption: the provider took the instance back."""
        if self.state in (InstanceState.TERMINATED, InstanceState.TERMINATING):
            return
        self.state = InstanceState.TERMINATED
        self.stopped_at = self.stopped_at if self.stopped_at is not None else at
        self.message = "interrupted: the provider reclaimed the instance"

    def terminate(self, at: float, delay: float) -> None:
        if self.gone_at is not None:
            return
        self.state = InstanceState.TERMINATING
        self.stopped_at = self.stopped_at if self.stopped_at is not None else at
        self.gone_at = at + delay
        self.message = "terminating on request"

    def to_instance(self) -> Instance:
        """The seam's frozen view. The same object is returned while nothing changed, so a
        poll of thousands of quiet instances compares by identity, not field by field."""
        key = (self.state, self.started_at, self.stopped_at, self.exit_code, self.message, self.endpoint)
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
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["state"] = self.state.value
        data["tier"] = self.tier.value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InstanceRecord:
        values = dict(data)
        values["state"] = InstanceState(values["state"])
        values["tier"] = parse_tier(values["tier"])
        return cls(**values)


_FINISHED = frozenset({InstanceState.SUCCEEDED, InstanceState.FAILED, InstanceState.TERMINATED})


def _datetime(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
