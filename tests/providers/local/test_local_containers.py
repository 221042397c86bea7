"""Several containers in one local instance, with real processes: init containers in order,
native sidecars, every app container its own process group and log, and container selection
for logs, exec, attach, restart and stop."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from providers.base import ClaimName, Instance, InstanceId, InstanceState, LogOptions, PodSpec, ProvisionRequest
from providers.errors import InvalidRequest, NotFound
from providers.local import LocalProvider, folder, pids, pod, sequence
from providers.local.status import Observation
from providers.shape import ContainerFacts, ContainerSpec, ContainerState
from tests.support.factories import make_pod_spec
from tests.support.polling import read_to_end, wait_for

CLAIM = ClaimName("ns-pod-abcdefghij")
SECRET = "containers-s3cr3t"


def sh(name: str, script: str, **fields: object) -> ContainerSpec:
    return ContainerSpec(name, args=(script,), **fields)  # type: ignore[arg-type]


def pod_of(apps: tuple[ContainerSpec, ...], inits: tuple[ContainerSpec, ...] = (), **fields: object) -> PodSpec:
    first = apps[0]
    return make_pod_spec(container=first.name, args=first.args, containers=apps, init_containers=inits, **fields)


def start(provider: LocalProvider, pod: PodSpec, **request: object) -> InstanceId:
    env = {
        container.name: {"TOKEN": f"{SECRET}-{container.name}"} for container in (*pod.init_containers, *pod.containers)
    }
    made = ProvisionRequest(CLAIM, env={"TOKEN": SECRET}, container_env=env, **request)  # type: ignore[arg-type]
    return provider.provision(pod, made).instance_id


def facts(provider: LocalProvider, instance_id: InstanceId) -> dict[str, ContainerFacts]:
    instance = provider.get(instance_id)
    assert instance is not None
    return {container.name: container for container in instance.containers}


def when(provider: LocalProvider, instance_id: InstanceId, **states: ContainerState) -> dict[str, ContainerFacts]:
    """Wait until each named container is in its state; the facts then."""

    def met() -> dict[str, ContainerFacts] | None:
        now = facts(provider, instance_id)
        return now if all(now[name].state is state for name, state in states.items()) else None

    found: dict[str, ContainerFacts] = wait_for(met, what=f"containers {states}")
    return found


def instance_in(provider: LocalProvider, instance_id: InstanceId, *states: InstanceState) -> Instance:
    found: Instance = wait_for(
        lambda: (i := provider.get(instance_id)) is not None and i.state in states and i, what=f"state in {states}"
    )
    return found


def log_of(provider: LocalProvider, instance_id: InstanceId, container: str, **options: object) -> bytes:
    return read_to_end(provider.logs(instance_id, LogOptions(container=container, **options)))  # type: ignore[arg-type]


def workload(provider: LocalProvider, container: str) -> pids.ProcessIdentity:
    """The container's group leader, once recorded (RUNNING is read from its spawn on, a moment earlier)."""
    path = provider.root / CLAIM if container == "main" else provider.root / CLAIM / "containers" / container
    identity: pids.ProcessIdentity = wait_for(
        lambda: pids.ProcessIdentity.from_json((folder.read_json(path / folder.RUN_FILE) or {}).get("workload")),
        what=f"the leader of {container}",
    )
    return identity


TERMINATED, RUNNING, WAITING = ContainerState.TERMINATED, ContainerState.RUNNING, ContainerState.WAITING


