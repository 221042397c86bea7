"""The local provider's lifecycle with real processes: provision, state, exits, terminate,
a manager restart."""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from providers.base import (
    BlockBreadth,
    ClaimName,
    Executor,
    Instance,
    InstanceId,
    InstanceState,
    LogOptions,
    LogStreamer,
    PodSpec,
    ProvisionRequest,
    Restarter,
    Tier,
)
from providers.errors import InvalidRequest, NoCapacity, NotFound, ProviderError, Unavailable
from providers.local import LocalProvider, folder, image_notice, launch, pids
from tests.support.local_cleanup import kill_leftovers, live_supervisors
from tests.support.polling import wait_for

DEADLINE = 30.0
CLAIM = "ns-pod-abcdefghij"
INSTANCE = InstanceId(folder.instance_id_for("standalone.local", CLAIM))  # the default owner's id for CLAIM


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[LocalProvider]:
    provider = LocalProvider("local", {"state_dir": str(tmp_path), "grace_period": 1, "poll_interval": 0.5})
    yield provider
    terminate_all(provider)
    kill_leftovers(tmp_path)


def terminate_all(provider: LocalProvider) -> None:
    for instance in provider.list():
        provider.terminate(instance.id)


def kill_instance(path: Path) -> None:
    """SIGKILL an instance's supervisor and workload group, as a reboot would."""
    # run.json follows spawn.json (RUNNING already) by a moment: the leader's identity first.
    wait_for(lambda: "workload" in json.loads((path / "run.json").read_text()), ignoring=(OSError,))
    for record, key in (("launch.json", "supervisor"), ("run.json", "workload")):
        identity = pids.ProcessIdentity.from_json(json.loads((path / record).read_text())[key])
        assert identity is not None
        pids.signal_group(identity, signal.SIGKILL)
        if pids.is_alive(identity):
            os.kill(identity.pid, signal.SIGKILL)


def make_pod(**overrides: Any) -> PodSpec:
    fields: dict[str, Any] = {"namespace": "ns", "name": "pod", "uid": "uid-1", "container": "main", "image": "busybox"}
    fields.update(overrides)
    return PodSpec(**fields)


def request(claim: str = "ns-pod-abcdefghij", **overrides: Any) -> ProvisionRequest:
    return ProvisionRequest(claim=ClaimName(claim), **overrides)


def finished(provider: LocalProvider, instance_id: InstanceId) -> Any:
    def check() -> Any:
        instance = provider.get(instance_id)
        return instance if instance and instance.state in (InstanceState.SUCCEEDED, InstanceState.FAILED) else None

    return wait_for(check)


def read_all(provider: LocalProvider, instance_id: InstanceId, options: LogOptions | None = None) -> bytes:
    stream = provider.logs(instance_id, options or LogOptions())
    chunks = []
    while chunk := stream.read():
        chunks.append(chunk)
    stream.close()
    return b"".join(chunks)


def test_provider_conforms_to_the_seam_and_declares_itself(provider: LocalProvider) -> None:
    """LogStreamer, Executor and Restarter are detected at runtime; capabilities say the image
    is not pulled, the workload restarts in place, an exit bills nothing and terminate discards."""
    assert isinstance(provider, LogStreamer) and isinstance(provider, Executor) and isinstance(provider, Restarter)
    caps = provider.capabilities()
    assert caps.pulls_images is False and caps.log_timestamps is True and caps.poll_interval == 0.5
    assert (caps.restarts_in_place, caps.bills_after_exit, caps.keeps_output_after_terminate) == (True, False, False)
    assert {"cpu", "memory", "pods"} <= set(caps.capacity)
    assert "'nginx:1'" in image_notice("nginx:1") and "not pulled" in image_notice("nginx:1")
    [offering] = provider.offerings()
    assert (offering.region, offering.tier, offering.hourly_price, offering.accelerator) == (
        "local",
        Tier.ON_DEMAND,
        0.0,
        None,
    )
    assert provider.expand_regions(["us", "local"]) == ["local"]
    assert provider.expand_regions(["mars-1"]) == []
    scope = provider.classify_provision_error(NoCapacity("x"), accelerator=None, tier=Tier.ON_DEMAND, region="local")
    assert scope.breadth is BlockBreadth.OFFERING and scope.provider == "local"


def test_constructor_rejects_unknown_options_and_does_no_io(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="colour"):
        LocalProvider("local", {"state_dir": str(tmp_path), "colour": "blue"})
    LocalProvider("local", {"state_dir": str(tmp_path / "never")})
    assert not (tmp_path / "never").exists()


