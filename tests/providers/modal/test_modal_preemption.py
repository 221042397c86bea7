"""Modal preempting a sandbox, through the real SDK against the fake Modal: the SDK's own
`wait` sees the task end (an internal failure, killed: 137, not a termination), and
`ModalProvider` reads the sandbox as TERMINATED and preempted (an interruption after the
fact: Modal's wire says nothing ahead, so the provider is no NoticeSource); a plain
internal failure, and our own terminate, are not preemptions."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import modal
import pytest

from providers.base import InstanceState, NoticeSource
from providers.modal import status
from providers.modal.fake import FakeModal
from tests.providers.modal.modal_fake_rig import app_for
from tests.providers.modal.modal_rig import fake_modal, make_pod, provider_on, request_for
from tests.support.polling import wait_for

__all__ = ["fake_modal"]


def test_the_sdk_sees_a_preempted_sandboxs_task_end_with_its_termination_reason(client: Any, fake: FakeModal) -> None:
    sandbox = modal.Sandbox.create("sleep", "60", app=app_for(client), client=client)
    wait_for(lambda: [r["state"] for r in fake.sandboxes()] == ["running"], what="the sandbox running")
    fake.preempt(sandbox.object_id)
    sandbox.wait(raise_on_termination=True)  # no SandboxTerminatedError: not our terminate
    assert sandbox.returncode == 137 and sandbox.poll() == 137
    assert [r["state"] for r in fake.sandboxes()] == ["preempted"]
    with pytest.raises(ValueError, match="is not running"):
        fake.preempt(sandbox.object_id)


def test_a_preempted_sandbox_reads_as_terminated_and_preempted(fake_modal: Any, tmp_path: Path) -> None:
    provider = provider_on(fake_modal, tmp_path)
    assert not isinstance(provider, NoticeSource)  # Modal tells nothing ahead
    pod = make_pod()
    instance_id = provider.provision(pod, request_for(pod)).instance_id
    wait_for(lambda: provider.get(instance_id).state is InstanceState.RUNNING, 30, what="the sandbox running")  # type: ignore[union-attr]
    fake_modal.preempt(instance_id, "TASK_TERMINATION_REASON_PREEMPTED_BY_SCHEDULER")
    seen = wait_for(
        lambda: (found := provider.get(instance_id)) and found.state is not InstanceState.RUNNING and found,
        30,
        what="the preemption seen",
    )
    assert (seen.state, seen.preempted) == (InstanceState.TERMINATED, True)
    assert "PREEMPTED_BY_SCHEDULER" in seen.message and seen.finished_at is not None
    assert [i.preempted for i in provider.list() if i.id == instance_id] == [True]


def test_our_own_terminate_and_a_plain_internal_failure_are_not_preemptions() -> None:
    def info(state: int, exception: str = "") -> Any:
        result = SimpleNamespace(status=state, exception=exception, exitcode=0)
        task = SimpleNamespace(result=result, started_at=1.0, finished_at=2.0)
        return SimpleNamespace(id="sb-1", task_info=task, tags=[], created_at=1.0, regions=[])

    terminated = status.instance_from(info(status.TERMINATED))
    assert (terminated.state, terminated.preempted) == (InstanceState.TERMINATED, False)
    failed = status.instance_from(info(status.INTERNAL_FAILURE, "worker lost"))
    assert (failed.state, failed.preempted) == (InstanceState.FAILED, False)
    reclaimed = status.instance_from(info(status.TERMINATED, "TASK_TERMINATION_REASON_WORKER_PREEMPTED"))
    assert (reclaimed.state, reclaimed.preempted) == (InstanceState.TERMINATED, True)
