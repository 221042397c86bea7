"""The fake RunPod through the real runpod SDK: pods deploy, list, stop, resume and terminate;
each pod is a real process in its own mount namespace, reachable as root over SSH with the key
its PUBLIC_KEY env var carried; spot pods are bid for and interrupted; a container that exits
restarts; queued pods have no runtime until released."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncssh
import pytest
import runpod  # type: ignore[import-untyped]
from runpod.api import ctl_commands  # type: ignore[import-untyped]
from runpod.api.graphql import run_graphql_query  # type: ignore[import-untyped]
from runpod.api.mutations.pods import generate_pod_deployment_mutation  # type: ignore[import-untyped]

from tests.providers.runpod.fake_runpod import FakeRunPod, start_fake_runpod
from tests.providers.runpod.runpod_pods import can_run_pods
from tests.support.polling import wait_for

A40 = "NVIDIA A40"


@pytest.fixture(name="fake")
def fake_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRunPod]:
    reason = can_run_pods()
    if reason:
        pytest.skip(reason)
    with start_fake_runpod(folder=tmp_path / "runpod") as fake:
        monkeypatch.setenv("RUNPOD_API_BASE_URL", fake.url)
        monkeypatch.setattr(runpod, "api_key", fake.api_key)
        yield fake


def running(pod_id: str) -> dict[str, Any] | None:
    pod = ctl_commands.get_pod(pod_id)
    return pod if pod and pod["runtime"] else None


def ssh_run(fake: FakeRunPod, pod_id: str, key: asyncssh.SSHKey, command: str) -> str:
    port = ctl_commands.get_pod(pod_id)["runtime"]["ports"][0]
    box = fake.box(pod_id)
    wait_for(box.ssh_listening, what="the pod's sshd")

    async def go() -> str:
        async with asyncssh.connect(
            port["ip"], port["publicPort"], username="root", client_keys=[key], known_hosts=None
        ) as conn:
            assert conn.get_server_host_key().export_public_key().decode().strip() == box.host_key()  # type: ignore[union-attr]
            result = await conn.run(command, check=True, timeout=30)
            return str(result.stdout)

    return asyncio.run(go())


def test_a_pod_deploys_lists_and_terminates_with_runpods_shapes(fake: FakeRunPod) -> None:
    gpu = ctl_commands.get_gpu(A40, 2)
    assert gpu["lowestPrice"] == {"minimumBidPrice": 0.2, "uninterruptablePrice": 0.35}
    assert A40 in [g["id"] for g in ctl_commands.get_gpus()]
    created = ctl_commands.create_pod(
        "trainer", "runpod/base:0.6", A40, cloud_type="SECURE", gpu_count=2, data_center_id="US-TX-3",
        env={"TOKEN": "s3cr3t"}, docker_args="bash -c 'echo started; sleep 600'",
    )  # fmt: skip
    assert created["env"] == ["TOKEN=s3cr3t"] and created["imageName"] == "runpod/base:0.6"
    assert len(created["id"]) == 14 and created["machine"]["podHostId"].startswith(created["id"])
    pod = wait_for(lambda: running(created["id"]), what="a runtime")
    assert pod["desiredStatus"] == "RUNNING" and pod["podType"] == "RESERVED" and pod["gpuCount"] == 2
    assert pod["costPerHr"] == 0.8 and pod["machine"] == {"gpuDisplayName": "A40"} and pod["name"] == "trainer"
    [port] = pod["runtime"]["ports"]
    assert port["privatePort"] == 22 and port["type"] == "tcp" and port["isIpPublic"] is True
    assert [p["id"] for p in ctl_commands.get_pods()] == [created["id"]]
    [view] = fake.pods()
    assert (view.env_keys, view.gpu_type, view.gpu_count, view.cloud_type, view.data_center) == (
        ("TOKEN",), A40, 2, "SECURE", "US-TX-3",
    )  # fmt: skip
    assert "s3cr3t" not in repr(view)
    box = fake.box(created["id"])
    # Its memory is read once its command runs. Just after the start only the first process is
    # counted (the namespace's members are known once the image script wrote its `ns`), and it
    # may have next to nothing resident yet: 0.0 % was read once under load.
    wait_for(lambda: b"started" in (box.folder / "container.log").read_bytes(), what="the start command's output")
    runtime_fields = "runtime { uptimeInSeconds container { memoryPercent } }"
    query = f'query {{ pod(input: {{podId: "{created["id"]}"}}) {{ {runtime_fields} }} }}'
    runtime = run_graphql_query(query)["data"]["pod"]["runtime"]
    assert runtime["uptimeInSeconds"] >= 0 and 0 < runtime["container"]["memoryPercent"] < 100
    ctl_commands.terminate_pod(created["id"])
    assert ctl_commands.get_pods() == [] and ctl_commands.get_pod(created["id"]) is None
    assert not box.running and fake.pods() == []


def test_the_pod_is_reachable_as_root_over_ssh_in_its_own_root(fake: FakeRunPod) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    public = key.export_public_key().decode().strip()
    created = ctl_commands.create_pod(
        "ssh", "runpod/base:0.6", A40, env={"PUBLIC_KEY": public, "GREETING": "hello"},
        docker_args="bash -c 'echo $GREETING $RUNPOD_POD_ID > /root/out; exec sleep 600'",
    )  # fmt: skip
    wait_for(lambda: running(created["id"]), what="a runtime")
    box = fake.box(created["id"])
    wait_for(lambda: box.file("/root/out").exists(), what="the start command's file")
    assert ssh_run(fake, created["id"], key, "id -u; cat /root/out") == f"0\nhello {created['id']}\n"
    assert not os.path.exists("/root/out")  # the pod's /root is its own
    other = ctl_commands.create_pod("other", "runpod/base:0.6", A40, env={"PUBLIC_KEY": public})
    wait_for(lambda: running(other["id"]), what="a second runtime")
    assert ssh_run(fake, other["id"], key, "ls /root") == ""  # a second pod has a root of its own
    assert fake.box(other["id"]).address != box.address


def test_terminate_kills_every_process_of_the_pod_ssh_sessions_included(fake: FakeRunPod) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    created = ctl_commands.create_pod(
        "busy", "img", A40, env={"PUBLIC_KEY": key.export_public_key().decode().strip()}
    )  # fmt: skip
    wait_for(lambda: running(created["id"]), what="a runtime")
    pid = int(ssh_run(fake, created["id"], key, "setsid sleep 600 >/dev/null 2>&1 < /dev/null & echo $!"))
    assert os.path.exists(f"/proc/{pid}")
    ctl_commands.terminate_pod(created["id"])
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), what="the pod's detached process gone")


def test_stop_and_resume_an_on_demand_pod(fake: FakeRunPod) -> None:
    created = ctl_commands.create_pod("s", "img", A40, docker_args="sleep 600")
    wait_for(lambda: running(created["id"]), what="a runtime")
    assert ctl_commands.stop_pod(created["id"]) == {"id": created["id"], "desiredStatus": "EXITED"}
    pod = ctl_commands.get_pod(created["id"])
    assert pod["desiredStatus"] == "EXITED" and pod["runtime"] is None
    assert ctl_commands.resume_pod(created["id"], 1)["desiredStatus"] == "RUNNING"
    wait_for(lambda: running(created["id"]), what="a runtime again")


def spot_mutation(bid: float, **kwargs: Any) -> str:
    text = str(generate_pod_deployment_mutation(gpu_type_id=A40, **kwargs))
    return text.replace("podFindAndDeployOnDemand", "podRentInterruptable").replace(
        "input: {", f"input: {{ bidPerGpu: {bid},", 1
    )


def test_a_spot_pod_is_bid_for_and_interrupted(fake: FakeRunPod) -> None:
    with pytest.raises(runpod.error.QueryError, match="There are no instances available"):
        run_graphql_query(spot_mutation(0.1, name="low", image_name="img"))
    answer = run_graphql_query(spot_mutation(0.25, name="spot", image_name="img", docker_args="sleep 600", gpu_count=2))
    pod_id = answer["data"]["podRentInterruptable"]["id"]
    pod = wait_for(lambda: running(pod_id), what="a spot runtime")
    assert pod["podType"] == "INTERRUPTABLE" and pod["costPerHr"] == 0.5
    [view] = fake.pods()
    assert view.interruptible and view.bid == 0.25
    fake.interrupt(pod_id)
    pod = ctl_commands.get_pod(pod_id)
    assert pod["desiredStatus"] == "EXITED" and pod["runtime"] is None and fake.exit_codes(pod_id) == [137]
    with pytest.raises(runpod.error.QueryError, match="Cannot resume a spot pod as an on demand pod."):
        ctl_commands.resume_pod(pod_id, 2)
    resumed = run_graphql_query(
        f'mutation {{ podBidResume(input: {{podId: "{pod_id}", bidPerGpu: 0.3, gpuCount: 2}}) {{ id desiredStatus }} }}'
    )
    assert resumed["data"]["podBidResume"] == {"id": pod_id, "desiredStatus": "RUNNING"}
    wait_for(lambda: running(pod_id), what="the resumed spot pod's runtime")


def test_an_exited_container_restarts_and_its_exit_codes_are_kept(fake: FakeRunPod) -> None:
    created = ctl_commands.create_pod("x", "img", A40, docker_args="bash -c 'sleep 0.3; exit 3'")
    wait_for(lambda: fake.exit_codes(created["id"]) == [3], what="the first exit")
    assert ctl_commands.get_pod(created["id"])["desiredStatus"] == "RUNNING"
    wait_for(lambda: fake.exit_codes(created["id"])[:2] == [3, 3], timeout=20, what="a restart and second exit")
    sleeper = ctl_commands.create_pod("y", "img", A40, docker_args="sleep 600")["id"]
    wait_for(lambda: running(sleeper), what="a runtime")
    fake.kill(sleeper, 9)
    assert fake.exit_codes(sleeper) == [9] and ctl_commands.get_pod(sleeper)["runtime"] is None
    wait_for(lambda: running(sleeper), what="the killed container restarted")
    fake.restart_on_exit(False)
    fake.kill(sleeper, 9)
    assert fake.exit_codes(sleeper) == [9, 9] and not fake.box(sleeper).running


def test_queued_pods_have_no_runtime_until_released(fake: FakeRunPod) -> None:
    fake.queue(True)
    created = ctl_commands.create_pod("q", "img", A40, docker_args="sleep 600")
    pod = ctl_commands.get_pod(created["id"])
    assert pod["desiredStatus"] == "RUNNING" and pod["runtime"] is None
    assert fake.pods()[0].state == "QUEUED" and not fake.pods()[0].running
    fake.queue(False)
    wait_for(lambda: running(created["id"]), what="the released pod's runtime")


def test_refused_capacity_answers_runpods_no_instances_error(fake: FakeRunPod) -> None:
    fake.refuse_capacity(A40, times=1)
    message = (
        "There are no longer any instances available with the requested specifications. Please refresh and try again."
    )
    with pytest.raises(runpod.error.QueryError) as refused:
        ctl_commands.create_pod("r", "img", A40)
    assert str(refused.value) == message
    other = ctl_commands.create_pod("r2", "img", "NVIDIA RTX A4000")  # another type is not refused
    assert ctl_commands.create_pod("r", "img", A40)["id"] != other["id"]  # refused once only
    fake.refuse_capacity(times=None)
    for _ in range(2):
        with pytest.raises(runpod.error.QueryError, match="no longer any instances"):
            ctl_commands.create_pod("r", "img", A40)
    fake.refuse_capacity(times=0)
    ctl_commands.create_pod("r", "img", A40)
    assert len(ctl_commands.get_pods()) == 3


def test_escaped_strings_in_a_mutation_reach_the_container_verbatim(fake: FakeRunPod) -> None:
    script = 'mkdir -p /var/log/w\nprintf "%s\\n" "a \\"quoted\\" $HOME" > /var/log/w/out\nexec sleep 600'
    fields = {"name": "esc", "imageName": "img", "gpuTypeId": A40, "dockerArgs": "bash -c 'eval \"$SCRIPT\"'"}
    inputs = ", ".join(f"{key}: {json.dumps(value)}" for key, value in fields.items())
    mutation = (
        f"mutation {{ podFindAndDeployOnDemand(input: {{ cloudType: COMMUNITY, gpuCount: 1, {inputs}, "
        f'env: [{{ key: "SCRIPT", value: {json.dumps(script)} }}] }}) {{ id env }} }}'
    )
    created = run_graphql_query(mutation)["data"]["podFindAndDeployOnDemand"]
    assert created["env"] == [f"SCRIPT={script}"]
    box = fake.box(created["id"])
    wait_for(lambda: box.file("/var/log/w/out").exists(), what="the script's file in the pod's /var/log")
    wait_for(lambda: box.file("/var/log/w/out").read_text() == 'a "quoted" /root\n', what="the whole line")
    assert fake.pods()[0].cloud_type == "COMMUNITY" and ctl_commands.get_pod(created["id"])["costPerHr"] == 0.35