def test_state_dir_defaults_to_the_environment_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEBULA_STATE_DIR", str(tmp_path))
    assert LocalProvider("local", {}).root == tmp_path / "local" / "standalone.local"


def test_args_only_run_through_sh_and_output_is_logged(provider: LocalProvider) -> None:
    result = provider.provision(make_pod(args=("echo out; echo err >&2",)), request())
    assert result.reserved and result.endpoint == "127.0.0.1" and result.credential is None
    instance = finished(provider, result.instance_id)
    assert (instance.state, instance.exit_code, instance.exit_reason) == (InstanceState.SUCCEEDED, 0, "Completed")
    assert instance.started_at and instance.finished_at and instance.created_at <= instance.started_at
    assert instance.started_at <= instance.finished_at and instance.runs == 1
    assert read_all(provider, result.instance_id) == b"out\nerr\n"


def test_command_runs_directly_with_args(provider: LocalProvider) -> None:
    result = provider.provision(make_pod(command=("printf", "%s|%s\n"), args=("a b", "$HOME")), request())
    finished(provider, result.instance_id)
    assert read_all(provider, result.instance_id) == b"a b|$HOME\n"


def test_neither_command_nor_args_is_an_invalid_request(provider: LocalProvider) -> None:
    with pytest.raises(InvalidRequest, match="neither command nor args"):
        provider.provision(make_pod(), request())
    with pytest.raises(InvalidRequest):
        provider.provision(make_pod(args=("true",), gpu_count=1), request())


def test_non_zero_exit_is_failed_with_the_exit_code_and_reason_error(provider: LocalProvider) -> None:
    result = provider.provision(make_pod(args=("exit 3",)), request())
    instance = finished(provider, result.instance_id)
    assert (instance.state, instance.exit_code, instance.exit_reason) == (InstanceState.FAILED, 3, "Error")
    assert "3" in instance.message and instance.started_at and instance.finished_at


def test_a_workload_group_killed_by_sigkill_is_failed_with_137(provider: LocalProvider) -> None:
    """As the kubelet reports a container killed by signal N: exit code 128+N, reason Error."""
    result = provider.provision(make_pod(args=("echo up; exec sleep 300",)), request())
    wait_for(lambda: read_all(provider, result.instance_id) == b"up\n")
    leader = pids.ProcessIdentity.from_json(json.loads((provider.root / CLAIM / "run.json").read_text())["workload"])
    assert leader is not None and pids.signal_group(leader, signal.SIGKILL)
    instance = finished(provider, result.instance_id)
    assert (instance.state, instance.exit_code, instance.exit_reason) == (InstanceState.FAILED, 137, "Error")
    assert instance.started_at and instance.finished_at and instance.started_at <= instance.finished_at


def test_an_exited_instance_keeps_its_folder_and_output_until_terminate_removes_it(provider: LocalProvider) -> None:
    """Nothing runs after a natural exit, so nothing bills; the output stays readable, the
    instance stays listed, and terminate then deletes the folder at once."""
    result = provider.provision(make_pod(args=("echo done",)), request())
    finished(provider, result.instance_id)
    path = provider.root / CLAIM
    supervisor = pids.ProcessIdentity.from_json(json.loads((path / "launch.json").read_text())["supervisor"])
    assert supervisor is not None
    wait_for(lambda: not pids.is_alive(supervisor))
    [listed] = provider.list()
    assert listed.state is InstanceState.SUCCEEDED and read_all(provider, result.instance_id) == b"done\n"
    assert provider.capabilities().bills_after_exit is False
    provider.terminate(result.instance_id)
    assert not path.exists() and provider.get(result.instance_id) is None and provider.list() == []


def test_missing_executable_fails_with_a_logged_reason(provider: LocalProvider) -> None:
    result = provider.provision(make_pod(command=("/nonexistent/tool",)), request())
    instance = finished(provider, result.instance_id)
    assert instance.state is InstanceState.FAILED and instance.exit_code == 127
    assert b"cannot start '/nonexistent/tool'" in read_all(provider, result.instance_id)


def test_provision_is_idempotent_on_the_claim_i1(provider: LocalProvider) -> None:
    """I1: concurrent and repeated provisions of one claim start exactly one process."""
    pod = make_pod(args=("echo started; exec sleep 300",))
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(provider.provision(pod, request()))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results.append(provider.provision(pod, request()))
    assert len({r.instance_id for r in results}) == 1
    instance_id = results[0].instance_id
    wait_for(lambda: provider.get(instance_id).state is InstanceState.RUNNING)  # type: ignore[union-attr]
    wait_for(lambda: b"started" in read_all(provider, instance_id))
    assert read_all(provider, instance_id) == b"started\n"
    assert [i.claim for i in provider.list()] == ["ns-pod-abcdefghij"]


