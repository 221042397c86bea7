"""The Modal fake's SandboxGetLogs through the real `modal` SDK: stdout and stderr apart, lines
followed while the process runs (the SDK's stream waits for more and ends at exit), and
resumption from an entry id."""

from __future__ import annotations

import threading
from typing import Any

import modal

from providers.modal.fake import FakeModal
from tests.providers.modal.modal_fake_rig import app_for
from tests.support.polling import wait_for


def test_stdout_and_stderr_are_kept_apart(client: Any) -> None:
    sb = modal.Sandbox.create("sh", "-c", "echo out1; echo err1 >&2; echo out2", app=app_for(client), client=client)
    sb.wait()
    assert sb.stdout.read() == "out1\nout2\n"
    assert sb.stderr.read() == "err1\n"


def test_following_sees_lines_as_they_come_and_ends_at_exit(client: Any, fake: FakeModal) -> None:
    script = "echo first; read go; echo second; exit 0"
    sb = modal.Sandbox.create("sh", "-c", script, app=app_for(client), client=client)
    seen: list[str] = []
    ended = threading.Event()

    def follow() -> None:
        for line in sb.stdout:
            seen.append(line)
        ended.set()

    threading.Thread(target=follow, daemon=True).start()
    wait_for(lambda: seen == ["first\n"], what="the first line while the sandbox runs")
    assert not ended.is_set()
    sb.stdin.write(b"go\n")
    sb.stdin.drain()
    wait_for(ended.is_set, what="the log stream to end at exit")
    assert seen == ["first\n", "second\n"]


def test_logs_resume_from_the_last_entry_id(client: Any) -> None:
    from modal._utils.async_utils import synchronizer
    from modal_proto import api_pb2

    sb = modal.Sandbox.create("sh", "-c", "echo a; echo b", app=app_for(client), client=client)
    sb.wait()

    async def batches(last_entry_id: str) -> list[Any]:
        request = api_pb2.SandboxGetLogsRequest(
            sandbox_id=sb.object_id, file_descriptor=api_pb2.FILE_DESCRIPTOR_STDOUT, timeout=5,
            last_entry_id=last_entry_id,
        )  # fmt: skip
        return [batch async for batch in client._stub.SandboxGetLogs.unary_stream(request)]

    read = synchronizer.create_blocking(batches, "batches", target_module=__name__)
    everything = read("")
    text = "".join(item.data for batch in everything for item in batch.items)
    assert text == "a\nb\n" and everything[-1].eof
    first_entry = everything[0].entry_id  # a batch's id: a resume starts after the whole batch
    rest = read(first_entry)
    first_batch = "".join(item.data for item in everything[0].items)
    assert "".join(item.data for batch in rest for item in batch.items) == text[len(first_batch) :]
    assert all(item.timestamp > 0 for batch in everything for item in batch.items)
