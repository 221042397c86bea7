"""The verdicts of one container's probes, decided as the kubelet's probe workers decide them.

Owned by `vnode.probing.prober` (under its lock); pure: takes the container's facts, the probe
results and the time, returns what changed. A container is probed only while it runs;
its startup probe runs first, and until it passes readiness and liveness do not; a
readiness verdict flips after `successThreshold` successes or `failureThreshold` failures in
a row (False until the first success); `failureThreshold` failures of liveness or startup
ask for a kill, after which that probe holds until a new run. A new run (its `runs` grew, or
another instance) resets every verdict and waits `initialDelaySeconds` from its start.
Tests: tests/vnode/test_probe_scheduling.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from providers.base import Instance, InstanceState
from providers.shape import ContainerState
from vnode.model.probespec import LIVENESS, READINESS, STARTUP, Probe

RunId = tuple[str, int]  # the instance id and the container's run in it


@dataclass(frozen=True)
class RunView:
    """What the provider's facts say of one container now."""

    running: bool
    run: RunId | None = None  # None: never started
    age: float = 0.0  # seconds since this run started (0: unknown)


def run_of(instance: Instance | None, container: str, *, first: str) -> RunId | None:
    """The container's current run in `instance`'s facts (None: it has not started there),
    as `view_of` names it: a verdict holds for this run only."""
    if instance is None:
        return None
    if instance.containers:
        facts = next((c for c in instance.containers if c.name == container), None)
        return None if facts is None or facts.runs == 0 else (str(instance.id), facts.runs)
    return (str(instance.id), instance.runs) if container == first else None


def view_of(instance: Instance | None, container: str, *, first: str, now: datetime) -> RunView:
    """The container's run in `instance`'s facts: its own `ContainerFacts`, or for an
    instance that reports none, the instance's own state for the first app container."""
    if instance is None:
        return RunView(False)
    if instance.containers:
        facts = next((c for c in instance.containers if c.name == container), None)
        if facts is None or facts.runs == 0:
            return RunView(False)
        running, run, started = facts.state is ContainerState.RUNNING, facts.runs, facts.started_at
    elif container == first:
        running, run, started = instance.state is InstanceState.RUNNING, instance.runs, instance.started_at
    else:
        return RunView(False)
    age = max(0.0, (now - started).total_seconds()) if started is not None else 0.0
    return RunView(running, (str(instance.id), run), age)


@dataclass
class Streak:
    """The last result and how many times in a row it came (the kubelet's resultRun)."""

    last: bool | None = None
    count: int = 0

    def add(self, ok: bool) -> int:
        self.count = self.count + 1 if ok is self.last else 1
        self.last = ok
        return self.count


@dataclass(frozen=True)
class Step:
    """What one observation or result changed: `changed` (ready or started flipped, or was
    first set), `kill` (stop the container: the kind whose failures asked for it)."""

    changed: bool = False
    kill: str = ""
    due: Mapping[str, float] = field(default_factory=dict)  # a new run: each probe's first due time


@dataclass
class ContainerProbes:
    """The probes of one container and their verdicts. `ready` matters only with a
    readiness probe, `started` only with a startup probe."""

    container: str
    probes: Mapping[str, Probe]  # by kind
    run: RunId | None = None
    running: bool = False
    started: bool = False
    ready: bool = False
    held: set[str] = field(default_factory=set)  # kinds that asked for a kill this run
    streaks: dict[str, Streak] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.started = STARTUP not in self.probes

    def see(self, view: RunView, *, at: float) -> Step:
        """Take in the container's facts. A run that stopped is neither ready nor started;
        a new run starts over, its probes due after their initial delay from its start."""
        before = (self.ready, self.started)
        if not view.running:
            self.running = False
            self.ready = False
            self.started = self.started and STARTUP not in self.probes
            return Step(changed=(self.ready, self.started) != before)
        if view.run == self.run and self.running:
            return Step()
        new_run = view.run != self.run
        self.running, self.run = True, view.run
        if not new_run:
            return Step(changed=(self.ready, self.started) != before)
        self.ready, self.started = False, STARTUP not in self.probes
        self.held.clear()
        self.streaks.clear()
        due = {kind: at + max(0.0, probe.initial_delay - view.age) for kind, probe in self.probes.items()}
        return Step(changed=(self.ready, self.started) != before, due=due)

    def active(self, kind: str) -> bool:
        """Does `kind` run now? Only while running, not held, and in the startup order."""
        if not self.running or kind in self.held or kind not in self.probes:
            return False
        return not self.started if kind == STARTUP else self.started

    def record(self, kind: str, ok: bool) -> Step:
        """One result of `kind` for the current run: thresholds counted, verdicts flipped."""
        probe = self.probes[kind]
        count = self.streaks.setdefault(kind, Streak()).add(ok)
        if ok and count < probe.success_threshold or not ok and count < probe.failure_threshold:
            return Step()
        if kind == READINESS:
            changed = self.ready is not ok
            self.ready = ok
            return Step(changed=changed)
        if ok:
            changed = kind == STARTUP and not self.started
            self.started = self.started or kind == STARTUP
            return Step(changed=changed)
        self.held.add(kind)  # liveness or startup failed: the container is killed, then runs again
        self.streaks.pop(kind, None)
        return Step(kill=kind)

    @property
    def probed_kinds(self) -> tuple[str, ...]:
        return tuple(kind for kind in (STARTUP, READINESS, LIVENESS) if kind in self.probes)