def test_terminate_sends_term_and_records_143(provider: LocalProvider) -> None:
    result = provider.provision(make_pod(args=("echo up; exec sleep 300",)), request())
    wait_for(lambda: read_all(provider, result.instance_id) == b"up\n")
    exit_file = provider.root / CLAIM / "exit.json"
    provider.terminate(result.instance_id)
    assert json.loads(wait_for(lambda: exit_file.exists() and exit_file.read_text()))["exit_code"] == 143
    wait_for(lambda: provider.get(result.instance_id) is None)
    assert provider.list() == []


def test_terminate_escalates_to_kill_after_the_grace_period(provider: LocalProvider) -> None:
    """A workload that ignores TERM is killed (137) after grace_period; terminate itself does not block."""
    result = provider.provision(make_pod(args=("trap '' TERM; echo up; sleep 300",)), request())
    wait_for(lambda: read_all(provider, result.instance_id) == b"up\n")
    exit_file = provider.root / CLAIM / "exit.json"
    started = time.monotonic()
    provider.terminate(result.instance_id)
    assert time.monotonic() - started < 1.0
    assert provider.get(result.instance_id).state is InstanceState.TERMINATING  # type: ignore[union-attr]
    provider.terminate(result.instance_id)  # a second call while terminating is safe
    assert json.loads(wait_for(lambda: exit_file.exists() and exit_file.read_text()))["exit_code"] == 137
    assert time.monotonic() - started >= 0.9
    wait_for(lambda: provider.get(result.instance_id) is None)


def test_terminate_is_idempotent_and_unknown_ids_are_gone(provider: LocalProvider) -> None:
    result = provider.provision(make_pod(args=("true",)), request())
    finished(provider, result.instance_id)
    provider.terminate(result.instance_id)
    provider.terminate(result.instance_id)
    wait_for(lambda: provider.get(result.instance_id) is None)  # the supervisor may still be exiting
    provider.terminate(result.instance_id)
    for unknown in ("local-nothing-here", "not-ours", "local-../../etc"):
        provider.terminate(InstanceId(unknown))
        assert provider.get(InstanceId(unknown)) is None


def test_a_new_provider_object_finds_every_instance_after_the_old_one_is_dropped(tmp_path: Path) -> None:
    """Instances run in their own session, so they survive the provider object (and the manager)."""
    options = {"state_dir": str(tmp_path), "grace_period": 1}
    try:
        first = LocalProvider("local", options)
        ids = {
            claim: first.provision(make_pod(args=("exec sleep 300",)), request(claim)).instance_id
            for claim in ("ns-a-1111111111", "ns-b-2222222222")
        }
        del first
        gc.collect()
        second = LocalProvider("local", options)
        wait_for(lambda: all(i.state is InstanceState.RUNNING for i in second.list()))
        assert {i.claim: i.id for i in second.list()} == ids
        for instance_id in ids.values():
            assert second.get(instance_id).state is InstanceState.RUNNING  # type: ignore[union-attr]
            second.terminate(instance_id)
        wait_for(lambda: second.list() == [])
    finally:
        terminate_all(LocalProvider("local", options))
        kill_leftovers(tmp_path)


def test_a_process_gone_without_an_exit_record_is_failed(provider: LocalProvider) -> None:
    """As after a reboot: nothing runs and no exit code was written."""
    result = provider.provision(make_pod(args=("exec sleep 300",)), request())
    wait_for(lambda: provider.get(result.instance_id).state is InstanceState.RUNNING)  # type: ignore[union-attr]
    folder = provider.root / CLAIM
    kill_instance(folder)

    def failed() -> Instance | None:
        instance = provider.get(result.instance_id)
        return instance if instance is not None and instance.state is InstanceState.FAILED else None

    instance = wait_for(failed)
    assert instance.exit_code is None and "without a recorded exit code" in instance.message
    assert not (folder / "exit.json").exists()


