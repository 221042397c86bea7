"""`ModalProvider.stop_container` through the real SDK against the fake Modal: the stop is a
command run by the sandbox's exec (`providers.modal.stop`: SIGTERM to the sandbox's
processes, SIGKILL after the grace from the exec's own timer), and the sandbox's result is
the kernel's exit (the workload's own, 143, 137). Each call returns once asked."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from providers import errors
from providers.base import InstanceId, LogOptions
from providers.modal import ModalProvider
from tests.providers.modal.modal_rig import fake_modal, make_pod, provider_on, request_for
from tests.providers.stopscenario import IGNORES, TRAPS, ask, ended
from tests.support.polling import wait_for

__all__ = ["fake_modal"]

SEEN_SLACK = 15.0  # from the sandbox's end to `get` showing it


def output(provider: ModalProvider, instance_id: InstanceId) -> bytes:
    stream = provider.logs(instance_id, LogOptions())
    out = bytearray()
    try:
        while chunk := stream.read():
            out += chunk
    finally:
        stream.close()
    return bytes(out)


def started(provider: ModalProvider, script: str) -> InstanceId:
    """A sandbox running `script` that has printed `ready` (its trap is set)."""
    pod = make_pod(command=("sh", "-c", script))
    instance_id = provider.provision(pod, request_for(pod)).instance_id
    wait_for(lambda: b"ready" in output(provider, instance_id), 30, what="the workload ready")
    return instance_id


def test_a_workload_that_traps_sigterm_finishes_its_work_and_exits_with_its_own_143(
    fake_modal: Any, tmp_path: Path
) -> None:
    provider = provider_on(fake_modal, tmp_path)
    instance_id = started(provider, TRAPS)
    asked = ask(provider, instance_id, "main", 10)
    instance = ended(provider, instance_id, 10)
    assert time.time() - asked < 10  # it ended by itself, before the grace's SIGKILL
    assert instance.exit_code == 143
    assert b"checkpoint saved\n" in output(provider, instance_id)
    provider.stop_container(instance_id, "main", grace=0)  # ended: success


def test_a_workload_that_ignores_sigterm_is_killed_with_137_at_the_end_of_its_grace(
    fake_modal: Any, tmp_path: Path
) -> None:
    provider = provider_on(fake_modal, tmp_path)
    instance_id = started(provider, IGNORES)
    asked = ask(provider, instance_id, "main", 1)
    instance = ended(provider, instance_id, 1 + SEEN_SLACK)
    assert instance.exit_code == 137 and time.time() - asked >= 1


def test_grace_zero_kills_at_once_even_after_a_longer_graceful_stop(fake_modal: Any, tmp_path: Path) -> None:
    provider = provider_on(fake_modal, tmp_path)
    instance_id = started(provider, IGNORES)
    ask(provider, instance_id, "main", 300)  # a graceful delete
    ask(provider, instance_id, "main", 0)  # then a force delete
    assert ended(provider, instance_id, SEEN_SLACK).exit_code == 137
    # The sandbox's end took its execs with it: the first stop's timer is not left behind.
    wait_for(lambda: all(p.done.is_set() for p in fake_modal.state.processes()), 10, what="every process ended")
    with pytest.raises(errors.NotFound):
        provider.stop_container(InstanceId("sb-nosuchsandbox"), "main", grace=0)
