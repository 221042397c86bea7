"""A fake instance's containers as FakeProvider reports them, in-process and over HTTP
alike, on an injected clock: init containers in order, sidecars kept running, app
containers together, per-container exits, restarts, stops and logs."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from providers import errors
from providers.base import ClaimName, InstanceId, InstanceState, LogOptions, PodSpec, ProvisionRequest
from providers.fake import FakeProvider
from providers.fake.cloud import FakeCloud
from providers.fake.registry import cloud_named, forget
from providers.fake.scenario import load_scenario
from providers.shape import ContainerSpec, ContainerState, Mount, Volume, VolumeFile
from tests.support.clock import ManualClock
from tests.support.factories import make_pod_spec
from tests.support.polling import read_to_end
from tests.support.rigs.fakecloud import START, Rig, Rigs

SCENARIO: dict[str, Any] = {"workload": {"init_seconds": 2}, "log": {"interval": 1}}


def pod(*apps: str, init: tuple[str, ...] = (), sidecars: tuple[str, ...] = (), policy: str = "Always") -> PodSpec:
    """A Pod with app containers `apps`, then init containers `init` in order, where the
    names in `sidecars` are native sidecars."""
    inits = tuple(ContainerSpec(name, sidecar=name in sidecars) for name in init)
    return make_pod_spec(
        container=apps[0],
        containers=tuple(ContainerSpec(a) for a in apps),
        init_containers=inits,
        restart_policy=policy,
    )


def start(rig: Rig, spec: PodSpec, claim: str = "claim-1") -> InstanceId:
    return rig.provider.provision(spec, ProvisionRequest(claim=ClaimName(claim))).instance_id


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(START + seconds, UTC)


W, R, T = ContainerState.WAITING, ContainerState.RUNNING, ContainerState.TERMINATED


def test_init_containers_run_in_order_each_for_its_scripted_time_then_the_app_containers_start_together(
    rig: Rigs,
) -> None:
    r = rig(SCENARIO)
    instance_id = start(r, pod("app", "helper", init=("migrate", "seed")))
    assert r.states(instance_id) == {"migrate": (R, 1), "seed": (W, 0), "app": (W, 0), "helper": (W, 0)}
    assert r.get(instance_id).state is InstanceState.INITIALIZING
    r.clock.advance(2)
    assert r.states(instance_id) == {"migrate": (T, 1), "seed": (R, 1), "app": (W, 0), "helper": (W, 0)}
    assert r.get(instance_id).state is InstanceState.INITIALIZING
    r.clock.advance(5)
    facts = r.facts(instance_id)
    assert [(name, f.state, f.init) for name, f in facts.items()] == [
        ("migrate", T, True), ("seed", T, True), ("app", R, False), ("helper", R, False),
    ]  # fmt: skip
    assert (facts["migrate"].exit_code, facts["migrate"].exit_reason, facts["migrate"].finished_at) == (
        0,
        "Completed",
        at(2),
    )
    assert facts["seed"].started_at == at(2) and facts["seed"].finished_at == at(4)
    assert facts["app"].started_at == facts["helper"].started_at == at(4)
    instance = r.get(instance_id)
    assert (instance.state, instance.started_at, instance.exit_code) == (InstanceState.RUNNING, at(0), None)


def test_a_pod_spec_listing_one_container_reports_its_facts_and_a_hand_built_one_reports_none(
    rig: Rigs,
) -> None:
    r = rig(SCENARIO)
    listed = start(r, pod("app"), claim="listed")
    hand_built = start(r, make_pod_spec(), claim="hand-built")
    assert r.states(listed) == {"app": (R, 1)}
    assert r.get(listed).state is InstanceState.RUNNING
    assert r.get(hand_built).containers == () and r.get(hand_built).state is InstanceState.RUNNING


def test_a_sidecar_starts_in_its_place_and_keeps_running_beside_the_app_containers(rig: Rigs) -> None:
    r = rig(SCENARIO)
    instance_id = start(r, pod("app", init=("proxy", "migrate"), sidecars=("proxy",)))
    assert r.states(instance_id) == {"proxy": (R, 1), "migrate": (R, 1), "app": (W, 0)}
    r.clock.advance(100)
    assert r.states(instance_id) == {"proxy": (R, 1), "migrate": (T, 1), "app": (R, 1)}
    assert r.facts(instance_id)["app"].started_at == at(2)
    assert r.get(instance_id).state is InstanceState.RUNNING


@pytest.mark.parametrize(
    ("policy", "code", "sidecar"),
    [("Never", 1, T), ("Never", 0, T), ("OnFailure", 0, T), ("OnFailure", 1, R), ("Always", 0, R)],
)
def test_sidecars_stop_once_the_app_containers_ended_and_none_will_run_again_under_the_policy(
    rig: Rigs, policy: str, code: int, sidecar: ContainerState
) -> None:
    r = rig(SCENARIO)
    instance_id = start(r, pod("app", init=("proxy",), sidecars=("proxy",), policy=policy))
    r.clock.advance(3)
    r.cloud.exit_container(instance_id, "app", code)
    facts = r.facts(instance_id)
    assert facts["proxy"].state is sidecar
    instance = r.get(instance_id)
    if sidecar is T:
        assert (facts["proxy"].exit_code, facts["proxy"].finished_at) == (0, at(3))
        assert instance.state is (InstanceState.SUCCEEDED if code == 0 else InstanceState.FAILED)
        assert instance.exit_code == code and instance.finished_at == at(3)
    else:
        assert instance.state is InstanceState.RUNNING


def test_a_failed_init_container_holds_the_sequence_and_fails_the_instance_until_restarted(
    rig: Rigs,
) -> None:
    r = rig(SCENARIO)
    instance_id = start(r, pod("app", init=("migrate", "seed")))
    r.clock.advance(1)
    r.cloud.exit_container(instance_id, "migrate", 3)
    r.clock.advance(50)
    assert r.states(instance_id) == {"migrate": (T, 1), "seed": (W, 0), "app": (W, 0)}
    instance = r.get(instance_id)
    assert (instance.state, instance.exit_code, instance.exit_reason) == (InstanceState.FAILED, 3, "Error")
    r.provider.restart(instance_id, container="migrate")
    assert r.states(instance_id) == {"migrate": (R, 2), "seed": (W, 0), "app": (W, 0)}
    assert (r.get(instance_id).state, r.get(instance_id).runs) == (InstanceState.INITIALIZING, 2)
    r.clock.advance(4)
    assert r.states(instance_id) == {"migrate": (T, 2), "seed": (T, 1), "app": (R, 1)}
    assert r.get(instance_id).state is InstanceState.RUNNING


def test_a_scenario_can_make_an_init_container_fail_and_time_any_container(rig: Rigs) -> None:
    scripts = {"bad-init": {"run_seconds": 1, "exit_code": 2}, "app": {"run_seconds": 10}}
    r = rig({"workload": {"init_seconds": 2, "containers": scripts}})
    failing = start(r, pod("app", init=("bad-init",)), claim="failing")
    fine = start(r, pod("app", init=("good-init",)), claim="fine")
    r.clock.advance(1)
    assert r.states(failing) == {"bad-init": (T, 1), "app": (W, 0)}
    assert (r.get(failing).state, r.get(failing).exit_code) == (InstanceState.FAILED, 2)
    r.clock.advance(11)
    assert r.states(fine) == {"good-init": (T, 1), "app": (T, 1)}
    assert r.facts(fine)["app"].finished_at == at(12)
    assert (r.get(fine).state, r.get(fine).exit_code) == (InstanceState.SUCCEEDED, 0)


def test_one_container_exits_while_another_runs_and_the_instance_ends_with_the_first_non_zero_code(
    rig: Rigs,
) -> None:
    r = rig({"workload": {"init_seconds": 0}})
    instance_id = start(r, pod("app", "helper", "tail"))
    r.cloud.exit_container(instance_id, "tail", 0)
    r.cloud.exit_container(instance_id, "helper", 4)
    facts = r.facts(instance_id)
    assert (facts["helper"].state, facts["helper"].exit_code, facts["helper"].exit_reason) == (T, 4, "Error")
    assert r.get(instance_id).state is InstanceState.RUNNING
    r.clock.advance(1)
    r.cloud.exit_container(instance_id, "app", 5)
    instance = r.get(instance_id)
    assert (instance.state, instance.exit_code, instance.finished_at) == (InstanceState.FAILED, 4, at(1))


def test_exit_container_names_a_running_container_of_an_instance(rig: Rigs) -> None:
    r = rig(SCENARIO)
    instance_id = start(r, pod("app", init=("migrate",)))
    with pytest.raises(errors.NotFound):
        r.cloud.exit_container(instance_id, "nope", 1)
    with pytest.raises(errors.InvalidRequest):
        r.cloud.exit_container(instance_id, "app", 1)  # still waiting for the init container
    with pytest.raises(errors.NotFound):
        r.cloud.exit_container("fake-404", "app", 1)


def test_restart_of_one_container_runs_it_again_and_counts_the_run_in_the_container_and_the_instance(
    rig: Rigs,
) -> None:
    r = rig({"workload": {"init_seconds": 0}})
    instance_id = start(r, pod("app", "helper"))
    r.clock.advance(3)
    r.cloud.exit_container(instance_id, "helper", 1)
    r.clock.advance(1)
    r.provider.restart(instance_id, container="helper")
    facts, instance = r.facts(instance_id), r.get(instance_id)
    assert (facts["helper"].state, facts["helper"].runs, facts["helper"].started_at) == (R, 2, at(4))
    assert (facts["helper"].exit_code, facts["helper"].finished_at) == (None, None)
    assert (facts["app"].runs, instance.runs, instance.state) == (1, 2, InstanceState.RUNNING)
    previous = read_to_end(r.provider.logs(instance_id, LogOptions(container="helper", previous=True)), 10).decode()
    assert previous.splitlines() == [f"fake instance {instance_id} helper line {n}" for n in range(1, 5)]


def test_restart_of_a_container_that_has_not_ended_is_invalid_and_of_an_unknown_one_not_found(
    rig: Rigs,
) -> None:
    r = rig(SCENARIO)
    instance_id = start(r, pod("app", init=("migrate",)))
    with pytest.raises(errors.InvalidRequest):
        r.provider.restart(instance_id, container="migrate")  # running
    with pytest.raises(errors.InvalidRequest):
        r.provider.restart(instance_id, container="app")  # waiting
    with pytest.raises(errors.NotFound):
        r.provider.restart(instance_id, container="nope")
    r.provider.terminate(instance_id)
    with pytest.raises(errors.NotFound):
        r.provider.restart(instance_id, container="migrate")


def test_restart_without_a_container_runs_the_whole_ended_workload_from_its_first_init_container(
    rig: Rigs,
) -> None:
    r = rig(SCENARIO)
    instance_id = start(r, pod("app", init=("migrate",)))
    r.clock.advance(2)
    r.cloud.exit_container(instance_id, "app", 0)
    assert r.get(instance_id).state is InstanceState.SUCCEEDED
    r.clock.advance(1)
    r.provider.restart(instance_id)
    assert r.states(instance_id) == {"migrate": (R, 2), "app": (W, 1)}
    assert (r.get(instance_id).state, r.get(instance_id).started_at) == (InstanceState.INITIALIZING, at(3))
    r.clock.advance(2)
    assert r.states(instance_id) == {"migrate": (T, 2), "app": (R, 2)}


def test_stop_container_ends_it_with_143_and_a_container_not_running_is_success(rig: Rigs) -> None:
    """By default a container dies of SIGTERM at once (143); tests/providers/fake/test_fake_stop.py
    scripts the other reactions."""
    r = rig({"workload": {"init_seconds": 0}})
    instance_id = start(r, pod("app", "helper"))
    r.clock.advance(2)
    r.provider.stop_container(instance_id, "helper", grace=30)
    facts = r.facts(instance_id)
    assert (facts["helper"].state, facts["helper"].exit_code, facts["helper"].finished_at) == (T, 143, at(2))
    assert facts["app"].state is R
    r.provider.stop_container(instance_id, "helper", grace=30)
    assert r.facts(instance_id)["helper"].finished_at == at(2)
    with pytest.raises(errors.NotFound):
        r.provider.stop_container(instance_id, "nope", grace=0)
    with pytest.raises(errors.NotFound):
        r.provider.stop_container(InstanceId("fake-404"), "app", grace=0)
    r.provider.restart(instance_id, container="helper")
    assert r.states(instance_id)["helper"] == (R, 2)


def test_terminate_kills_the_running_containers(rig: Rigs) -> None:
    r = rig(SCENARIO)
    instance_id = start(r, pod("app", init=("proxy",), sidecars=("proxy",)))
    r.clock.advance(1)
    r.provider.terminate(instance_id)
    facts = r.facts(instance_id)
    assert {name: (f.state, f.exit_code) for name, f in facts.items()} == {"proxy": (T, 137), "app": (T, 137)}
    assert r.get(instance_id).state is InstanceState.TERMINATED


def test_logs_are_per_container_and_a_container_that_has_not_started_is_not_found(rig: Rigs) -> None:
    r = rig(SCENARIO)
    instance_id = start(r, pod("app", "helper", init=("migrate",)))
    with pytest.raises(errors.NotFound):
        r.provider.logs(instance_id, LogOptions(container="app"))
    with pytest.raises(errors.NotFound):
        r.provider.logs(instance_id, LogOptions(container="nope"))
    r.clock.advance(3.5)

    def read(container: str) -> list[str]:
        return read_to_end(r.provider.logs(instance_id, LogOptions(container=container)), 10).decode().splitlines()

    assert read("migrate") == [f"fake instance {instance_id} migrate line {n}" for n in (1, 2, 3)]  # at 0, 1, 2
    assert read("helper") == [f"fake instance {instance_id} helper line {n}" for n in (1, 2)]
    assert read("app") == read("") == [f"fake instance {instance_id} line {n}" for n in (1, 2)]
    followed = r.provider.logs(instance_id, LogOptions(container="migrate", follow=True))
    assert read_to_end(followed, 10).decode().count("\n") == 3  # it ended: the stream ends too


def test_scripted_log_lines_name_the_container() -> None:
    script = load_scenario({"log": {"lines": ["{container} says {n}"]}}).log
    assert script.text(0, "fake-1", "claim", "helper", primary=False) == "helper says 1"


def test_the_capabilities_declare_several_containers_init_containers_sidecars_and_every_volume_kind(
    rig: Rigs,
) -> None:
    shapes = rig(SCENARIO).provider.capabilities().shapes
    assert (shapes.several_containers, shapes.init_containers, shapes.sidecars) == (True, True, True)
    assert shapes.volumes == {"configMap", "secret", "downwardAPI", "projected", "emptyDir"}


def test_volumes_are_kept_by_name_and_each_container_sees_its_mounted_files_by_path_and_mode_never_contents(
    rig: Rigs,
) -> None:
    r = rig(SCENARIO)
    app = ContainerSpec("app", mounts=(Mount("config", "/etc/app"), Mount("creds", "/var/run/creds", read_only=True)))
    helper = ContainerSpec("helper", mounts=(Mount("config", "/etc/helper.yaml", sub_path="app.yaml"),))
    scratch = ContainerSpec("init", mounts=(Mount("scratch", "/scratch"), Mount("config", "/cfg", sub_path="d")))
    spec = make_pod_spec(container="app", containers=(app, helper), init_containers=(scratch,))
    volumes = (
        Volume("config", "configMap", (VolumeFile("app.yaml", b"level: debug"), VolumeFile("d/x.conf", b"x", 0o600))),
        Volume("creds", "secret", (VolumeFile("token", b"s3cr3t-token", 0o400),)),
        Volume("scratch", "emptyDir"),
    )
    request = ProvisionRequest(
        claim=ClaimName("claim-1"),
        env={"PASSWORD": "hunter2"},
        container_env={"app": {"PASSWORD": "hunter2"}},
        volumes=volumes,
    )
    instance_id = r.provider.provision(spec, request).instance_id
    (stored,) = r.cloud.instances()
    assert stored["volumes"] == [["config", "configMap"], ["creds", "secret"], ["scratch", "emptyDir"]]
    assert {c["name"]: c["files"] for c in stored["containers"]} == {
        "init": [["/cfg/x.conf", 0o600]],
        "app": [["/etc/app/app.yaml", 0o644], ["/etc/app/d/x.conf", 0o600], ["/var/run/creds/token", 0o400]],
        "helper": [["/etc/helper.yaml", 0o644]],
    }
    kept = json.dumps([r.cloud.snapshot(), [c.to_dict() for c in r.cloud.call_log()]])
    assert "hunter2" not in kept and "s3cr3t" not in kept and "level: debug" not in kept
    assert r.get(instance_id).state is InstanceState.INITIALIZING


def test_the_containers_survive_a_snapshot_and_an_older_record_loads_as_its_one_container() -> None:
    clock = ManualClock(START)
    cloud = FakeCloud(load_scenario(SCENARIO), clock=clock)
    owner = "standalone.gpu"
    made = cloud.provision(pod("app", init=("migrate",)), ProvisionRequest(claim=ClaimName("a")), owner=owner)
    copy = FakeCloud(load_scenario(SCENARIO), clock=clock)
    copy.restore(json.loads(json.dumps(cloud.snapshot())))
    assert copy.get(made.instance_id, owner=owner) == cloud.get(made.instance_id, owner=owner)
    clock.advance(3)
    assert copy.get(made.instance_id, owner=owner) == cloud.get(made.instance_id, owner=owner)

    clock.advance(7)
    old = dict(cloud.snapshot(), version=2)
    record = {k: v for k, v in old["instances"][0].items() if k not in ("containers", "reports_containers", "begun_at")}
    record.update(id="fake-9", state="failed", started_at=START + 5, stopped_at=START + 8, exit_code=2, runs=2)
    record.update(previous_started_at=START + 1, previous_stopped_at=START + 4)
    old["instances"] = [record]
    legacy = FakeCloud(load_scenario(SCENARIO), clock=clock)
    legacy.restore(old)
    loaded = legacy.get("fake-9", owner=owner)
    assert loaded is not None and loaded.containers == ()
    assert (loaded.state, loaded.exit_code, loaded.runs, loaded.finished_at) == (InstanceState.FAILED, 2, 2, at(8))
    previous = legacy.log_chunk("fake-9", owner=owner, after=0, limit=100, previous=True)
    assert previous.total == 4 and previous.ended
    legacy.restart("fake-9", owner=owner)
    after = legacy.get("fake-9", owner=owner)
    assert after is not None and (after.state, after.runs, after.started_at) == (InstanceState.RUNNING, 3, at(10))


def test_exec_reaches_a_running_container_and_not_a_waiting_stopped_or_unknown_one(rig: Rigs) -> None:
    r = rig(SCENARIO)
    instance_id = start(r, pod("app", "helper", init=("migrate",)))

    def run(container: str, *command: str) -> tuple[bytes, int | None]:
        process = r.provider.exec(instance_id, list(command), tty=False, stdin=False, container=container)
        return process.read_stdout(), process.wait(10)

    assert run("migrate", "echo", "in", "init") == (b"in init\n", 0)
    for container in ("app", "nope"):
        with pytest.raises(errors.NotFound):
            run(container, "true")
    r.clock.advance(2)
    assert run("helper", "sh", "-c", "exit 3") == (b"", 3)
    assert run("", "echo", "first") == (b"first\n", 0)
    r.provider.stop_container(instance_id, "helper", grace=0)
    with pytest.raises(errors.NotFound):
        run("helper", "true")
    assert r.cloud.call_counts()["exec"] == 6


def test_attach_reaches_a_running_container_only() -> None:
    clock = ManualClock(START)
    name = f"containers-{uuid.uuid4().hex}"
    cloud_named(name, lambda: FakeCloud(load_scenario(SCENARIO), clock=clock))
    try:
        provider = FakeProvider("gpu", {"cloud": name})
        instance_id = provider.provision(
            pod("app", "helper", init=("migrate",)), ProvisionRequest(claim=ClaimName("a"))
        )
        with pytest.raises(errors.NotFound):
            provider.attach(instance_id.instance_id, stdin=True, tty=False, container="helper")
        clock.advance(2)
        attached = provider.attach(instance_id.instance_id, stdin=True, tty=False, container="helper")
        attached.write_stdin(b"hello\n")
        attached.close_stdin()
        assert (attached.read_stdout(), attached.wait(10)) == (b"hello\n", 0)
    finally:
        forget(name)


def test_a_scripted_cat_answers_an_exec_probe_from_the_files_a_control_call_puts_and_removes(
    rig: Rigs,
) -> None:
    r = rig({"workload": {"init_seconds": 0}})
    spec = make_pod_spec(container="app", containers=(ContainerSpec("app", mounts=(Mount("cfg", "/etc/cfg"),)),))
    volume = Volume("cfg", "configMap", (VolumeFile("a.yaml", b"a: 1"),))
    instance_id = r.provider.provision(spec, ProvisionRequest(claim=ClaimName("a"), volumes=(volume,))).instance_id

    def probe(*command: str) -> int | None:
        return r.provider.exec(instance_id, list(command), tty=False, stdin=False, container="app").wait(10)

    assert probe("cat", "/tmp/ready") == 1
    r.cloud.put_file(instance_id, "/tmp/ready", container="app")
    assert (probe("cat", "/tmp/ready"), probe("test", "-e", "/tmp/ready"), probe("sh", "-c", "cat /tmp/ready")) == (
        0,
        0,
        0,
    )
    assert probe("cat", "/etc/cfg/a.yaml") == 0  # a volume file: there by path, its contents not kept
    r.cloud.remove_file(instance_id, "/tmp/ready")
    assert (probe("cat", "/tmp/ready"), probe("test", "-f", "/tmp/ready")) == (1, 1)
    with pytest.raises(ValueError):
        r.cloud.put_file(instance_id, "relative/path")
    assert r.provider.capabilities().shapes.probes == {"exec"}
