"""The prober's schedule and verdicts on an injected clock, probes run at once (no threads):
periods, initial delays, thresholds, the startup gate, kills, and a new run starting over.

The executor is a fake whose commands are the fake provider's scripted processes: `true`
succeeds, `cat /tmp/healthy` fails with cat's message, as a container without the file would.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kube import names
from providers.base import ClaimName, Instance, InstanceId, InstanceState, Process
from providers.fake.process import ScriptedProcess
from providers.shape import ContainerFacts, ContainerState
from tests.support.factories import make_pod
from tests.support.rigs.offline import KeptEvents
from vnode.model import assess
from vnode.model.tracking import Tracked, TrackedMap
from vnode.probing.prober import Prober

INSTANCE = InstanceId("i-probe")
MISSING = "cat: /tmp/healthy: No such file or directory"


class Clock:
    def __init__(self) -> None:
        self.seconds = 1000.0

    def monotonic(self) -> float:
        return self.seconds

    def now(self) -> datetime:
        return datetime(2026, 12, 1, tzinfo=UTC) + timedelta(seconds=self.seconds)

    def advance(self, seconds: float) -> None:
        self.seconds += seconds


class ScriptedExecutor:
    """Exec into containers whose health the test sets; counts the probes run."""

    name = "probe-test"

    def __init__(self) -> None:
        self.healthy: dict[str, bool] = {}
        self.calls: list[str] = []  # container of each exec

    def exec(
        self, instance_id: InstanceId, command: Sequence[str], *, tty: bool, stdin: bool, container: str = ""
    ) -> Process:
        self.calls.append(container)
        argv = ["true"] if self.healthy.get(container, True) else ["cat", "/tmp/healthy"]
        return ScriptedProcess(argv, tty=tty, stdin=stdin)


class StoppingExecutor(ScriptedExecutor):
    """One that can also stop a container (a ContainerStopper)."""

    def __init__(self) -> None:
        super().__init__()
        self.stopped: list[tuple[InstanceId, str, float]] = []

    def stop_container(self, instance_id: InstanceId, container: str, *, grace: float) -> None:
        self.stopped.append((instance_id, container, grace))


@dataclasses.dataclass
class Rig:
    prober: Prober
    entry: Tracked
    tracked: TrackedMap
    clock: Clock
    executor: ScriptedExecutor
    events: KeptEvents
    changes: list[dict[str, bool]]

    def step(self, seconds: float = 0.0) -> None:
        self.clock.advance(seconds)
        self.prober.step()

    def show(self, **changes: Any) -> None:
        """The poll loop sees new facts for the instance."""
        assert self.entry.last_instance is not None
        instance = dataclasses.replace(self.entry.last_instance, **changes)
        assess.observe(self.entry, instance, now=self.clock.now(), at=self.clock.monotonic())

    def told(self, reason: str) -> list[str]:
        return [message for _, _, told_reason, message in self.events.told if told_reason == reason]


EXEC = {"exec": {"command": ["cat", "/tmp/healthy"]}}


def verdicts(entry: Tracked) -> dict[str, bool]:
    return {**entry.probe_verdicts.ready, **{f"started:{k}": v for k, v in entry.probe_verdicts.started.items()}}


def rig(
    make: Callable[[], ScriptedExecutor] = StoppingExecutor,
    *,
    started_ago: float = 0.0,
    pod: dict[str, Any] | None = None,
    **probes: dict[str, Any],
) -> Rig:
    clock = Clock()
    executor = make()
    events = KeptEvents()
    container = {f"{kind}Probe": {**EXEC, **probe} for kind, probe in probes.items()}
    pod = pod or make_pod("web", namespace="default", uid="u-1", container=container)
    tracked = TrackedMap()
    instance = Instance(
        INSTANCE,
        ClaimName("claim"),
        InstanceState.RUNNING,
        created_at=clock.now(),
        started_at=clock.now() - timedelta(seconds=started_ago),
        endpoint="127.0.0.1",
    )
    entry = assess.adopt(tracked, pod, instance, at=clock.monotonic(), now=clock.now())
    changes: list[dict[str, bool]] = []
    prober = Prober(
        executor,  # type: ignore[arg-type]
        tracked=tracked,
        events=events,
        on_change=lambda e: changes.append(verdicts(e)),
        monotonic=clock.monotonic,
        now=clock.now,
        submit=lambda job: job(),
    )
    return Rig(prober, entry, tracked, clock, executor, events, changes)


def test_readiness_is_false_until_the_first_success_then_true() -> None:
    r = rig(readiness={})
    r.executor.healthy["main"] = True
    r.step()
    assert r.changes == [{"main": False}, {"main": True}]
    assert r.entry.probe_verdicts.ready == {"main": True}


def test_a_probe_runs_once_per_period_and_not_before() -> None:
    r = rig(readiness={"periodSeconds": 5})
    r.step()
    r.step(4.9)
    assert len(r.executor.calls) == 1
    r.step(0.1)
    r.step(5)
    assert len(r.executor.calls) == 3


def test_the_initial_delay_counts_from_the_containers_start() -> None:
    r = rig(started_ago=4, readiness={"initialDelaySeconds": 10})
    r.step()
    r.step(5.9)
    assert r.executor.calls == []
    r.step(0.1)
    assert r.executor.calls == ["main"] and r.entry.probe_verdicts.ready == {"main": True}


def test_readiness_flips_only_after_its_thresholds_in_a_row() -> None:
    r = rig(readiness={"periodSeconds": 1, "successThreshold": 2, "failureThreshold": 3})
    r.step()
    assert r.entry.probe_verdicts.ready == {"main": False}  # one success of two
    r.step(1)
    assert r.entry.probe_verdicts.ready == {"main": True}
    r.executor.healthy["main"] = False
    r.step(1)
    r.step(1)
    r.executor.healthy["main"] = True
    r.step(1)  # two failures, then a success: the streak is broken
    r.executor.healthy["main"] = False
    r.step(1)
    r.step(1)
    assert r.entry.probe_verdicts.ready == {"main": True}
    r.step(1)
    assert r.entry.probe_verdicts.ready == {"main": False}
    assert r.told(names.EVENT_UNHEALTHY) == [f"Readiness probe failed: {MISSING}"] * 5


def test_readiness_and_liveness_wait_until_the_startup_probe_passes() -> None:
    r = rig(startup={"periodSeconds": 1, "failureThreshold": 10}, readiness={"periodSeconds": 10}, liveness={})
    r.executor.healthy["main"] = False
    r.step()
    r.step(1)
    assert len(r.executor.calls) == 2 and r.entry.probe_verdicts.started == {"main": False}
    r.executor.healthy["main"] = True
    r.step(1)  # startup passes; readiness is triggered at once, as the kubelet does
    assert r.entry.probe_verdicts.started == {"main": True} and r.entry.probe_verdicts.ready == {"main": False}
    r.step()
    assert r.entry.probe_verdicts.ready == {"main": True}
    r.step(1)
    assert len(r.executor.calls) == 4, "startup is not probed once it passed"


def test_a_startup_probe_that_fails_its_threshold_kills_the_container_as_liveness_does() -> None:
    r = rig(startup={"periodSeconds": 1, "failureThreshold": 2})
    r.executor.healthy["main"] = False
    r.step()
    r.step(1)
    assert r.told(names.EVENT_KILLING) == ["Container main failed startup probe, will be restarted"]
    assert r.executor.stopped == [(INSTANCE, "main", 30.0)]  # type: ignore[attr-defined]
    assert r.told(names.EVENT_UNHEALTHY) == [f"Startup probe failed: {MISSING}"] * 2


@pytest.mark.parametrize(
    ("probe", "pod_grace", "grace"),
    [({}, None, 30.0), ({}, 45, 45.0), ({"terminationGracePeriodSeconds": 7}, 45, 7.0)],
)
def test_liveness_failures_stop_the_container_with_the_grace_and_tell_unhealthy_and_killing(
    probe: dict[str, Any], pod_grace: int | None, grace: float
) -> None:
    liveness = {**EXEC, "periodSeconds": 1, **probe}
    spec: dict[str, Any] = {} if pod_grace is None else {"terminationGracePeriodSeconds": pod_grace}
    r = rig(pod=make_pod("web", namespace="default", uid="u-1", container={"livenessProbe": liveness}, **spec))
    r.executor.healthy["main"] = False
    r.step()
    r.step(1)
    assert r.executor.stopped == []  # type: ignore[attr-defined]
    r.step(1)
    assert r.executor.stopped == [(INSTANCE, "main", grace)]  # type: ignore[attr-defined]
    assert r.told(names.EVENT_UNHEALTHY) == [f"Liveness probe failed: {MISSING}"] * 3
    assert r.told(names.EVENT_KILLING) == ["Container main failed liveness probe, will be restarted"]


def test_after_a_kill_liveness_holds_until_a_new_run_which_starts_over_after_its_initial_delay() -> None:
    r = rig(liveness={"periodSeconds": 1, "failureThreshold": 1, "initialDelaySeconds": 3}, started_ago=3)
    r.executor.healthy["main"] = False
    r.step()
    r.step(1)
    r.step(1)
    assert len(r.executor.calls) == 1 and len(r.executor.stopped) == 1  # type: ignore[attr-defined]
    r.show(runs=2, started_at=r.clock.now())  # the restart policy ran it again
    r.executor.healthy["main"] = True
    r.step(1)
    r.step(1.9)
    assert len(r.executor.calls) == 1, "the new run waits its initial delay from its start"
    r.step(0.1)
    assert len(r.executor.calls) == 2 and len(r.executor.stopped) == 1  # type: ignore[attr-defined]


def test_a_new_run_resets_ready_and_started() -> None:
    r = rig(startup={"periodSeconds": 1}, readiness={"periodSeconds": 1})
    r.step()
    r.step()
    assert r.entry.probe_verdicts.ready == {"main": True} and r.entry.probe_verdicts.started == {"main": True}
    r.show(runs=2)
    r.executor.healthy["main"] = False
    r.step(1)
    assert r.entry.probe_verdicts.ready == {"main": False} and r.entry.probe_verdicts.started == {"main": False}
    assert r.changes[-1] == {"main": False, "started:main": False}


def test_a_container_that_stopped_is_not_ready_and_not_probed() -> None:
    r = rig(readiness={"periodSeconds": 1})
    r.step()
    assert r.entry.probe_verdicts.ready == {"main": True}
    r.show(state=InstanceState.FAILED, exit_code=1, finished_at=r.clock.now())
    r.step(1)
    r.step(1)
    assert r.entry.probe_verdicts.ready == {"main": False} and len(r.executor.calls) == 1


def test_without_a_container_stopper_a_failed_liveness_probe_is_told_and_nothing_is_stopped() -> None:
    r = rig(ScriptedExecutor, liveness={"failureThreshold": 1})
    r.executor.healthy["main"] = False
    r.step()
    assert r.told(names.EVENT_KILLING) == []
    assert r.told(names.EVENT_UNHEALTHY) == [
        f"Liveness probe failed: {MISSING}",
        "Container main failed liveness probe and cannot be restarted: the provider cannot stop one container",
    ]


def test_each_container_is_probed_by_its_own_facts_and_a_container_without_a_readiness_probe_is_untouched() -> None:
    readiness = {**EXEC, "periodSeconds": 1}
    pod = make_pod("web", namespace="default", uid="u-1", container={"readinessProbe": readiness})
    pod["spec"]["containers"] += [
        {"name": "metrics", "image": "x", "readinessProbe": readiness},
        {"name": "plain", "image": "x"},
    ]
    r = rig(pod=pod)
    facts = (
        ContainerFacts("main", ContainerState.RUNNING, runs=1, started_at=r.clock.now()),
        ContainerFacts("metrics", ContainerState.WAITING),
        ContainerFacts("plain", ContainerState.RUNNING, runs=1),
    )
    r.show(containers=facts)
    r.step()
    assert r.executor.calls == ["main"] and r.entry.probe_verdicts.ready == {"main": True, "metrics": False}
    r.show(containers=(facts[0], ContainerFacts("metrics", ContainerState.RUNNING, runs=1), facts[2]))
    r.step(1)
    assert sorted(r.executor.calls) == ["main", "main", "metrics"]
    assert r.entry.probe_verdicts.ready == {"main": True, "metrics": True}


def test_a_pod_with_a_probe_the_api_server_would_refuse_is_told_once_and_not_probed() -> None:
    r = rig(readiness={"periodSeconds": -1})
    r.step()
    r.step(5)
    assert r.executor.calls == [] and r.entry.probe_verdicts.ready == {}
    assert r.told(names.EVENT_UNHEALTHY) == [
        "probes not run: spec.containers[0].readinessProbe.periodSeconds: must be greater than or equal to 0"
    ]


def test_a_pod_no_longer_tracked_is_no_longer_probed() -> None:
    r = rig(readiness={"periodSeconds": 1})
    r.step()
    r.tracked.forget(r.entry)
    r.step(1)
    r.step(1)
    assert len(r.executor.calls) == 1
