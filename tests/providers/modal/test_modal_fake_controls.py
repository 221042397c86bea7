"""The Modal fake's controls, seen through the real `modal` SDK: queueing, injected gRPC
failures, an outage, kill, connect tokens, and close ending every process."""

from __future__ import annotations

import os
import threading
from typing import Any

import modal
import modal.exception
import pytest
from grpclib.const import Status

from providers.modal.fake import FakeModal, start_fake_modal
from tests.providers.modal.modal_fake_rig import app_for, open_client
from tests.support.polling import wait_for


def test_a_queued_sandbox_stays_pending_until_released(client: Any, fake: FakeModal) -> None:
    app = app_for(client)
    fake.queue(True)
    made: list[Any] = []
    # The SDK's create waits for the sandbox to be scheduled (SandboxGetTaskId), as on Modal.
    thread = threading.Thread(target=lambda: made.append(modal.Sandbox.create("true", app=app, client=client)))
    thread.start()
    wait_for(lambda: [r["state"] for r in fake.sandboxes()] == ["pending"], what="a pending sandbox")
    assert fake.sandboxes()[0]["pid"] is None and not made
    fake.release(fake.sandboxes()[0]["id"])
    thread.join(30)
    made[0].wait()
    assert made[0].returncode == 0
    fake.queue(False)
    modal.Sandbox.create("true", app=app, client=client).wait()
    assert [r["state"] for r in fake.sandboxes()] == ["exited", "exited"]


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (Status.RESOURCE_EXHAUSTED, modal.exception.ResourceExhaustedError),
        (Status.FAILED_PRECONDITION, modal.exception.ConflictError),
        (Status.INVALID_ARGUMENT, modal.exception.InvalidError),
        (Status.UNAUTHENTICATED, modal.exception.AuthError),
    ],
)
def test_fail_next_answers_the_status_once(client: Any, fake: FakeModal, status: Status, error: type) -> None:
    app = app_for(client)
    fake.fail_next("SandboxCreate", status, "no capacity")
    with pytest.raises(error, match="no capacity"):
        modal.Sandbox.create("true", app=app, client=client)
    assert fake.sandboxes() == []
    modal.Sandbox.create("true", app=app, client=client).wait()
    assert len(fake.sandboxes()) == 1


def test_an_outage_answers_unavailable_until_it_ends(client: Any, fake: FakeModal) -> None:
    app = app_for(client)
    sb = modal.Sandbox.create("sleep", "60", app=app, client=client)
    fake.outage(True)
    with pytest.raises(modal.exception.Error):
        sb.get_tags()
    fake.outage(False)
    assert sb.get_tags() == {}
    sb.terminate()


def test_kill_ends_the_process_as_if_it_exited(client: Any, fake: FakeModal) -> None:
    sb = modal.Sandbox.create("sleep", "60", app=app_for(client), client=client)
    fake.kill(sb.object_id, 9)
    sb.wait(raise_on_termination=False)
    assert sb.returncode == 9
    assert fake.sandboxes()[0]["state"] == "exited"


def test_connect_tokens_are_random_and_name_the_sandbox(client: Any) -> None:
    sb = modal.Sandbox.create("sleep", "60", app=app_for(client), client=client)
    one, two = sb.create_connect_token(), sb.create_connect_token()
    assert one.token and one.token != two.token
    assert sb.object_id in one.url
    sb.terminate()


def test_close_kills_every_process_it_started(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODAL_SANDBOX_V2", "0")
    fake = start_fake_modal()
    client = open_client(fake.url, fake.token_id, fake.token_secret)
    try:
        modal.Sandbox.create("sleep", "60", app=app_for(client), client=client)
        pid = fake.sandboxes()[0]["pid"]
        os.kill(pid, 0)
    finally:
        client.close()
        fake.close()

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_for(gone, what="the sandbox process to end")
    assert "secret" not in repr(fake) and fake.token_secret not in repr(fake)
