"""`RunPodProvider.stop_container` over real SSH to the fake's pods: SIGTERM to the workload's
process group, SIGKILL after the grace from a detached process on the pod; the exit the
kernel reports (the workload's own, 143, 137) then reads in `get`. Each call returns once
asked, never after the grace."""

from __future__ import annotations

from pathlib import Path

import pytest

from providers import errors
from providers.base import InstanceId, LogOptions
from providers.runpod import RunPodProvider
from tests.providers.runpod.fake_runpod import FakeRunPod
from tests.providers.runpod.test_runpod_provider_ssh import make, read_all, start
from tests.providers.stopscenario import IGNORES, TRAPS, ask, ended
from tests.support.polling import wait_for


def started(provider: RunPodProvider, script: str) -> InstanceId:
    """A pod whose workload runs `script` and has printed `ready` (its trap is set)."""
    instance_id = start(provider, script)  # running: its SSH answers
    wait_for(lambda: b"ready" in read_all(provider.logs(instance_id, LogOptions())), 60, what="the workload ready")
    return instance_id


def test_a_workload_that_traps_sigterm_finishes_its_work_and_exits_with_its_own_143(
    fake: FakeRunPod, tmp_path: Path
) -> None:
    provider = make(fake, tmp_path)
    instance_id = started(provider, TRAPS)
    asked = ask(provider, instance_id, "main", 10)
    instance = ended(provider, instance_id, 30)
    assert (instance.exit_code, instance.exit_reason) == (143, "Error")
    output = read_all(provider.logs(instance_id, LogOptions()))  # sh may also say its `sleep` was Terminated
    assert output.startswith(b"ready\n") and output.endswith(b"checkpoint saved\n")
    assert instance.finished_at is not None and instance.finished_at.timestamp() < asked + 10  # not killed
    provider.stop_container(instance_id, "main", grace=0)  # ended: success, nothing done


def test_a_workload_that_ignores_sigterm_is_killed_with_137_at_the_end_of_its_grace(
    fake: FakeRunPod, tmp_path: Path
) -> None:
    provider = make(fake, tmp_path)
    instance_id = started(provider, IGNORES)
    asked = ask(provider, instance_id, "main", 1)
    instance = ended(provider, instance_id, 30)
    assert (instance.exit_code, instance.exit_reason) == (137, "Error")
    # The exit file's time is whole seconds (rounded down): killed 1 s after the ask, plus the
    # start of the detached process on the pod.
    assert instance.finished_at is not None and instance.finished_at.timestamp() <= asked + 1 + 2


def test_grace_zero_kills_at_once_and_a_shorter_second_ask_cuts_a_longer_grace(
    fake: FakeRunPod, tmp_path: Path
) -> None:
    provider = make(fake, tmp_path)
    instance_id = started(provider, IGNORES)
    ask(provider, instance_id, "main", 300)  # a graceful delete
    asked = ask(provider, instance_id, "main", 0)  # then a force delete
    instance = ended(provider, instance_id, 30)
    assert instance.exit_code == 137
    assert instance.finished_at is not None and instance.finished_at.timestamp() <= asked + 2
    with pytest.raises(errors.NotFound):
        provider.stop_container(InstanceId("nosuchpod"), "main", grace=0)