def test_init_containers_run_in_order_to_completion_before_the_app_containers_start_together(
    provider: LocalProvider,
) -> None:
    inits = (
        sh("first", "echo first >> order"),
        sh("second", "echo second >> order; while [ ! -f go ]; do sleep 0.05; done"),
    )
    apps = (sh("main", "echo main >> order; exec sleep 300"), sh("helper", "echo helper >> order; exec sleep 300"))
    instance_id = start(provider, pod_of(apps, inits))
    now = when(provider, instance_id, first=TERMINATED, second=RUNNING)
    assert [name for name in now] == ["first", "second", "main", "helper"]  # Pod order
    assert [c.init for c in now.values()] == [True, True, False, False]
    assert (now["main"].state, now["main"].runs, now["helper"].runs) == (WAITING, 0, 0)
    assert provider.get(instance_id).state is InstanceState.INITIALIZING  # type: ignore[union-attr]
    with pytest.raises(NotFound, match="container 'main' of instance .* has not started"):
        provider.logs(instance_id, LogOptions(container="main"))
    (provider.root / CLAIM / "go").touch()
    now = when(provider, instance_id, second=TERMINATED, main=RUNNING, helper=RUNNING)
    lines = (provider.root / CLAIM / "order").read_text().split()
    assert lines[:2] == ["first", "second"] and sorted(lines[2:]) == ["helper", "main"]
    instance = provider.get(instance_id)
    assert instance is not None and instance.state is InstanceState.RUNNING and instance.runs == 1
    assert instance.started_at == now["main"].started_at and now["first"].exit_code == 0


def test_a_failing_init_container_holds_the_app_containers_until_it_is_restarted_and_succeeds(
    provider: LocalProvider,
) -> None:
    inits = (sh("setup", "echo try; [ -f tried ] && exit 0; touch tried; exit 5"),)
    instance_id = start(provider, pod_of((sh("main", "echo up; exec sleep 300"),), inits))
    failed = instance_in(provider, instance_id, InstanceState.FAILED)
    assert (failed.exit_code, failed.exit_reason) == (5, "Error") and "'setup'" in failed.message
    now = facts(provider, instance_id)
    assert (now["setup"].state, now["setup"].exit_code, now["setup"].runs) == (TERMINATED, 5, 1)
    assert (now["main"].state, now["main"].runs) == (WAITING, 0) and not (provider.root / CLAIM / "run.json").exists()
    provider.restart(instance_id, container="setup")
    assert facts(provider, instance_id)["setup"].runs == 2  # counted before restart returns
    now = when(provider, instance_id, setup=TERMINATED, main=RUNNING)
    assert now["setup"].exit_code == 0 and now["main"].runs == 1
    assert log_of(provider, instance_id, "setup", previous=True) == b"try\n"
    assert log_of(provider, instance_id, "setup") == b"try\n"
    instance_in(provider, instance_id, InstanceState.RUNNING)


def test_each_app_container_runs_as_its_own_process_group_with_its_own_log_and_env(provider: LocalProvider) -> None:
    apps = (sh("main", 'echo "main $TOKEN"; exec sleep 300'), sh("helper", 'echo "helper $TOKEN"; exec sleep 300'))
    instance_id = start(provider, pod_of(apps))
    when(provider, instance_id, main=RUNNING, helper=RUNNING)
    groups = {name: workload(provider, name) for name in ("main", "helper")}
    assert all(os.getpgid(leader.pid) == leader.pid for leader in groups.values())
    assert groups["main"].pid != groups["helper"].pid
    wait_for(lambda: log_of(provider, instance_id, "helper") == f"helper {SECRET}-helper\n".encode())
    assert log_of(provider, instance_id, "main") == f"main {SECRET}-main\n".encode()
    assert log_of(provider, instance_id, "") == log_of(provider, instance_id, "main")  # empty: the first app container
    with pytest.raises(NotFound, match="has no container 'nope'"):
        provider.logs(instance_id, LogOptions(container="nope"))