def test_a_run_that_ends_while_its_folder_is_read_shows_its_exit_code(
    provider: LocalProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supervisor records the exit, then exits. A read that checks liveness after that
    exit record was looked for would see neither: "gone without a recorded exit code", which
    the vnode took for a crash (137) and restarted. Here the run ends at the very moment the
    reader asks whether the supervisor lives."""
    result = provider.provision(make_pod(args=("exec sleep 300",)), request())
    wait_for(lambda: provider.get(result.instance_id).state is InstanceState.RUNNING)  # type: ignore[union-attr]
    path = provider.root / CLAIM
    wait_for(lambda: "workload" in json.loads((path / "run.json").read_text()), ignoring=(OSError,))  # after spawn.json
    alive = pids.is_alive
    ended: list[bool] = []

    def ends_now(identity: pids.ProcessIdentity) -> bool:
        if not ended:
            ended.append(True)
            workload = pids.ProcessIdentity.from_json(json.loads((path / "run.json").read_text())["workload"])
            assert workload is not None
            pids.signal_group(workload, signal.SIGKILL)
            wait_for(lambda: (path / "exit.json").exists() and not alive(identity), what="the supervisor's exit")
        return alive(identity)

    monkeypatch.setattr(pids, "is_alive", ends_now)
    instance = provider.get(result.instance_id)
    assert ended and instance is not None
    assert (instance.state, instance.exit_code, instance.message) == (InstanceState.FAILED, 137, "exited with code 137")


def test_a_reused_pid_is_not_taken_for_the_workload() -> None:
    """Liveness compares the start time too: the same pid with another start time is not ours."""
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        real = pids.identify(child.pid)
        assert real is not None and pids.is_alive(real) and pids.group_alive(real)
        impostor = pids.ProcessIdentity(real.pid, real.start_ticks + 1)
        assert not pids.is_alive(impostor) and not pids.group_alive(impostor)
    finally:
        child.kill()
        child.wait()
    assert not pids.is_alive(real) and not pids.group_alive(real)


def test_env_reaches_the_workload_and_no_value_is_logged(
    provider: LocalProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "s3cr3t-value-42"
    result = provider.provision(
        make_pod(args=('printf "%s|%s|%s" "$TOKEN" "$HOME" "$PWD" > seen.txt',)),
        request(env={"TOKEN": secret}),
    )
    finished(provider, result.instance_id)
    folder = provider.root / CLAIM
    assert (folder / "seen.txt").read_text() == f"{secret}|{folder}|{folder}"
    assert stat.S_IMODE((folder / "env.json").stat().st_mode) == 0o600
    provider.terminate(result.instance_id)
    wait_for(lambda: provider.get(result.instance_id) is None)
    with pytest.raises(ProviderError) as excinfo:
        provider.logs(result.instance_id, LogOptions())
    assert secret not in str(excinfo.value) and secret not in caplog.text
    assert secret not in repr(request(env={"TOKEN": secret}))


def test_working_dir_is_used_when_it_exists(provider: LocalProvider, tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    result = provider.provision(make_pod(args=("pwd",), working_dir=str(workdir)), request())
    finished(provider, result.instance_id)
    assert read_all(provider, result.instance_id) == f"{workdir}\n".encode()


def test_errors_are_provider_errors(provider: LocalProvider, tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        provider.logs(InstanceId("local-nothing-here"), LogOptions())
    with pytest.raises(NotFound):
        provider.exec(InstanceId("local-nothing-here"), ["true"], tty=False, stdin=False)
    with pytest.raises(NotFound):
        provider.logs(InstanceId("local-nothing-here"), LogOptions(previous=True))
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the state folder should be")
    broken = LocalProvider("local", {"state_dir": str(blocked)})
    with pytest.raises(Unavailable):
        broken.provision(make_pod(args=("true",)), request())
    with pytest.raises(Unavailable):
        broken.list()  # could not ask is not "no instances" (I3)


def test_terminate_without_a_supervisor_signals_the_workload_group_itself(provider: LocalProvider) -> None:
    """If the supervisor was killed, terminate still sends TERM, then KILL after the grace period."""
    result = provider.provision(make_pod(args=("trap '' TERM; echo up; sleep 300",)), request())
    wait_for(lambda: read_all(provider, result.instance_id) == b"up\n")
    folder = provider.root / CLAIM
    supervisor = pids.ProcessIdentity.from_json(json.loads((folder / "launch.json").read_text())["supervisor"])
    assert supervisor is not None
    os.kill(supervisor.pid, signal.SIGKILL)
    wait_for(lambda: not pids.is_alive(supervisor))
    assert provider.get(result.instance_id).state is InstanceState.RUNNING  # type: ignore[union-attr]
    provider.terminate(result.instance_id)
    assert provider.get(result.instance_id).state is InstanceState.TERMINATING  # type: ignore[union-attr]
    wait_for(lambda: provider.get(result.instance_id) is None)


def _interrupted_launch(provider: LocalProvider, pod: PodSpec, claim: str = "ns-pod-abcdefghij") -> Path:
    """The folder a manager leaves when it is killed between creating it and starting the
    supervisor: exactly what `provision` had done by then."""
    path = launch.create_instance(provider.root, pod, request(claim), grace_period=1)
    assert path is not None and not (path / "launch.json").exists()
    return path


def test_a_launch_interrupted_by_a_manager_crash_is_resumed_by_the_next_list_i1(tmp_path: Path) -> None:
    """I1 across a crash inside provision: the next provider object to look launches the
    instance instead of reporting it PROVISIONING forever, and the workload runs once."""
    options = {"state_dir": str(tmp_path), "grace_period": 1}
    try:
        path = _interrupted_launch(LocalProvider("local", options), make_pod(args=("echo started; exec sleep 300",)))
        restarted = LocalProvider("local", options)
        assert [i.state for i in restarted.list()] == [InstanceState.PROVISIONING]
        instance_id = INSTANCE
        wait_for(lambda: restarted.get(instance_id).state is InstanceState.RUNNING)  # type: ignore[union-attr]
        wait_for(lambda: read_all(restarted, instance_id) == b"started\n")
        restarted.list()  # another look launches nothing more
        assert len(live_supervisors(path)) == 1
        assert read_all(restarted, instance_id) == b"started\n"
    finally:
        terminate_all(LocalProvider("local", options))
        kill_leftovers(tmp_path)


def test_a_provision_retried_after_an_interrupted_launch_starts_the_instance(provider: LocalProvider) -> None:
    path = _interrupted_launch(provider, make_pod(args=("echo started; exec sleep 300",)))
    result = provider.provision(make_pod(args=("echo started; exec sleep 300",)), request())
    assert (path / "launch.json").exists()  # provision returns once the supervisor recorded itself
    wait_for(lambda: read_all(provider, result.instance_id) == b"started\n")
    assert len(live_supervisors(path)) == 1


def test_concurrent_launchers_of_one_instance_start_one_supervisor(provider: LocalProvider) -> None:
    """The launch lock: however many launchers race (a resuming observer, a retried
    provision, a second manager), one supervisor runs the workload and the rest exit 0."""
    path = _interrupted_launch(provider, make_pod(args=("echo started; exec sleep 300",)))
    errors: list[BaseException] = []

    def start() -> None:
        try:
            launch.start_supervisor(path)
        except BaseException as exc:  # collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(live_supervisors(path)) == 1
    instance_id = INSTANCE
    wait_for(lambda: read_all(provider, instance_id) == b"started\n")
    launch.start_supervisor(path)  # the workload ran already: a late launcher runs nothing
    assert len(live_supervisors(path)) == 1 and read_all(provider, instance_id) == b"started\n"


def test_a_resumed_launch_that_fails_reports_the_instance_failed_with_the_reason(provider: LocalProvider) -> None:
    path = _interrupted_launch(provider, make_pod(args=("echo started",)))
    (path / "supervisor.lock").mkdir()  # the launcher cannot open its lock: it fails
    instance_id = INSTANCE
    assert provider.get(instance_id).state is InstanceState.PROVISIONING  # type: ignore[union-attr]

    def failed() -> Instance | None:
        instance = provider.get(instance_id)
        return instance if instance is not None and instance.state is InstanceState.FAILED else None

    instance = wait_for(failed)
    assert instance.message.startswith("the workload was never started: the supervisor for ns-pod-abcdefghij")
    assert read_all(provider, instance_id) == b"" and live_supervisors(path) == []
    (path / "supervisor.lock").rmdir()  # so the fixture's terminate can clean up


def test_terminate_during_a_late_launch_leaves_no_workload_and_then_the_folder_goes(provider: LocalProvider) -> None:
    """A terminate that lands while a launcher holds the launch lock (before it recorded the
    supervisor) must not delete the folder under it; the supervisor then sees the terminate,
    runs nothing, and the folder goes once it exits."""
    path = _interrupted_launch(provider, make_pod(args=("echo started; exec sleep 300",)))
    instance_id = INSTANCE
    lock = folder.take_launch_lock(path)  # a launcher between taking the lock and forking
    assert lock is not None
    provider.terminate(instance_id)
    assert path.exists() and (path / "terminate.json").exists()
    assert folder.take_launch_lock(path) is None  # while held, nobody else gets it
    lock.close()  # the launcher carries on: its supervisor finds the terminate
    launch.start_supervisor(path)
    wait_for(lambda: provider.get(instance_id) is None)
    assert not path.exists() and live_supervisors(path) == []
