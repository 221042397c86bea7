"""The Modal fake's control plane through the real `modal` SDK: auth, apps, images, sandbox
create (every field the provider sends), wait/poll/returncode, tags, listing, terminate and
timeout, each sandbox a real local process."""

from __future__ import annotations

import os
from typing import Any

import modal
import modal.exception
import pytest

from providers.modal.fake import FakeModal
from tests.providers.modal.modal_fake_rig import app_for, open_client


def test_a_wrong_token_is_an_auth_error(fake: FakeModal) -> None:
    bad = open_client(fake.url, fake.token_id, "wrong")
    try:
        with pytest.raises(modal.exception.AuthError):
            app_for(bad)
    finally:
        bad.close()


def test_apps_are_found_by_name_within_an_environment(client: Any) -> None:
    first = app_for(client).app_id
    assert app_for(client).app_id == first
    assert app_for(client, "other").app_id != first
    with pytest.raises(modal.exception.NotFoundError):
        modal.App.lookup("missing", client=client, environment_name="main")


def test_create_records_what_the_sdk_sent_and_runs_a_real_process(client: Any, fake: FakeModal) -> None:
    registry = modal.Secret.from_dict({"REGISTRY_USERNAME": "user", "REGISTRY_PASSWORD": "hunter2"})
    image = modal.Image.from_registry("busybox:1.36", secret=registry)
    env = modal.Secret.from_dict({"GREETING": "hello", "TOKEN": "s3cret"})
    sb = modal.Sandbox.create(
        "sh", "-c", 'echo "$GREETING"; exit 3', app=app_for(client), image=image, gpu="H100!", cpu=2, memory=2048,
        region="us-east", timeout=300, block_network=False, outbound_cidr_allowlist=["10.0.0.0/8"], secrets=[env],
        client=client,
    )  # fmt: skip
    sb.wait(raise_on_termination=False)
    assert sb.returncode == 3
    assert sb.stdout.read() == "hello\n"
    (record,) = fake.sandboxes()
    assert record["id"] == sb.object_id
    assert record["command"] == ["sh", "-c", 'echo "$GREETING"; exit 3']
    assert record["env_keys"] == ["GREETING", "TOKEN"]
    assert record["image"]["tag"] == "busybox:1.36" and record["image"]["registry_secret"] is True
    assert (record["gpu"], record["cpu"], record["memory"]) == ("H100!", 2.0, 2048)
    assert (record["region"], record["timeout"]) == (["us-east"], 300)
    assert (record["block_network"], record["allowed_cidrs"]) == (False, ["10.0.0.0/8"])
    assert (record["state"], record["exit_code"]) == ("exited", 3)
    assert "s3cret" not in repr(fake.sandboxes()) and "hunter2" not in repr(fake.sandboxes())


def test_poll_wait_and_from_id_see_the_same_sandbox(client: Any, fake: FakeModal) -> None:
    sb = modal.Sandbox.create("sh", "-c", "read line; exit 0", app=app_for(client), client=client)
    again = modal.Sandbox.from_id(sb.object_id, client=client)
    assert again.poll() is None
    pid = fake.sandboxes()[0]["pid"]
    os.kill(pid, 0)  # a real process
    sb.stdin.write(b"go\n")
    sb.stdin.write_eof()
    sb.stdin.drain()
    sb.wait()
    assert again.poll() == 0 and again.returncode == 0


def test_tags_and_listing_by_app_and_tags_include_finished_ones(client: Any, fake: FakeModal) -> None:
    app = app_for(client)
    done = modal.Sandbox.create("true", app=app, client=client)
    done.set_tags({"owner": "n1", "pod": "a"})
    running = modal.Sandbox.create("sleep", "60", app=app, client=client)
    running.set_tags({"owner": "n1", "pod": "b"})
    modal.Sandbox.create("sleep", "60", app=app_for(client, "elsewhere"), client=client).set_tags({"owner": "n1"})
    done.wait()
    assert running.get_tags() == {"owner": "n1", "pod": "b"}
    listed = modal.Sandbox.list(app_id=app.app_id, tags={"owner": "n1"}, client=client)
    assert [s.object_id for s in listed] == [running.object_id]
    from modal_proto import api_pb2

    async def page() -> Any:
        request = api_pb2.SandboxListRequest(
            app_id=app.app_id, include_finished=True, tags=[api_pb2.SandboxTag(tag_name="owner", tag_value="n1")]
        )
        return await client._stub.SandboxList(request)

    from modal._utils.async_utils import synchronizer

    response = synchronizer.create_blocking(page, "page", target_module=__name__)()
    assert [s.id for s in response.sandboxes] == [running.object_id, done.object_id]
    finished = response.sandboxes[1].task_info
    assert finished.result.status == api_pb2.GenericResult.GENERIC_STATUS_SUCCESS and finished.started_at > 0


def test_terminate_ends_the_process_and_timeout_ends_the_sandbox(client: Any, fake: FakeModal) -> None:
    app = app_for(client)
    sb = modal.Sandbox.create("sleep", "60", app=app, client=client)
    sb.terminate()
    sb.wait(raise_on_termination=False)
    assert sb.returncode == 137
    short = modal.Sandbox.create("sleep", "60", app=app, timeout=1, client=client)
    with pytest.raises(modal.exception.SandboxTimeoutError):
        short.wait(raise_on_termination=False)
    assert short.poll() == 124
    assert [r["state"] for r in fake.sandboxes()] == ["terminated", "timeout"]