def test_exec_and_attach_reach_the_container_named_with_its_working_dir_and_env(
    provider: LocalProvider, tmp_path: Path
) -> None:
    workdir = tmp_path / "helper-dir"
    workdir.mkdir()
    helper = sh("helper", 'while read line; do echo "got $line"; done', stdin=True, working_dir=str(workdir))
    instance_id = start(provider, pod_of((sh("main", "exec sleep 300"), helper)))
    when(provider, instance_id, main=RUNNING, helper=RUNNING)
    process = provider.exec(instance_id, ["sh", "-c", 'printf "%s|%s" "$(pwd)" "$TOKEN"'], tty=False, stdin=False,
                            container="helper")  # fmt: skip
    assert read_to_end(process, read=process.read_stdout) == f"{workdir}|{SECRET}-helper".encode()
    process.close()
    attached = provider.attach(instance_id, stdin=True, tty=False, container="helper")
    attached.write_stdin(b"hello\n")
    out = b""
    while b"got hello\n" not in out:
        out += attached.read_stdout()
    attached.close()
    with pytest.raises(NotFound, match="has no container 'nope'"):
        provider.exec(instance_id, ["true"], tty=False, stdin=False, container="nope")
    with pytest.raises(NotFound, match="has no container 'nope'"):
        provider.attach(instance_id, stdin=False, tty=False, container="nope")


def test_restarting_one_container_keeps_the_others_running_and_keeps_its_previous_log(provider: LocalProvider) -> None:
    counting = 'echo x >> starts; n=$(wc -l < starts); echo "run $n"; [ "$n" -ge 2 ] && exec sleep 300; exit 3'
    instance_id = start(provider, pod_of((sh("main", "exec sleep 300"), sh("helper", counting))))
    ended = when(provider, instance_id, main=RUNNING, helper=TERMINATED)
    assert ended["helper"].exit_code == 3
    main = workload(provider, "main")
    with pytest.raises(InvalidRequest):
        provider.restart(instance_id, container="main")  # it has not ended
    provider.restart(instance_id, container="helper")
    now = when(provider, instance_id, main=RUNNING, helper=RUNNING)
    assert (now["helper"].runs, now["main"].runs) == (2, 1) and workload(provider, "main") == main
    assert pids.group_alive(main)
    wait_for(lambda: log_of(provider, instance_id, "helper") == b"run 2\n")
    assert log_of(provider, instance_id, "helper", previous=True) == b"run 1\n"
    with pytest.raises(NotFound, match="no previous run"):
        provider.logs(instance_id, LogOptions(container="main", previous=True))
    instance = provider.get(instance_id)
    assert instance is not None and instance.state is InstanceState.RUNNING and instance.runs == 1


def test_stop_container_sends_term_then_kills_with_137_and_leaves_the_others_running(provider: LocalProvider) -> None:
    stubborn = sh("helper", "trap '' TERM; echo up; while true; do sleep 0.05; done")
    instance_id = start(provider, pod_of((sh("main", "exec sleep 300"), stubborn)))
    when(provider, instance_id, main=RUNNING, helper=RUNNING)
    wait_for(lambda: log_of(provider, instance_id, "helper") == b"up\n")
    provider.stop_container(instance_id, "helper", grace=0.2)
    now = when(provider, instance_id, helper=TERMINATED)
    assert (now["helper"].exit_code, now["main"].state) == (137, RUNNING)
    provider.stop_container(instance_id, "helper", grace=0.2)  # not running: success, nothing done
    assert provider.get(instance_id).state is InstanceState.RUNNING  # type: ignore[union-attr]
    with pytest.raises(NotFound, match="has no container 'nope'"):
        provider.stop_container(instance_id, "nope", grace=0.2)


def test_sidecars_start_in_their_place_and_stop_after_the_app_containers_end_under_never(
    provider: LocalProvider,
) -> None:
    inits = (sh("proxy", "echo proxy >> order; exec sleep 300", sidecar=True), sh("setup", "echo setup >> order"))
    instance_id = start(provider, pod_of((sh("main", "echo main >> order"),), inits, restart_policy="Never"))
    done = instance_in(provider, instance_id, InstanceState.SUCCEEDED)
    now = {c.name: c for c in done.containers}
    assert done.exit_code == 0 and now["main"].exit_code == 0 and now["proxy"].state is TERMINATED
    assert now["proxy"].exit_code == 143 and now["proxy"].init  # TERM, as the kubelet stops a sidecar
    assert (provider.root / CLAIM / "order").read_text().split() == ["proxy", "setup", "main"]


