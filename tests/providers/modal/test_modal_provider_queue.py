"""`ModalProvider.provision` while Modal queues the sandbox (the fake's `queue(True)`, through
the real SDK, whose `Sandbox.create` waits until Modal schedules): provision returns within
`create_wait` with the queued sandbox, unreserved; the claim adopts it; Modal's start makes it
RUNNING; a terminated or closed-over queued create ends quietly on its thread."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from providers.base import InstanceState, PodSpec
from providers.modal import ModalProvider
from tests.providers.modal.modal_rig import fake_modal, make_pod, provider_on, request_for
from tests.support.polling import wait_for

__all__ = ["fake_modal"]


def _create_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("modal-create-") and t.is_alive()]


def _queueing(fake_modal: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> tuple[ModalProvider, PodSpec]:
    """A provider that waits 0.5 s for a create, on a fake Modal that queues every sandbox, a
    Pod for it, and the provider's logs captured down to debug."""
    caplog.set_level(logging.DEBUG, logger="providers.modal")
    provider = provider_on(fake_modal, tmp_path, create_wait=0.5)
    fake_modal.queue(True)
    return provider, make_pod()


def test_a_queued_sandbox_is_reported_promptly_adopted_and_then_runs(
    fake_modal: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    provider, pod = _queueing(fake_modal, tmp_path, caplog)
    started = time.monotonic()
    result = provider.provision(pod, request_for(pod))
    assert time.monotonic() - started < 10
    assert result.reserved is False
    # the fake mints a connect token for a sandbox it still queues
    assert result.credential is not None and set(result.credential.data) == {"url", "token"}
    assert result.credential.data["token"].decode() not in caplog.text
    instance = provider.get(result.instance_id)
    assert instance is not None and instance.state is InstanceState.PROVISIONING
    again = provider.provision(pod, request_for(pod))
    other = provider_on(fake_modal, tmp_path, create_wait=0.5).provision(pod, request_for(pod))
    assert (again.instance_id, again.reserved, again.credential) == (result.instance_id, False, None)
    assert other.instance_id == result.instance_id
    assert [r["id"] for r in fake_modal.sandboxes()] == [result.instance_id]
    fake_modal.release(result.instance_id)
    wait_for(lambda: (provider.get(result.instance_id) or instance).state is InstanceState.RUNNING, 20)
    wait_for(lambda: "scheduled the queued sandbox" in caplog.text and not _create_threads(), 20)
    provider.close()


def test_terminating_a_queued_sandbox_ends_its_create_quietly(
    fake_modal: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    provider, pod = _queueing(fake_modal, tmp_path, caplog)
    result = provider.provision(pod, request_for(pod))
    assert result.reserved is False and _create_threads()
    provider.terminate(result.instance_id)
    wait_for(lambda: not _create_threads(), 20)
    lines = [r.getMessage() for r in caplog.records if "the create of the queued modal sandbox" in r.getMessage()]
    assert lines == [f"the create of the queued modal sandbox for claim {request_for(pod).claim} ended with "
                     "ConflictError"]  # fmt: skip
    instance = provider.get(result.instance_id)
    assert instance is not None and instance.state is InstanceState.TERMINATED
    provider.close()


def test_close_does_not_wait_for_a_queued_create(fake_modal: Any, tmp_path: Path) -> None:
    provider = provider_on(fake_modal, tmp_path, create_wait=0.5)
    fake_modal.queue(True)
    pod = make_pod()
    result = provider.provision(pod, request_for(pod))
    assert result.reserved is False and _create_threads()
    started = time.monotonic()
    provider.close()
    assert time.monotonic() - started < 5
    wait_for(lambda: not _create_threads(), 30)
    # closing the client does not terminate the queued sandbox: Modal still has it
    assert [r["state"] for r in fake_modal.sandboxes()] == ["pending"]


def test_a_scheduled_sandbox_is_reserved_with_its_credential(fake_modal: Any, tmp_path: Path) -> None:
    provider = provider_on(fake_modal, tmp_path, create_wait=5)
    pod = make_pod()
    result = provider.provision(pod, request_for(pod))
    assert result.reserved is True
    assert result.credential is not None and set(result.credential.data) == {"url", "token"}
    assert not _create_threads()
    provider.close()
