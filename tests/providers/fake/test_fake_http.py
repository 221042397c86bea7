"""The fake cloud as an HTTP service: a provider over HTTP, typed errors, a stopped
service is Unavailable, the state file outlives the service, bounded bodies, and
`manage.py fakecloud` against a running service."""

from __future__ import annotations

import argparse
import http.client
import io
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from providers import errors
from providers.base import ClaimName, Instance, InstanceId, InstanceState, LogOptions, ProvisionRequest, Tier
from providers.fake import FakeProvider, wire
from providers.fake import command as fakecloud
from providers.fake.server import MAX_BODY, FakeCloudServer, start_server
from providers.shape import ContainerFacts, ContainerSpec, ContainerState, Mount, Volume, VolumeFile
from tests.support.factories import make_pod_spec

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def server() -> Iterator[FakeCloudServer]:
    running = start_server()
    yield running
    running.close()


def request(claim: str, **kwargs: Any) -> ProvisionRequest:
    return ProvisionRequest(claim=ClaimName(claim), env={"SECRET": "s3cr3t"}, **kwargs)


def raw_call(
    url: str, method: str, path: str, body: bytes | None = None, *, length: int | None = None
) -> tuple[int, dict[str, Any]]:
    """One request; `length` overrides the Content-Length header (the body sent stays short)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        headers = {} if length is None else {"Content-Length": str(length)}
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def manage(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "fakecloud", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_provider_over_http_provisions_lists_and_terminates(server: FakeCloudServer) -> None:
    provider = FakeProvider("fake", {"url": server.url})
    result = provider.provision(make_pod_spec(accelerator="h100", gpu_count=8), request("a", capacity_type=Tier.SPOT))
    assert result.credential is not None and result.credential.data["token"]
    assert provider.provision(make_pod_spec(), request("a")).credential is None
    [instance] = provider.list()
    assert (instance.id, instance.claim, instance.capacity_type) == (result.instance_id, "a", Tier.SPOT)
    assert provider.get(result.instance_id) == instance
    provider.terminate(result.instance_id)
    terminated = provider.get(result.instance_id)
    assert terminated is not None and terminated.state is InstanceState.TERMINATED
    assert provider.list() == [terminated]
    assert "s3cr3t" not in json.dumps([c.to_dict() for c in server.cloud.call_log()])


def test_a_second_provider_object_sees_the_same_instances(server: FakeCloudServer) -> None:
    first = FakeProvider("fake", {"url": server.url})
    ids = {first.provision(make_pod_spec(), request(f"c{i}")).instance_id for i in range(3)}
    second = FakeProvider("fake", {"url": server.url + "/"})
    assert {i.id for i in second.list()} == ids


def test_refusals_and_outages_cross_the_wire_as_the_same_error_types(server: FakeCloudServer) -> None:
    provider = FakeProvider("fake", {"url": server.url})
    kinds = (
        ("capacity", errors.NoCapacity),
        ("auth", errors.Unauthorized),
        ("quota", errors.QuotaExceeded),
        ("invalid", errors.InvalidRequest),
        ("unsupported", errors.NotSupported),
    )
    for reason, error in kinds:
        server.cloud.refuse(reason, count=1)
        with pytest.raises(error):
            provider.provision(make_pod_spec(), request("r"))
    with pytest.raises(errors.InvalidRequest):
        provider.provision(make_pod_spec(accelerator="b200", gpu_count=1), request("x"))
    server.cloud.outage(seconds=30)
    with pytest.raises(errors.Unavailable) as caught:
        provider.list()
    assert caught.value.retry_after == pytest.approx(30, abs=1)
    server.cloud.clear()
    assert provider.offerings()


def test_every_provider_call_over_http_is_counted_by_its_kind_on_the_service(server: FakeCloudServer) -> None:
    provider = FakeProvider("fake", {"url": server.url})
    instance_id = provider.provision(make_pod_spec(), request("a")).instance_id
    provider.get(instance_id)
    provider.list()
    provider.logs(instance_id, LogOptions()).close()
    server.cloud.exit(instance_id, code=3)
    provider.restart(instance_id)
    provider.terminate(instance_id)
    kinds = ("provision", "get", "list", "logs", "restart", "terminate")
    assert provider.client is not None
    counts = provider.client.call_counts()
    assert {kind: counts.get(kind) for kind in kinds} == dict.fromkeys(kinds, 1)
    assert json.loads(control("calls", "--url", server.url, "--counts")) == counts


def test_a_hide_fault_injected_from_the_shell_omits_the_instance_from_the_next_list(server: FakeCloudServer) -> None:
    provider = FakeProvider("fake", {"url": server.url})
    instance_id = provider.provision(make_pod_spec(), request("a")).instance_id
    control("inject", "--url", server.url, "hide", "--instance", instance_id, "--count", "2")
    assert provider.list() == provider.list() == []
    assert provider.get(instance_id) is not None
    assert [i.id for i in provider.list()] == [instance_id]
    control("inject", "--url", server.url, "hide", "--claim", "a")
    assert provider.list() == []
    control("inject", "--url", server.url, "refuse", "--kind", "invalid", "--count", "1")
    with pytest.raises(errors.InvalidRequest, match="cpu x0 OnDemand in us-east-1"):
        provider.provision(make_pod_spec(), request("b"))


def test_losing_an_instance_with_vanish_takes_it_out_of_list_and_get(server: FakeCloudServer) -> None:
    provider = FakeProvider("fake", {"url": server.url})
    instance_id = provider.provision(make_pod_spec(), request("a")).instance_id
    kept = provider.provision(make_pod_spec(), request("b")).instance_id
    control("inject", "--url", server.url, "lose", "--claim", "a", "--vanish")
    control("inject", "--url", server.url, "lose", "--instance", kept)
    assert provider.get(instance_id) is None
    [lost] = provider.list()
    assert (lost.id, lost.state, lost.preempted) == (kept, InstanceState.TERMINATED, True)


def test_a_stopped_service_is_unavailable_for_every_call() -> None:
    running = start_server()
    provider = FakeProvider("fake", {"url": running.url, "timeout": 5})
    instance_id = provider.provision(make_pod_spec(), request("a")).instance_id
    running.close()
    calls: list[Callable[[], object]] = [
        lambda: provider.provision(make_pod_spec(), request("b")),
        lambda: provider.get(instance_id),
        lambda: provider.list(),
        lambda: provider.terminate(instance_id),
        lambda: provider.offerings(),
        lambda: provider.logs(instance_id, LogOptions()),
        lambda: provider.restart(instance_id),
    ]
    for call in calls:
        with pytest.raises(errors.ProviderError) as caught:
            call()
        assert type(caught.value) is errors.Unavailable
    assert provider.capabilities().poll_interval > 0  # pure methods still answer


def test_the_state_file_outlives_the_service(tmp_path: Path) -> None:
    state = tmp_path / "state" / "fake.json"
    first = start_server(state_path=state)
    provider = FakeProvider("fake", {"url": first.url})
    kept = provider.provision(make_pod_spec(), request("kept")).instance_id
    first.cloud.refuse("quota", region="eu-west-1")
    first.close()
    second = start_server(state_path=state)
    try:
        again = FakeProvider("fake", {"url": second.url})
        assert [(i.id, i.claim) for i in again.list()] == [(kept, "kept")]
        assert again.provision(make_pod_spec(), request("kept")).instance_id == kept
        assert again.provision(make_pod_spec(), request("new")).instance_id != kept
        assert [f.reason for f in second.cloud.faults()] == ["quota"]
    finally:
        second.close()


def test_a_corrupt_state_file_stops_the_start(tmp_path: Path) -> None:
    state = tmp_path / "fake.json"
    state.write_text("{not json")
    with pytest.raises(ValueError):
        start_server(state_path=state)


def test_pure_methods_over_http_use_the_services_scenario() -> None:
    scenario = {
        "poll_interval": 2.5,
        "regions": {"ap": ["ap-south-1", "ap-northeast-1"]},
        "offerings": [{"accelerator": None, "tier": "Spot", "regions": ["ap-south-1", "ap-northeast-1"]}],
    }
    running = start_server(scenario=scenario)
    try:
        provider = FakeProvider("fake", {"url": running.url})
        caps = provider.capabilities()
        assert (caps.poll_interval, caps.tiers, caps.regions) == (2.5, (Tier.SPOT,), ("ap-south-1", "ap-northeast-1"))
        assert provider.expand_regions(["AP", "ap-south-1", "mars-1"]) == ["ap-south-1", "ap-northeast-1", "mars-1"]
    finally:
        running.close()


def test_logs_and_an_exec_without_stdin_work_over_http_and_an_interactive_exec_is_not_supported(
    server: FakeCloudServer,
) -> None:
    provider = FakeProvider("fake", {"url": server.url})
    instance_id = provider.provision(make_pod_spec(), request("a")).instance_id
    process = provider.exec(instance_id, ["sh", "-c", "echo hi"], tty=False, stdin=False)
    assert (process.read_stdout(), process.read_stdout(), process.wait(), process.read_stderr()) == (
        b"hi\n",
        b"",
        0,
        b"",
    )
    for tty, stdin in ((True, False), (False, True)):
        with pytest.raises(errors.NotSupported):
            provider.exec(instance_id, ["cat"], tty=tty, stdin=stdin)
    stream = provider.logs(instance_id, LogOptions(follow=True))
    assert stream.read().startswith(f"fake instance {instance_id} line 1\n".encode())
    server.cloud.exit(instance_id, code=0)
    while stream.read():
        pass
    stream.close()
    with pytest.raises(errors.NotFound):
        provider.exec(instance_id, ["true"], tty=False, stdin=False)  # it exited
    with pytest.raises(errors.NotFound):
        provider.logs(InstanceId("fake-404"), LogOptions())


def test_bodies_are_bounded_and_malformed_requests_answered_with_400(server: FakeCloudServer) -> None:
    # The declared length is what is refused: the service never reads an oversized body.
    status, answer = raw_call(server.url, "POST", "/v1/faults", b"{}", length=MAX_BODY + 1)
    assert status == 413
    status, answer = raw_call(server.url, "POST", "/v1/faults", b"{not json")
    assert status == 400 and "malformed JSON" in answer["error"]["message"]
    status, answer = raw_call(server.url, "POST", "/v1/faults", b'{"kind": "melt"}')
    assert status == 400 and "melt" in answer["error"]["message"]
    status, answer = raw_call(server.url, "POST", "/v1/provision", b'{"pod": {}}')
    assert status == 400
    assert raw_call(server.url, "GET", "/v1/nothing")[0] == 404
    assert raw_call(server.url, "GET", "/healthz") == (200, {"ok": True})


def test_odd_instance_ids_are_answered_not_crashed(server: FakeCloudServer) -> None:
    provider = FakeProvider("fake", {"url": server.url})
    for odd in ("", "../../etc", "a/b?c=d#e", "x" * 300, "ünï"):
        assert provider.get(InstanceId(odd)) is None
        provider.terminate(InstanceId(odd))


def test_manage_py_fakecloud_inject_changes_a_running_service(server: FakeCloudServer) -> None:
    provider = FakeProvider("fake", {"url": server.url})
    refuse = ["refuse", "--kind", "capacity", "--accelerator", "h100", "--tier", "Spot"]
    done = manage("inject", "--url", server.url, *refuse)
    assert done.returncode == 0, done.stderr
    with pytest.raises(errors.NoCapacity):
        provider.provision(make_pod_spec(accelerator="h100", gpu_count=8), request("a", capacity_type=Tier.SPOT))
    provider.provision(make_pod_spec(accelerator="h100", gpu_count=8), request("b", capacity_type=Tier.ON_DEMAND))
    cleared = manage("clear", "--url", server.url)
    assert cleared.returncode == 0 and cleared.stdout.strip() == "removed 1 fault(s)"
    provider.provision(make_pod_spec(accelerator="h100", gpu_count=8), request("a", capacity_type=Tier.SPOT))


def control(*argv: str) -> str:
    """`fakecloud` verbs through the same parser and function as the command, in-process."""
    parser = argparse.ArgumentParser()
    fakecloud.add_arguments(parser)
    out = io.StringIO()
    fakecloud.run_fakecloud(vars(parser.parse_args(argv)), out)
    return out.getvalue()


def test_the_control_verbs_list_inject_and_report_errors(server: FakeCloudServer) -> None:
    provider = FakeProvider("fake", {"url": server.url})
    instance_id = provider.provision(make_pod_spec(), request("a")).instance_id
    control("inject", "--url", server.url, "outage", "--seconds", "60")
    control("inject", "--url", server.url, "slow", "--delay", "0.01")
    assert [json.loads(line)["kind"] for line in control("faults", "--url", server.url).splitlines()] == [
        "outage",
        "slow",
    ]
    with pytest.raises(errors.Unavailable):
        provider.list()
    assert control("clear", "--url", server.url, "--fault", "f-1") == "removed 1 fault(s)\n"
    control("inject", "--url", server.url, "exit", "--instance", instance_id, "--code", "4")
    assert " failed " in control("instances", "--url", server.url)
    calls = [json.loads(line) for line in control("calls", "--url", server.url, "--method", "list").splitlines()]
    assert [c["outcome"].split(":")[0] for c in calls] == ["Unavailable"]
    with pytest.raises(fakecloud.ControlError, match="no instance fake-404"):
        control("inject", "--url", server.url, "lose", "--instance", "fake-404")
    assert control("reset", "--url", server.url) == "reset\n" and provider.list() == []
    with pytest.raises(fakecloud.ControlError, match="Unavailable"):
        control("faults", "--url", "http://127.0.0.1:1")


def test_manage_py_fakecloud_serve_runs_until_sigterm(tmp_path: Path) -> None:
    state = tmp_path / "fake.json"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "fakecloud", "serve", "--addr", "127.0.0.1:0", "--state", str(state)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        first: list[str] = []
        reader = threading.Thread(target=lambda: first.append(proc.stdout.readline() if proc.stdout else ""))
        reader.start()
        reader.join(60)
        assert first and "serving on http://127.0.0.1:" in first[0], first
        url = first[0].split("serving on ")[1].strip()
        FakeProvider("fake", {"url": url}).provision(make_pod_spec(), request("served"))
        assert json.loads(state.read_text())["instances"][0]["claim"] == "served"
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr


def test_a_pods_containers_and_volume_paths_cross_the_wire_but_never_env_values_or_volume_contents() -> None:
    mounts = (Mount("cfg", "/etc/cfg", sub_path="a.yaml", read_only=True),)
    app = ContainerSpec("app", "img", ("run",), ("--x",), "/w", (8080,), stdin=True, tty=True, mounts=mounts)
    inits = (ContainerSpec("proxy", sidecar=True), ContainerSpec("migrate", command=("m",)))
    pod = make_pod_spec(container="app", containers=(app, ContainerSpec("helper")), init_containers=inits,
                        restart_policy="OnFailure", stdin=True)  # fmt: skip
    assert wire.pod_from_json(json.loads(json.dumps(wire.pod_to_json(pod)))) == pod
    volumes = (Volume("cfg", "secret", (VolumeFile("a.yaml", b"s3cr3t-bytes", 0o400),), default_mode=0o440),)
    sent = ProvisionRequest(
        claim=ClaimName("a"), env={"K": "s3cr3t"}, container_env={"helper": {"H": "s3cr3t"}}, volumes=volumes
    )
    text = json.dumps(wire.request_to_json(sent))
    assert "s3cr3t" not in text
    got = wire.request_from_json(json.loads(text))
    assert (got.env, got.container_env) == ({"K": ""}, {"helper": {"H": ""}})
    assert got.volumes == (Volume("cfg", "secret", (VolumeFile("a.yaml", b"", 0o400),), default_mode=0o440),)
    facts = ContainerFacts("app", ContainerState.TERMINATED, init=True, started_at=datetime(2026, 1, 1, tzinfo=UTC),
                           finished_at=datetime(2026, 1, 2, tzinfo=UTC), exit_code=3, exit_reason="Error",
                           message="m", runs=2)  # fmt: skip
    instance = Instance(InstanceId("fake-1"), ClaimName("a"), InstanceState.FAILED, datetime(2026, 1, 1, tzinfo=UTC),
                        containers=(facts, ContainerFacts("helper", ContainerState.WAITING)))  # fmt: skip
    assert wire.instance_from_json(json.loads(json.dumps(wire.instance_to_json(instance)))) == instance


def test_the_control_verbs_exit_one_container_and_put_and_remove_a_file_in_a_running_service(
    server: FakeCloudServer,
) -> None:
    provider = FakeProvider("fake", {"url": server.url})
    pod = make_pod_spec(container="app", containers=(ContainerSpec("app"), ContainerSpec("helper")))
    instance_id = provider.provision(pod, request("a")).instance_id
    control(
        "inject", "--url", server.url, "file", "--instance", instance_id, "--container", "helper", "--path", "/ready"
    )
    probe = provider.exec(instance_id, ["cat", "/ready"], tty=False, stdin=False, container="helper")
    assert probe.wait() == 0
    control(
        "inject", "--url", server.url, "file", "--claim", "a", "--container", "helper", "--path", "/ready", "--absent"
    )
    assert provider.exec(instance_id, ["cat", "/ready"], tty=False, stdin=False, container="helper").wait() == 1
    control("inject", "--url", server.url, "exit", "--instance", instance_id, "--container", "helper", "--code", "7")
    found = provider.get(instance_id)
    assert found is not None and found.state is InstanceState.RUNNING
    assert [(c.name, c.state, c.exit_code) for c in found.containers] == [
        ("app", ContainerState.RUNNING, None), ("helper", ContainerState.TERMINATED, 7),
    ]  # fmt: skip
    with pytest.raises(fakecloud.ControlError, match="InvalidRequest"):
        control(
            "inject", "--url", server.url, "exit", "--instance", instance_id, "--container", "helper", "--code", "1"
        )