def test_sidecars_keep_running_after_the_app_containers_end_under_always(provider: LocalProvider) -> None:
    inits = (sh("proxy", "exec sleep 300", sidecar=True),)
    instance_id = start(provider, pod_of((sh("main", "exit 0"),), inits, restart_policy="Always"))
    when(provider, instance_id, main=TERMINATED)
    supervisor = pids.ProcessIdentity.from_json(folder.read_json(provider.root / CLAIM / "launch.json")["supervisor"])
    assert supervisor is not None
    wait_for(lambda: not pids.is_alive(supervisor))  # the app's supervisor is done deciding
    assert facts(provider, instance_id)["proxy"].state is RUNNING
    assert provider.get(instance_id).state is InstanceState.RUNNING  # type: ignore[union-attr]


def test_a_single_container_instance_reports_its_one_container(provider: LocalProvider) -> None:
    instance_id = start(provider, make_pod_spec(container="only", args=("exit 2",)))
    instance = instance_in(provider, instance_id, InstanceState.FAILED)
    [only] = instance.containers
    assert (only.name, only.state, only.init, only.exit_code, only.runs) == ("only", TERMINATED, False, 2, 1)
    assert (only.started_at, only.finished_at) == (instance.started_at, instance.finished_at)
    spec = json.loads((provider.root / CLAIM / "instance.json").read_text())
    assert spec["containers"] == [{"name": "only", "kind": "app"}]


def test_container_names_of_a_pod_of_several_must_be_unique_dns_labels(provider: LocalProvider) -> None:
    with pytest.raises(InvalidRequest, match="'main' is not a DNS label unique in the Pod"):
        start(provider, pod_of((sh("main", "true"), sh("main", "true"))))
    with pytest.raises(InvalidRequest, match="neither command nor args"):
        start(provider, pod_of((sh("main", "true"),), (ContainerSpec("setup"),)))
    assert provider.list() == []


NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
LAUNCHED = {"supervisor": {"pid": 10, "start_ticks": 1}}
STARTED = {"started_at": "2026-01-01T11:59:00.000000000Z"}


def seen(name: str, how: str, kind: str = "app", *, may_start: bool = True, terminate: bool = False) -> pod.Seen:
    """A container as read: `how` is waiting, running, unlaunched, vanished (its supervisor died
    before it started), or an exit code."""
    records: dict[str, Any] = {"launch": LAUNCHED, "run": STARTED, "exit": None}
    alive = (True, True)
    if how == "waiting":
        records["run"], alive = None, (True, False)
    elif how == "unlaunched":
        records.update(launch=None, run=None)
        alive = (False, False)
    elif how == "vanished":
        records["run"], alive = None, (False, False)
    elif how != "running":
        records["exit"] = {"exit_code": int(how), "finished_at": f"2026-01-01T11:59:{int(how) % 60:02d}.0Z"}
        alive = (False, False)
    observation = Observation(
        instance_id="local-c.a.x", claim="x", created_at=NOW, spec={"claim": "x"},
        terminate={"requested_at": "2026-01-01T11:59:59.0Z"} if terminate else None,
        supervisor_alive=alive[0], workload_alive=alive[1], **records,
    )  # fmt: skip
    return pod.Seen(name, kind, observation, may_start)


