"""vnode.phases.serving picks the Pod's container: any app or init container where the provider runs
several, the first app container only where it runs one; the kubelet's answers for a
container that has not started and for `--previous` of a container that never restarted."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from providers import errors
from providers.base import (
    Capabilities,
    ClaimName,
    Instance,
    InstanceId,
    InstanceState,
    LogOptions,
    Provider,
)
from providers.shape import ContainerFacts, ContainerState, Shapes
from tests.support.rigs.offline import NoApi
from vnode.model import assess
from vnode.model.runs import Rules
from vnode.model.tracking import TrackedMap
from vnode.phases.context import PhaseContext, Traits
from vnode.phases.inventory import Inventory
from vnode.phases.serving import Serving

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


class Recorder:
    """A provider's streaming side that records which container each call was for."""

    name = "rec"

    def __init__(self, *, several: bool) -> None:
        self.several = several
        self.calls: list[tuple[str, str]] = []

    def capabilities(self) -> Capabilities:
        return Capabilities(shapes=Shapes(several_containers=self.several, init_containers=self.several))

    def logs(self, instance_id: InstanceId, options: LogOptions) -> Any:
        self.calls.append(("logs", options.container))
        return "stream"

    def exec(
        self, instance_id: InstanceId, command: Sequence[str], *, tty: bool, stdin: bool, container: str = ""
    ) -> Any:
        self.calls.append(("exec", container))
        return "process"

    def attach(self, instance_id: InstanceId, *, stdin: bool, tty: bool, container: str = "") -> Any:
        self.calls.append(("attach", container))
        return "process"


def serving_for(recorder: Recorder, *facts: ContainerFacts, restarts: dict[str, int] | None = None) -> Serving:
    pod = {
        "metadata": {"name": "p", "namespace": "default", "uid": "u"},
        "spec": {
            "initContainers": [{"name": "setup", "image": "busybox"}],
            "containers": [{"name": "web", "image": "busybox"}, {"name": "worker", "image": "busybox"}],
        },
    }
    tracked = TrackedMap()
    entry = tracked.track(pod)
    entry.instance_id = InstanceId("i-1")
    for name, count in (restarts or {}).items():
        runs = entry.container_runs(name)
        assert runs is not None
        runs.restarts = count
    instance = Instance(InstanceId("i-1"), ClaimName("c"), InstanceState.RUNNING, NOW, containers=facts)
    assess.observe(entry, instance, now=NOW, at=0.0, rules=Rules(in_place=True, bills=False))
    provider = cast(Provider, recorder)
    offline: Any = NoApi()  # serving never writes, reads the cluster, nor tells an Event
    context = PhaseContext(
        provider,
        tracked=tracked,
        inventory=Inventory(provider),
        writer=offline,
        reader=offline,
        events=offline,
        traits=Traits(provider),
        now=lambda: NOW,
    )
    return Serving(context)


SETUP_DONE = ContainerFacts("setup", ContainerState.TERMINATED, init=True, exit_code=0, runs=1)
RUNNING = (SETUP_DONE, ContainerFacts("web", ContainerState.RUNNING, runs=1),
           ContainerFacts("worker", ContainerState.RUNNING, runs=2))  # fmt: skip


def test_every_container_of_the_pod_is_served_by_name_where_the_provider_runs_several() -> None:
    recorder = Recorder(several=True)
    serving = serving_for(recorder, *RUNNING)
    serving.get_container_logs("default", "p", "setup", LogOptions())
    serving.run_in_container("default", "p", "worker", ["ls"], tty=False, stdin=False)
    serving.attach_to_container("default", "p", "web", tty=False, stdin=True)
    assert recorder.calls == [("logs", "setup"), ("exec", "worker"), ("attach", "web")]
    with pytest.raises(errors.NotFound, match='container "nope" not found in pod "default/p"'):
        serving.kubelet_instance("default", "p", "nope", capability="logs")


def test_only_the_first_app_container_is_served_where_the_provider_runs_one() -> None:
    recorder = Recorder(several=False)
    serving = serving_for(recorder, *RUNNING)
    serving.get_container_logs("default", "p", "web", LogOptions())
    serving.run_in_container("default", "p", "web", ["ls"], tty=False, stdin=False)
    assert recorder.calls == [("logs", ""), ("exec", "")], "the provider's one container: no name passed"
    for other in ("worker", "setup"):
        with pytest.raises(errors.NotFound, match=f'container "{other}" not found'):
            serving.kubelet_instance("default", "p", other, capability="exec")


@pytest.mark.parametrize(
    ("facts", "reason"),
    [((ContainerFacts("setup", ContainerState.RUNNING, init=True, runs=1),), "PodInitializing"),
     ((SETUP_DONE, ContainerFacts("web", ContainerState.WAITING)), "PodInitializing")],
)  # fmt: skip
def test_logs_of_a_container_that_has_not_started_are_the_kubelets_bad_request(
    facts: tuple[ContainerFacts, ...], reason: str
) -> None:
    recorder = Recorder(several=True)
    serving = serving_for(recorder, *facts)
    with pytest.raises(errors.InvalidRequest) as raised:
        serving.get_container_logs("default", "p", "web", LogOptions())
    assert str(raised.value) == f'container "web" in pod "p" is waiting to start: {reason}'
    assert recorder.calls == []


def test_previous_logs_follow_each_containers_own_restart_count() -> None:
    recorder = Recorder(several=True)
    serving = serving_for(recorder, *RUNNING, restarts={"worker": 1})
    serving.get_container_logs("default", "p", "worker", LogOptions(previous=True))
    assert recorder.calls == [("logs", "worker")]
    with pytest.raises(errors.InvalidRequest, match='previous terminated container "web" in pod "p" not found'):
        serving.get_container_logs("default", "p", "web", LogOptions(previous=True))
