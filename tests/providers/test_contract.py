"""The behavioural contract every provider honours (design §4), run against each one.

A `Cloud` fixture yields a factory of provider objects that share one backing state, so a
new object stands for the manager restarted on the same state. The stop tests name their
workload by its container: local runs the Pod's command (a shell trap), the fake clouds
follow their scenario's `sigterm` script for that name (STOP_SCRIPTS).
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from providers import errors
from providers.base import (
    ContainerStopper,
    Instance,
    InstanceId,
    InstanceState,
    LogOptions,
    LogStreamer,
    PodSpec,
    Provider,
    ProvisionRequest,
)
from providers.claim import claim_name
from providers.fake.scenario import DEFAULT_SCENARIO
from providers.shape import ContainerState
from tests.support.polling import read_to_end, wait_for

ProviderFactory = Callable[[], Provider]
# The stop tests' workloads, by container name: a trap that works 2 s (its checkpoint line
# printed after) then exits 143, and one that ignores SIGTERM. `up` is printed once the
# trap is set. The fake clouds run the same behaviour from their scenario.
LOOP = "echo up; while true; do sleep 0.05; done"
TRAPPER = ("sh", "-c", f"trap 'sleep 2; echo checkpoint saved; exit 143' TERM; {LOOP}")
STUBBORN = ("sh", "-c", f"trap '' TERM; {LOOP}")
STOP_SCRIPTS = {"trapper": {"sigterm": {"seconds": 2, "exit_code": 143}}, "stubborn": {"sigterm": "ignore"}}
FAKE_SCENARIO = {**DEFAULT_SCENARIO, "workload": {"containers": STOP_SCRIPTS}}
SLACK = 3.0  # seconds of scheduling on a busy 2-core machine


@pytest.fixture(params=["local", "fake", "fake-http", "aws", "runpod", "modal"])
def make_provider(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProviderFactory]:
    """A factory of provider objects on one shared state; every instance is terminated after."""
    made: list[Provider] = []

    if request.param == "local":
        from providers.local import LocalProvider

        build: ProviderFactory = functools.partial(
            LocalProvider, "local", {"state_dir": str(tmp_path), "grace_period": 1}
        )
        close: Callable[[], None] = lambda: None  # noqa: E731
    elif request.param == "fake":
        from providers.fake import FakeProvider

        cloud = f"contract-{uuid.uuid4().hex}"

        build = functools.partial(FakeProvider, "fake", {"cloud": cloud, "scenario": FAKE_SCENARIO})
        close = lambda: None  # noqa: E731
    elif request.param == "aws":
        from moto import mock_aws

        from providers.aws import AwsProvider

        mock = mock_aws()  # in-process EC2; a new provider object is a restarted manager
        mock.start()
        options = {"regions": ["us-east-1"], "ami": "ami-12c6146b", "max_attempts": 1, "ssh": False}

        build = functools.partial(AwsProvider, "aws", options)
        close = mock.stop
    elif request.param == "runpod":
        import importlib

        from providers.runpod import RunPodProvider

        # By name: mypy run on this file alone would take tests/providers/runpod for the SDK's `runpod`.
        reason = importlib.import_module("tests.providers.runpod.runpod_pods").can_run_pods()
        if reason:
            pytest.skip(reason)
        fake_runpod = importlib.import_module("tests.providers.runpod.fake_runpod")
        fake = fake_runpod.start_fake_runpod(folder=tmp_path / "runpod")  # a new provider object: a restarted manager
        (tmp_path / "runpod-creds").mkdir()
        (tmp_path / "runpod-creds" / "RUNPOD_API_KEY").write_text(fake.api_key)
        runpod_options = {"api_base_url": fake.url, "credentials_dir": str(tmp_path / "runpod-creds")}

        build = functools.partial(RunPodProvider, "runpod", runpod_options)
        close = fake.close
    elif request.param == "modal":
        from providers.modal import ModalProvider
        from providers.modal.fake import start_fake_modal

        request.getfixturevalue("monkeypatch").setenv("MODAL_SANDBOX_V2", "0")  # the fake serves V1 sandboxes
        fake_modal = start_fake_modal()
        (tmp_path / "MODAL_TOKEN_ID").write_text(fake_modal.token_id)
        (tmp_path / "MODAL_TOKEN_SECRET").write_text(fake_modal.token_secret)
        modal_options = {"server_url": fake_modal.url, "credentials_dir": str(tmp_path)}

        build = functools.partial(ModalProvider, "modal", modal_options)  # a new object: the manager restarted
        close = fake_modal.close
    else:
        from providers.fake import FakeProvider
        from providers.fake.server import start_server

        server = start_server(scenario=FAKE_SCENARIO)

        build = functools.partial(FakeProvider, "fake", {"url": server.url})
        close = server.close

    def factory() -> Provider:
        provider = build()
        made.append(provider)
        return provider

    try:
        yield factory
    finally:
        if made:
            for instance in made[-1].list():
                made[-1].terminate(instance.id)
        close()


def make_pod(name: str = "worker", **overrides: object) -> PodSpec:
    values: dict[str, object] = {
        "namespace": "default",
        "name": name,
        "uid": str(uuid.uuid4()),
        "container": "main",
        "image": "busybox",
        "command": ("sh", "-c", "sleep 60"),
    }
    values.update(overrides)
    return PodSpec(**values)  # type: ignore[arg-type]


def request_for(pod: PodSpec, **env: str) -> ProvisionRequest:
    return ProvisionRequest(claim=claim_name(pod.namespace, pod.name, pod.uid), env=env)


def test_provision_is_idempotent_on_the_claim(make_provider: ProviderFactory) -> None:
    """I1: a retried provision for one claim adopts the first instance."""
    provider = make_provider()
    pod = make_pod()
    first = provider.provision(pod, request_for(pod))
    second = provider.provision(pod, request_for(pod))
    assert second.instance_id == first.instance_id
    assert second.credential is None
    claims = [i.claim for i in provider.list()]
    assert claims.count(request_for(pod).claim) == 1


def test_a_new_provider_object_adopts_instead_of_duplicating(make_provider: ProviderFactory) -> None:
    """I1 across a restart: the new object finds the claim and returns the same instance."""
    pod = make_pod()
    first = make_provider().provision(pod, request_for(pod))
    again = make_provider().provision(pod, request_for(pod))
    assert again.instance_id == first.instance_id


def test_terminate_is_idempotent_and_then_the_instance_is_gone_or_terminated(make_provider: ProviderFactory) -> None:
    """A provider may keep a terminated instance visible, as TERMINATED, while it keeps its
    output (the fake's retention, EC2's hour); nothing else may remain of it."""
    provider = make_provider()
    pod = make_pod()
    result = provider.provision(pod, request_for(pod))
    provider.terminate(result.instance_id)
    provider.terminate(result.instance_id)

    def gone(instance: Instance | None) -> bool:
        return instance is None or instance.state is InstanceState.TERMINATED

    wait_for(lambda: gone(provider.get(result.instance_id)), 15)
    provider.terminate(result.instance_id)
    assert all(gone(i) for i in provider.list() if i.id == result.instance_id)


def test_unknown_instance_is_none_and_terminating_it_succeeds(make_provider: ProviderFactory) -> None:
    provider = make_provider()
    assert provider.get(InstanceId("never-existed")) is None
    provider.terminate(InstanceId("never-existed"))


def test_list_finds_every_instance_by_claim_from_a_new_provider_object(make_provider: ProviderFactory) -> None:
    pods = [make_pod(f"w{i}") for i in range(3)]
    ids = {request_for(p).claim: make_provider().provision(p, request_for(p)).instance_id for p in pods}
    fresh = make_provider()
    found = {i.claim: i.id for i in fresh.list()}
    assert found == ids
    for claim, instance_id in ids.items():
        instance = fresh.get(instance_id)
        assert instance is not None and instance.claim == claim


def test_a_provisioned_instance_reaches_running(make_provider: ProviderFactory) -> None:
    provider = make_provider()
    pod = make_pod()
    result = provider.provision(pod, request_for(pod))

    def running() -> bool:
        instance = provider.get(result.instance_id)
        return instance is not None and instance.state is InstanceState.RUNNING

    wait_for(running, 15)


def test_secret_env_values_never_appear_in_reprs_or_errors(make_provider: ProviderFactory) -> None:
    """I4 at the seam: the request's repr names keys only."""
    pod = make_pod()
    request = request_for(pod, API_TOKEN="s3cr3t-value")
    assert "s3cr3t-value" not in repr(request)
    result = make_provider().provision(pod, request)
    assert "s3cr3t-value" not in repr(result)


