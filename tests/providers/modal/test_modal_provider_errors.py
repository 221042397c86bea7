"""Every failure of the Modal SDK (gRPC statuses, `modal.exception` types, the network)
comes out of the provider as a `providers.errors` type, and refusals block as wide as
they should. The unreachable-server cases go through the real SDK over a real socket."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from grpclib import GRPCError, Status
from modal import exception as modal_exc

from providers import errors
from providers.base import BlockBreadth, InstanceId, LogOptions, Tier
from providers.modal import ModalProvider
from providers.modal.classify import translate
from tests.providers.modal.modal_rig import fake_modal, make_pod, provider_on, request_for

__all__ = ["fake_modal"]


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (GRPCError(Status.RESOURCE_EXHAUSTED, "quota of GPUs reached"), errors.QuotaExceeded),
        (GRPCError(Status.RESOURCE_EXHAUSTED, "no capacity for H100 right now"), errors.NoCapacity),
        (GRPCError(Status.UNAUTHENTICATED, "bad token"), errors.Unauthorized),
        (GRPCError(Status.PERMISSION_DENIED, "no"), errors.Unauthorized),
        (GRPCError(Status.INVALID_ARGUMENT, "bad gpu"), errors.InvalidRequest),
        (GRPCError(Status.NOT_FOUND, "no such sandbox"), errors.NotFound),
        (GRPCError(Status.UNAVAILABLE, "down"), errors.Unavailable),
        (GRPCError(Status.DEADLINE_EXCEEDED, "slow"), errors.Unavailable),
        (GRPCError(Status.ALREADY_EXISTS, "dup"), errors.ProviderError),
        (modal_exc.AuthError("token missing"), errors.Unauthorized),
        (modal_exc.NotFoundError("gone"), errors.NotFound),
        (modal_exc.InvalidError("bad"), errors.InvalidRequest),
        (modal_exc.ConnectionError("refused"), errors.Unavailable),
        (modal_exc.SandboxTimeoutError("slow"), errors.Unavailable),
        (modal_exc.ClientClosed("closed"), errors.Unavailable),
        (ConnectionRefusedError(111, "refused"), errors.Unavailable),
        (modal_exc.ExecutionError("out of capacity"), errors.NoCapacity),
        (modal_exc.ExecutionError("weird"), errors.ProviderError),
        (RuntimeError("weird"), errors.ProviderError),
    ],
)
def test_each_sdk_failure_maps_to_one_provider_error(raised: BaseException, expected: type) -> None:
    assert type(translate(raised)) is expected


def test_not_found_on_create_is_a_bad_request() -> None:
    assert type(translate(GRPCError(Status.NOT_FOUND, "no image"), creating=True)) is errors.InvalidRequest
    assert type(translate(modal_exc.NotFoundError("no secret"), creating=True)) is errors.InvalidRequest


def test_refusals_block_as_wide_as_they_reach() -> None:
    provider = ModalProvider("modal", {})
    kwargs: dict[str, Any] = {"accelerator": "h100", "tier": Tier.ON_DEMAND, "region": "us-east"}
    assert provider.classify_provision_error(errors.Unauthorized("x"), **kwargs).breadth is BlockBreadth.PROVIDER
    assert provider.classify_provision_error(errors.QuotaExceeded("x"), **kwargs).breadth is BlockBreadth.TIER
    scope = provider.classify_provision_error(errors.NoCapacity("x"), **kwargs)
    assert (scope.breadth, scope.accelerator, scope.region) == (BlockBreadth.OFFERING, "h100", "us-east")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_server_is_unavailable_from_every_method(tmp_path: Path) -> None:
    (tmp_path / "MODAL_TOKEN_ID").write_text("ak-test")
    (tmp_path / "MODAL_TOKEN_SECRET").write_text("as-never-shown")
    provider = ModalProvider(
        "modal",
        {"server_url": f"http://127.0.0.1:{_closed_port()}", "credentials_dir": str(tmp_path), "connect_timeout": 1},
    )
    pod = make_pod()
    calls: list[Callable[[], object]] = [
        provider.list, lambda: provider.get(InstanceId("sb-abc")), lambda: provider.terminate(InstanceId("sb-abc")),
        lambda: provider.provision(pod, request_for(pod, env={"API_KEY": "s3cr3t"})),
        lambda: provider.logs(InstanceId("sb-abc"), LogOptions()),
        lambda: provider.exec(InstanceId("sb-abc"), ["true"], tty=False, stdin=False),
    ]  # fmt: skip
    for call in calls:
        with pytest.raises(errors.Unavailable) as caught:
            call()
        assert "as-never-shown" not in str(caught.value) and "s3cr3t" not in str(caught.value)
    provider.close()


def test_a_missing_token_is_unauthorized_before_any_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MODAL_TOKEN_ID", raising=False)
    monkeypatch.delenv("MODAL_TOKEN_SECRET", raising=False)
    provider = ModalProvider("modal", {"server_url": f"http://127.0.0.1:{_closed_port()}"})
    with pytest.raises(errors.Unauthorized):
        provider.list()


FAULTS = [("SandboxList", 16, "bad token"), ("SandboxList", 14, "down"), ("SandboxList", 8, "quota")]


@pytest.mark.parametrize(("method", "code", "message"), FAULTS)
def test_injected_faults_in_every_public_method_are_provider_errors(
    fake_modal: Any, tmp_path: Path, method: str, code: int, message: str
) -> None:
    provider = provider_on(fake_modal, tmp_path)
    pod = make_pod(command=("sh", "-c", "echo hi; sleep 30"))
    instance_id = provider.provision(pod, request_for(pod)).instance_id
    calls: list[Callable[[], object]] = [
        provider.list, lambda: provider.get(instance_id), lambda: provider.terminate(instance_id),
        lambda: provider.provision(pod, request_for(pod)), lambda: provider.logs(instance_id, LogOptions()),
        lambda: provider.exec(instance_id, ["true"], tty=False, stdin=False), lambda: provider.usage(instance_id),
    ]  # fmt: skip
    for call in calls:
        fake_modal.fail_next(method, code, message, times=5 if code == 14 else 1)  # the SDK retries UNAVAILABLE
        with pytest.raises(errors.ProviderError):
            call()
    fake_modal.outage(True)
    for call in calls:
        with pytest.raises(errors.Unavailable):
            call()
    fake_modal.outage(False)
    fake_modal.fail_next("SandboxGetStats", code, message, times=5 if code == 14 else 1)
    with pytest.raises(errors.ProviderError):  # the stats call itself refused
        provider.usage(instance_id)
    provider.close()
