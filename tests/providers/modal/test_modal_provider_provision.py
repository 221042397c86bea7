"""`ModalProvider` against the fake Modal API through the real SDK: what a Pod becomes
(command, env as a Secret, GPU, cpu, memory, region, egress, tags), idempotence on the
claim, restart adoption, states and real exit codes, terminate, the connect credential."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from providers import errors
from providers.base import InstanceId, InstanceState
from providers.egress import Egress, EgressMode, allowlist
from providers.modal import status
from providers.pullauth import RegistryAuth
from tests.providers.modal.modal_rig import fake_modal, make_pod, provider_on, request_for
from tests.support.polling import wait_for

__all__ = ["fake_modal"]


def _record(fake: Any, sandbox_id: str) -> dict[str, Any]:
    return next(r for r in fake.sandboxes() if r["id"] == sandbox_id)


def test_a_pod_becomes_one_sandbox_as_asked(fake_modal: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="providers")
    provider = provider_on(fake_modal, tmp_path)
    pod = make_pod(command=("sh", "-c"), args=("sleep 30",), accelerator="a100-80gb", gpu_count=2, cpu=2.5,
                   memory=3 * 2**30 + 1)  # fmt: skip
    request = request_for(pod, env={"API_TOKEN": "s3cr3t-value"}, region="us-east")
    result = provider.provision(pod, request)
    record = _record(fake_modal, result.instance_id)
    assert record["command"] == ["sh", "-c", "sleep 30"]
    assert record["env_keys"] == ["API_TOKEN"] and record["image"]["tag"] == "python:3.11-slim"
    assert (record["gpu"], record["cpu"], record["memory"], record["region"]) == ("A100-80GB:2", 2.5, 3073, ["us-east"])
    assert record["tags"][status.TAG_OWNER] == "standalone.modal"
    assert record["tags"][status.TAG_CLAIM] == request.claim and record["timeout"] == 86400
    assert result.reserved is True  # Modal scheduled it within create_wait
    assert result.credential is not None and set(result.credential.data) == {"url", "token"}
    assert "s3cr3t-value" not in caplog.text and "s3cr3t-value" not in repr(result)
    assert fake_modal.token_secret not in caplog.text and fake_modal.token_secret not in repr(provider)
    assert result.credential.data["token"].decode() not in caplog.text
    provider.close()


def test_provision_is_idempotent_and_a_new_provider_adopts(fake_modal: Any, tmp_path: Path) -> None:
    pod = make_pod()
    first = provider_on(fake_modal, tmp_path).provision(pod, request_for(pod))
    again = provider_on(fake_modal, tmp_path).provision(pod, request_for(pod))
    assert again.instance_id == first.instance_id and again.credential is None
    assert len(fake_modal.sandboxes()) == 1
    fresh = provider_on(fake_modal, tmp_path)
    assert [i.id for i in fresh.list()] == [first.instance_id]


@pytest.mark.parametrize(
    ("egress", "expected"),
    [(Egress(), (False, [])),
     (Egress(EgressMode.BLOCKED), (True, [])),
     (allowlist(["10.0.0.0/8"]), (False, ["10.0.0.0/8"]))],
)  # fmt: skip
def test_egress_becomes_the_sandboxes_network_policy(
    fake_modal: Any, tmp_path: Path, egress: Egress, expected: tuple[bool, list[str]]
) -> None:
    provider = provider_on(fake_modal, tmp_path)
    pod = make_pod()
    record = _record(fake_modal, provider.provision(pod, request_for(pod, egress=egress)).instance_id)
    assert (record["block_network"], record["allowed_cidrs"]) == expected


@pytest.mark.parametrize(("script", "state", "code"), [("exit 0", InstanceState.SUCCEEDED, 0),
                                                       ("exit 3", InstanceState.FAILED, 3)])  # fmt: skip
def test_the_exit_code_is_the_workloads(
    fake_modal: Any, tmp_path: Path, script: str, state: InstanceState, code: int
) -> None:
    provider = provider_on(fake_modal, tmp_path)
    pod = make_pod(command=("sh", "-c", script), accelerator="t4")
    instance_id = provider.provision(pod, request_for(pod)).instance_id
    instance = wait_for(lambda: next((i for i in provider.list() if i.id == instance_id and i.state is state),
                                     None), 20)  # fmt: skip
    assert instance.exit_code == code and instance.finished_at is not None


def test_terminate_is_idempotent_and_then_terminated(fake_modal: Any, tmp_path: Path) -> None:
    provider = provider_on(fake_modal, tmp_path)
    pod = make_pod()
    instance_id = provider.provision(pod, request_for(pod)).instance_id
    wait_for(lambda: (provider.get(instance_id) or None) is not None, 10)
    provider.terminate(instance_id)
    provider.terminate(instance_id)
    wait_for(lambda: (provider.get(instance_id) or pod) and provider.get(instance_id).state  # type: ignore[union-attr]
             is InstanceState.TERMINATED, 20)  # fmt: skip
    provider.terminate(instance_id)
    assert provider.get(InstanceId("sb-doesnotexist0000000000")) is None
    assert provider.get(InstanceId("../../etc")) is None


def test_a_refused_create_is_classified(fake_modal: Any, tmp_path: Path) -> None:
    from grpclib.const import Status

    provider = provider_on(fake_modal, tmp_path)
    pod = make_pod(accelerator="h100")
    for code, message, expected in [(Status.RESOURCE_EXHAUSTED, "quota exceeded", errors.QuotaExceeded),
                                    (Status.RESOURCE_EXHAUSTED, "no capacity for H100!", errors.NoCapacity),
                                    (Status.INVALID_ARGUMENT, "bad image", errors.InvalidRequest),
                                    (Status.UNAUTHENTICATED, "bad token", errors.Unauthorized)]:  # fmt: skip
        fake_modal.fail_next("SandboxCreate", code.value, message)
        with pytest.raises(expected):
            provider.provision(pod, request_for(pod))
    with pytest.raises(errors.InvalidRequest, match="mi300x"):
        provider.provision(make_pod(accelerator="mi300x"), request_for(pod))


def test_I4_the_pods_pull_credentials_and_its_deadline_backstop_reach_the_sandbox(
    fake_modal: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The sandbox timeout is the deadline + the grace (default 30) + 60 s, at most max_lifetime."""
    caplog.set_level(logging.DEBUG)
    provider = provider_on(fake_modal, tmp_path)
    auths = {"ghcr.io": RegistryAuth("bot", "pull-pw-42")}
    pod = make_pod(image="ghcr.io/acme/trainer:1", active_deadline_seconds=5)
    record = _record(fake_modal, provider.provision(pod, request_for(pod, registry_auth=auths)).instance_id)
    assert record["image"]["registry_username"] == "bot" and record["timeout"] == 5 + 30 + 60
    graced = make_pod("graced", active_deadline_seconds=5, termination_grace_seconds=2.5)
    assert _record(fake_modal, provider.provision(graced, request_for(graced)).instance_id)["timeout"] == 5 + 3 + 60
    public = make_pod("public", image="busybox:1.36", active_deadline_seconds=10**6)
    other = _record(fake_modal, provider.provision(public, request_for(public, registry_auth=auths)).instance_id)
    assert other["image"]["registry_secret"] is False  # ghcr.io's credentials are not Docker Hub's
    assert other["timeout"] == 86400  # a deadline past Modal's longest timeout gets max_lifetime
    assert "pull-pw-42" not in caplog.text


def test_a_sandbox_its_timeout_ended_reads_as_a_kill_not_as_a_deadline(fake_modal: Any, tmp_path: Path) -> None:
    """The backstop fired (max_lifetime 1 s here): FAILED, exit 137, reason Error, and a
    message naming the sandbox timeout; DeadlineExceeded is the vnode's to write."""
    provider = provider_on(fake_modal, tmp_path, max_lifetime=1)
    pod = make_pod(active_deadline_seconds=5)
    instance_id = provider.provision(pod, request_for(pod)).instance_id
    assert _record(fake_modal, instance_id)["timeout"] == 1
    ended = wait_for(lambda: (i := provider.get(instance_id)) is not None and i.state is InstanceState.FAILED and i, 20)
    assert (ended.exit_code, ended.exit_reason) == (137, "Error") and "sandbox timeout" in ended.message