def test_only_provider_errors_escape(make_provider: ProviderFactory) -> None:
    """Bad input comes back as a providers.errors type, never an OS or HTTP exception."""
    provider = make_provider()
    pod = make_pod(command=(), args=(), image="")
    try:
        provider.provision(pod, request_for(pod))
    except errors.ProviderError:
        pass
    for bad in (InstanceId(""), InstanceId("../../etc"), InstanceId("x" * 300)):
        try:
            provider.get(bad)
            provider.terminate(bad)
        except errors.ProviderError:
            pass


def test_capabilities_offerings_and_regions_are_well_formed(make_provider: ProviderFactory) -> None:
    provider = make_provider()
    caps = provider.capabilities()
    assert caps.poll_interval > 0 and caps.tiers
    offerings = provider.offerings()
    assert offerings and all(o.gpu_count >= 0 for o in offerings)
    regions = provider.expand_regions([o.region for o in offerings])
    assert len(regions) == len(set(regions))


def stopper(provider: Provider, request: pytest.FixtureRequest) -> ContainerStopper:
    """The provider as a ContainerStopper; a skip, with its reason, where it cannot be one here."""
    param = request.node.callspec.params["make_provider"]
    if param == "aws":
        pytest.skip("stop_container needs SSH (off here); tests/providers/aws covers AWS over SSH")
    if param == "runpod":
        pytest.skip(
            "stop_container signals over SSH, which this fixture does not serve; tests/providers/runpod covers it"
        )
    assert isinstance(provider, ContainerStopper), f"{param}: every provider stops a container gracefully"
    return provider