@pytest.mark.parametrize(
    ("containers", "state", "exit_code"),
    [
        ([seen("i", "running", "init"), seen("a", "waiting", may_start=False)], InstanceState.INITIALIZING, None),
        ([seen("i", "0", "init"), seen("a", "waiting")], InstanceState.INITIALIZING, None),  # about to start
        ([seen("i", "5", "init"), seen("a", "waiting", may_start=False)], InstanceState.FAILED, 5),
        ([seen("s", "running", "sidecar"), seen("a", "waiting", may_start=False)], InstanceState.INITIALIZING, None),
        ([seen("i", "0", "init"), seen("a", "running"), seen("b", "3")], InstanceState.RUNNING, None),
        ([seen("s", "143", "sidecar"), seen("a", "0"), seen("b", "3")], InstanceState.FAILED, 3),
        ([seen("s", "143", "sidecar"), seen("a", "0"), seen("b", "0")], InstanceState.SUCCEEDED, 0),
        ([seen("s", "running", "sidecar"), seen("a", "0"), seen("b", "0")], InstanceState.RUNNING, None),
        ([seen("i", "unlaunched", "init"), seen("a", "unlaunched")], InstanceState.PROVISIONING, None),
        ([seen("s", "vanished", "sidecar"), seen("a", "waiting", may_start=False)], InstanceState.FAILED, None),
        (
            [seen("i", "0", "init", terminate=True), seen("a", "running", terminate=True)],
            InstanceState.TERMINATING,
            None,
        ),
    ],
)
def test_the_state_of_an_instance_of_several_containers_follows_its_containers(
    containers: list[pod.Seen], state: InstanceState, exit_code: int | None
) -> None:
    instance = pod.instance_from(containers)
    assert instance is not None and (instance.state, instance.exit_code) == (state, exit_code)
    assert [c.name for c in instance.containers] == [c.name for c in containers]


def test_an_instance_of_several_containers_is_gone_once_terminated_and_nothing_lives() -> None:
    assert pod.instance_from([seen("i", "0", "init", terminate=True), seen("a", "137", terminate=True)]) is None


def entry(base: Path, name: str, kind: str, *records: tuple[str, dict[str, Any]]) -> sequence.Entry:
    path = base / name
    path.mkdir()
    for record, data in records:
        folder.write_json_atomic(path / record, data)
    return sequence.Entry(name, kind, path)


def test_a_container_may_start_once_the_init_containers_before_it_succeeded_and_sidecars_before_it_started(
    tmp_path: Path,
) -> None:
    started, ok, failed = (
        (folder.RUN_FILE, {"run": 1}),
        (folder.EXIT_FILE, {"exit_code": 0}),
        (folder.EXIT_FILE, {"exit_code": 1}),
    )
    order = [
        entry(tmp_path, "done", "init", started, ok),
        entry(tmp_path, "proxy", "sidecar", started),
        entry(tmp_path, "broken", "init", started, failed),
        entry(tmp_path, "later", "init"),
        entry(tmp_path, "main", "app"),
        entry(tmp_path, "helper", "app"),
    ]
    assert [sequence.may_start(order, e.name) for e in order] == [True, True, True, False, False, False]
    folder.write_json_atomic(tmp_path / "broken" / folder.RUNS_FILE, {"runs": 2})  # restarted: the old exit is stale
    assert not sequence.may_start(order, "later")
    folder.write_json_atomic(tmp_path / "broken" / folder.EXIT_FILE, {"exit_code": 0, "run": 2})
    assert sequence.may_start(order, "later") and not sequence.may_start(order, "main")
    folder.write_json_atomic(tmp_path / "later" / folder.EXIT_FILE, {"exit_code": 0})
    assert sequence.may_start(order, "main") and sequence.may_start(order, "helper")


@pytest.mark.parametrize(
    ("policy", "codes", "stop"),
    [
        ("Never", (0, 3), True),
        ("Never", (0, None), False),  # one still runs
        ("OnFailure", (0, 0), True),
        ("OnFailure", (0, 3), False),  # it will run again
        ("Always", (0, 0), False),
    ],
)
def test_sidecars_stop_only_once_no_app_container_will_run_again(
    tmp_path: Path, policy: str, codes: tuple[int | None, ...], stop: bool
) -> None:
    apps = [
        entry(tmp_path, f"app{n}", "app", *(((folder.EXIT_FILE, {"exit_code": code}),) if code is not None else ()))
        for n, code in enumerate(codes)
    ]
    assert sequence.sidecars_may_stop(apps, policy) is stop
