"""status_from_containers(): per-container facts to the Pod's status, phase and conditions, as
the kubelet derives them; each row is also read back as `kubectl get` prints it (STATUS and
READY, from the API server's printer in devcluster.tables)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from devcluster import tables
from providers.base import ClaimName, Instance, InstanceId, InstanceState
from providers.shape import ContainerFacts, ContainerState
from vnode.model.containerstatus import pod_phase, status_from_containers, uses_container_facts
from vnode.model.status import RunView, Verdicts

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
EARLIER = NOW - timedelta(minutes=1)
W, R, T = ContainerState.WAITING, ContainerState.RUNNING, ContainerState.TERMINATED
BACKOFF = "back-off 10s restarting failed container=x pod=p_default(u)"


def make_pod(
    *, policy: str = "Always", init: int = 1, sidecar: bool = False, apps: int = 2, **extra: Any
) -> dict[str, Any]:
    """A Pod with `init` ordinary init containers (`init0`...), an optional sidecar `side`
    (after them) and `apps` app containers (`app0`...); `extra` overrides container keys by name."""
    inits: list[dict[str, Any]] = [{"name": f"init{i}", "image": "busybox"} for i in range(init)]
    if sidecar:
        inits.append({"name": "side", "image": "busybox", "restartPolicy": "Always"})
    containers = [{"name": f"app{i}", "image": "busybox"} for i in range(apps)]
    for container in inits + containers:
        container.update(extra.get(container["name"], {}))
    spec: dict[str, Any] = {"restartPolicy": policy, "containers": containers}
    if inits:
        spec["initContainers"] = inits
    return {"metadata": {"name": "p", "namespace": "default", "uid": "u"}, "spec": spec, "status": {}}


def fact(
    name: str, state: ContainerState, code: int | None = None, *, init: bool = False, runs: int = 1
) -> ContainerFacts:
    return ContainerFacts(
        name=name,
        state=state,
        init=init,
        started_at=EARLIER if state is not W else None,
        finished_at=NOW if state is T else None,
        exit_code=code,
        runs=runs if state is not W else 0,
    )


def instance(*facts: ContainerFacts, state: InstanceState = InstanceState.RUNNING) -> Instance:
    return Instance(InstanceId("i-1"), ClaimName("c"), state, EARLIER, started_at=EARLIER, containers=facts)


def kubectl_columns(pod: dict[str, Any], status: dict[str, Any]) -> tuple[str, str]:
    """(READY, STATUS) as `kubectl get pod` shows them."""
    cells = tables.to_table("Pod", [{**pod, "status": status}], resource_version="1", now=NOW)["rows"][0]["cells"]
    return cells[1], cells[2]


def conditions_of(status: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status["conditions"]}


def states_of(status: dict[str, Any], key: str) -> dict[str, str]:
    """container -> its state word, with the waiting/terminated reason."""
    result = {}
    for entry in status.get(key) or []:
        word, detail = next(iter(entry["state"].items()))
        result[entry["name"]] = f"{word}:{detail.get('reason', '')}" if word != "running" else word
    return result


INIT_OK = fact("init0", T, 0, init=True)
CASES = [
    # (row, policy, facts, views, phase, READY, STATUS, Initialized)
    ("init running", "Always", [fact("init0", R, init=True)], {}, "Pending", "0/2", "Init:0/1", "False"),
    ("init failed under Never", "Never", [fact("init0", T, 2, init=True)], {}, "Failed", "0/2", "Init:Error", "False"),
    ("init failed, restarts at once", "OnFailure", [fact("init0", T, 2, init=True)], {"init0": RunView(again=True)},
     "Pending", "0/2", "Init:Error", "False"),
    ("init in its back-off", "Always", [fact("init0", T, 2, init=True)],
     {"init0": RunView(1, {"exitCode": 2, "reason": "Error"}, again=True, waiting=BACKOFF)},
     "Pending", "0/2", "Init:CrashLoopBackOff", "False"),
    ("init done, apps not started", "Always", [INIT_OK, fact("app0", W), fact("app1", W)], {},
     "Pending", "0/2", "PodInitializing", "True"),
    ("every app running", "Always", [INIT_OK, fact("app0", R), fact("app1", R)], {},
     "Running", "2/2", "Running", "True"),
    ("one app completed, one running", "OnFailure", [INIT_OK, fact("app0", T, 0), fact("app1", R)], {},
     "Running", "1/2", "NotReady", "True"),
    ("every app completed", "Never", [INIT_OK, fact("app0", T, 0), fact("app1", T, 0)], {},
     "Succeeded", "0/2", "Completed", "True"),
    ("one app failed under Never", "Never", [INIT_OK, fact("app0", T, 1), fact("app1", T, 0)], {},
     "Failed", "0/2", "Error", "True"),
    ("an app in its back-off", "Always", [INIT_OK, fact("app0", T, 1), fact("app1", R)],
     {"app0": RunView(2, {"exitCode": 1, "reason": "Error"}, again=True, waiting=BACKOFF)},
     "Running", "1/2", "CrashLoopBackOff", "True"),
    ("every app ended, all run again", "Always", [INIT_OK, fact("app0", T, 1), fact("app1", T, 0)],
     {"app0": RunView(again=True), "app1": RunView(again=True)}, "Running", "0/2", "Error", "True"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("policy", "facts", "views", "phase", "ready", "shown", "initialized"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_each_combination_of_container_facts_gives_the_kubelets_phase_and_what_kubectl_shows(
    policy: str,
    facts: list[ContainerFacts],
    views: dict[str, RunView],
    phase: str,
    ready: str,
    shown: str,
    initialized: str,
) -> None:
    pod = make_pod(policy=policy)
    status = status_from_containers(pod, instance(*facts), now=NOW, views=views, verdicts=Verdicts())
    assert status["phase"] == phase
    assert kubectl_columns(pod, status) == (ready, shown)
    assert conditions_of(status)["Initialized"] == initialized
    everything_ready = ready == "2/2"
    assert conditions_of(status)["Ready"] == conditions_of(status)["ContainersReady"] == str(everything_ready)


def test_containers_not_started_wait_in_pod_initializing_and_initialized_names_the_incomplete_ones() -> None:
    pod = make_pod(init=2)
    waiting = instance(state=InstanceState.PROVISIONING)
    assert uses_container_facts(pod, waiting), "a Pod with init containers is mapped container by container"
    status = status_from_containers(pod, waiting, now=NOW, views={}, verdicts=Verdicts())
    assert states_of(status, "initContainerStatuses") == {"init0": "waiting:PodInitializing",
                                                          "init1": "waiting:PodInitializing"}  # fmt: skip
    assert states_of(status, "containerStatuses") == {
        "app0": "waiting:PodInitializing",
        "app1": "waiting:PodInitializing",
    }
    initialized = next(c for c in status["conditions"] if c["type"] == "Initialized")
    assert (initialized["reason"], initialized["message"]) == (
        "ContainersNotInitialized",
        "containers with incomplete status: [init0 init1]",
    )
    assert kubectl_columns(pod, status) == ("0/2", "Init:0/2") and status["phase"] == "Pending"


def test_a_pod_without_init_containers_waits_in_container_creating() -> None:
    pod = make_pod(init=0)
    status = status_from_containers(
        pod, instance(fact("app0", R), fact("app1", W)), now=NOW, views={}, verdicts=Verdicts()
    )
    assert states_of(status, "containerStatuses") == {"app0": "running", "app1": "waiting:ContainerCreating"}
    assert "initContainerStatuses" not in status
    assert status["phase"] == "Pending" and conditions_of(status)["Initialized"] == "True"
    assert kubectl_columns(pod, status) == ("1/2", "ContainerCreating")


def test_each_container_carries_its_own_restart_count_last_state_and_times() -> None:
    pod = make_pod(init=0)
    last = {"exitCode": 3, "reason": "Error", "finishedAt": "2026-12-01T11:58:00Z"}
    views = {"app0": RunView(restarts=2, last=last)}
    status = status_from_containers(pod, instance(fact("app0", R, runs=3), fact("app1", T, 0)), now=NOW, views=views,
                                    verdicts=Verdicts())  # fmt: skip
    app0, app1 = status["containerStatuses"]
    assert (app0["restartCount"], app0["lastState"], app0["started"]) == (2, {"terminated": last}, True)
    assert app0["state"] == {"running": {"startedAt": "2026-12-01T11:59:00Z"}}
    assert app1["restartCount"] == 0 and "lastState" not in app1 and app1["started"] is False
    assert app1["state"]["terminated"] == {"exitCode": 0, "reason": "Completed", "startedAt": "2026-12-01T11:59:00Z",
                                           "finishedAt": "2026-12-01T12:00:00Z"}  # fmt: skip
    assert app0["containerID"] == "nebula://i-1/app0" and app0["image"] == "busybox"


def test_an_exit_reason_from_the_provider_is_the_terminated_reason() -> None:
    pod = make_pod(init=0, apps=1, policy="Never")
    killed = ContainerFacts(
        "app0", T, exit_code=137, exit_reason="OOMKilled", started_at=EARLIER, finished_at=NOW, runs=1
    )
    status = status_from_containers(pod, instance(killed), now=NOW, views={}, verdicts=Verdicts())
    assert status["containerStatuses"][0]["state"]["terminated"]["reason"] == "OOMKilled"
    assert status["phase"] == "Failed" and kubectl_columns(pod, status) == ("0/1", "OOMKilled")


def test_a_readiness_probe_holds_ready_until_its_verdict_passes() -> None:
    pod = make_pod(init=0, app1={"readinessProbe": {"exec": {"command": ["true"]}}})
    facts = instance(fact("app0", R), fact("app1", R))
    unknown = status_from_containers(pod, facts, now=NOW, views={}, verdicts=Verdicts())
    failing = status_from_containers(pod, facts, now=NOW, views={}, verdicts=Verdicts(ready={"app1": False}))
    passing = status_from_containers(pod, facts, now=NOW, views={}, verdicts=Verdicts(ready={"app1": True}))
    for status in (unknown, failing):
        assert [c["ready"] for c in status["containerStatuses"]] == [True, False]
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"], ready["message"]) == (
            "False",
            "ContainersNotReady",
            "containers with unready status: [app1]",
        )
        assert kubectl_columns(pod, status) == ("1/2", "Running")
    assert conditions_of(passing)["Ready"] == "True" and kubectl_columns(pod, passing) == ("2/2", "Running")


def test_a_startup_probe_holds_started_and_ready_until_it_passes() -> None:
    pod = make_pod(init=0, apps=1, app0={"startupProbe": {"tcpSocket": {"port": 80}}})
    facts = instance(fact("app0", R))
    before = status_from_containers(pod, facts, now=NOW, views={}, verdicts=Verdicts())["containerStatuses"][0]
    after = status_from_containers(pod, facts, now=NOW, views={}, verdicts=Verdicts(started={"app0": True}))
    assert (before["started"], before["ready"]) == (False, False)
    assert (after["containerStatuses"][0]["started"], after["containerStatuses"][0]["ready"]) == (True, True)


def test_a_started_sidecar_initializes_the_pod_and_must_be_ready_for_the_pod_to_be() -> None:
    pod = make_pod(sidecar=True, apps=1, side={"readinessProbe": {"httpGet": {"port": 80}}})
    starting = instance(INIT_OK, fact("side", R, init=True))
    running = instance(INIT_OK, fact("side", R, init=True), fact("app0", R))
    first = status_from_containers(pod, starting, now=NOW, views={}, verdicts=Verdicts())
    assert conditions_of(first)["Initialized"] == "True" and first["phase"] == "Pending"  # app0 still waits
    second = status_from_containers(pod, running, now=NOW, views={}, verdicts=Verdicts())
    assert second["phase"] == "Running" and conditions_of(second)["Ready"] == "False"
    ready = status_from_containers(pod, running, now=NOW, views={}, verdicts=Verdicts(ready={"side": True}))
    assert conditions_of(ready)["Ready"] == "True"


def test_a_sidecar_that_has_not_started_keeps_the_pod_initializing() -> None:
    pod = make_pod(sidecar=True, apps=1, side={"startupProbe": {"exec": {"command": ["true"]}}})
    status = status_from_containers(pod, instance(INIT_OK, fact("side", R, init=True)), now=NOW, views={},
                                    verdicts=Verdicts())  # fmt: skip
    assert conditions_of(status)["Initialized"] == "False" and status["phase"] == "Pending"


def test_a_pod_whose_apps_finished_succeeds_even_if_its_sidecar_was_stopped_with_a_signal() -> None:
    pod = make_pod(sidecar=True, apps=1, policy="OnFailure")
    facts = instance(INIT_OK, fact("side", T, 137, init=True), fact("app0", T, 0), state=InstanceState.SUCCEEDED)
    status = status_from_containers(pod, facts, now=NOW, views={}, verdicts=Verdicts())
    assert status["phase"] == "Succeeded"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PodCompleted")


@pytest.mark.parametrize(
    ("policy", "terminal", "phase"),
    [("Always", False, "Running"), ("OnFailure", False, "Running"), ("Never", False, "Failed"),
     ("Always", True, "Failed")],
)  # fmt: skip
def test_ended_app_containers_keep_the_pod_running_unless_none_will_run_again(
    policy: str, terminal: bool, phase: str
) -> None:
    apps = [{"name": "a", "state": {"terminated": {"exitCode": 1}}, "ready": False}]
    pod = make_pod(policy=policy, init=0, apps=1)
    pod["spec"]["containers"] = [{"name": "a"}]
    assert pod_phase(pod, [], apps, terminal=terminal) == phase