def started(provider: Provider, name: str, command: tuple[str, ...]) -> InstanceId:
    """An instance running `name`, once its first output shows (for a shell: its trap is set)."""
    pod = make_pod(name, container=name, command=command)
    instance_id = provider.provision(pod, request_for(pod)).instance_id
    if isinstance(provider, LogStreamer):
        options = LogOptions(container=name)
        wait_for(lambda: read_to_end(provider.logs(instance_id, options)), 30, ignoring=(errors.NotFound,))
    wait_for(lambda: (i := provider.get(instance_id)) is not None and i.state is InstanceState.RUNNING, 30)
    return instance_id


def exit_of(provider: Provider, instance_id: InstanceId, name: str) -> tuple[int | None, datetime | None] | None:
    """The container's exit code and finish time once it ended (its ContainerFacts, or the
    instance's for a provider that reports none); None while it runs."""
    instance = provider.get(instance_id)
    assert instance is not None
    facts = next((c for c in instance.containers if c.name == name), None)
    if facts is not None:
        return (facts.exit_code, facts.finished_at) if facts.state is ContainerState.TERMINATED else None
    if instance.state in (InstanceState.SUCCEEDED, InstanceState.FAILED):
        return instance.exit_code, instance.finished_at
    return None


@dataclass(frozen=True)
class Stoppable:
    """One container of a started instance, and the provider as its ContainerStopper."""

    provider: Provider
    stop: ContainerStopper
    instance_id: InstanceId
    name: str
    poll: float

    def stop_and_wait(self, grace: float, within: float) -> tuple[int | None, float]:
        """Stop it with `grace`; its exit code and how long after the ask it finished."""
        asked = time.time()
        self.stop.stop_container(self.instance_id, self.name, grace=grace)
        assert time.time() - asked < SLACK  # returns once asked, never waiting the grace out
        code, finished = wait_for(
            lambda: exit_of(self.provider, self.instance_id, self.name), within, what=f"{self.name} ended"
        )
        assert finished is not None
        return code, finished.timestamp() - asked


def stoppable(make_provider: ProviderFactory, request: pytest.FixtureRequest, name: str) -> Stoppable:
    """A started `trapper` or `stubborn` (STOP_SCRIPTS) on this provider; a skip where it cannot stop one."""
    provider = make_provider()
    stop = stopper(provider, request)
    instance_id = started(provider, name, TRAPPER if name == "trapper" else STUBBORN)
    return Stoppable(provider, stop, instance_id, name, provider.capabilities().poll_interval)


def test_stop_container_lets_a_sigterm_trap_finish_its_work_and_reports_its_own_143(
    make_provider: ProviderFactory, request: pytest.FixtureRequest
) -> None:
    run = stoppable(make_provider, request, "trapper")
    asked = time.time()
    code, took = run.stop_and_wait(grace=10, within=2 + run.poll + SLACK)
    assert code == 143 and took >= 1.9  # it worked its 2 s after SIGTERM, then exited by itself
    if isinstance(run.provider, LogStreamer):  # and its output went on after SIGTERM, up to its exit
        log = read_to_end(run.provider.logs(run.instance_id, LogOptions(container="trapper", timestamps=True)))
        stamps = [datetime.fromisoformat(line.split(b" ", 1)[0].decode()) for line in log.splitlines()]
        assert any(stamp.timestamp() >= asked + 0.9 for stamp in stamps)


def test_stop_container_kills_a_workload_that_ignores_sigterm_with_137_when_the_grace_ends(
    make_provider: ProviderFactory, request: pytest.FixtureRequest
) -> None:
    run = stoppable(make_provider, request, "stubborn")
    code, took = run.stop_and_wait(grace=1, within=1 + run.poll + SLACK)
    assert code == 137 and took >= 0.9


def test_stop_container_with_grace_zero_kills_at_once(
    make_provider: ProviderFactory, request: pytest.FixtureRequest
) -> None:
    run = stoppable(make_provider, request, "trapper")
    code, took = run.stop_and_wait(grace=0, within=run.poll + SLACK)
    assert code == 137 and took < 1.0  # SIGKILL alone: the trap never ran


def test_a_second_stop_with_a_shorter_grace_shortens_the_wait(
    make_provider: ProviderFactory, request: pytest.FixtureRequest
) -> None:
    """A force delete after a graceful one; a longer grace after that never lengthens it."""
    run = stoppable(make_provider, request, "stubborn")
    run.stop.stop_container(run.instance_id, "stubborn", grace=120)
    code, took = run.stop_and_wait(grace=1, within=1 + run.poll + SLACK)
    assert code == 137 and 0.9 <= took < 1 + run.poll + SLACK
    run.stop.stop_container(run.instance_id, "stubborn", grace=120)  # not running: success
