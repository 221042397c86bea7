"""Test infrastructure: SandboxGetLogs for the fake Modal.

A server stream of `TaskLogsBatch`es: each batch carries the chunks of the asked file
descriptor that arrived since `last_entry_id` (the entry id is the index of the next chunk in
the sandbox's capture, so a reconnect resumes exactly), waits for more while the process runs
(up to the request's `timeout`, as Modal does), and sends `eof` once the process ended and
its pipes closed, so following a sandbox's output ends when it exits.
Tests: tests/providers/modal/test_modal_fake_logs.py
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from modal_proto import api_pb2

from providers.modal.fake.sandboxes import STDERR, STDOUT
from providers.modal.fake.state import SandboxRecord

_FD = {api_pb2.FILE_DESCRIPTOR_STDOUT: STDOUT, api_pb2.FILE_DESCRIPTOR_STDERR: STDERR}


def _ended(record: SandboxRecord) -> bool:
    process = record.process
    if process is None:
        return record.terminated
    return process.done.is_set() and process.output.closed


async def stream_logs(stream: Any, record: SandboxRecord, req: Any) -> None:
    fd = _FD.get(req.file_descriptor)
    position = int(req.last_entry_id) if req.last_entry_id.isdigit() else 0
    deadline = time.monotonic() + (req.timeout or 55)
    while True:
        ended = _ended(record)
        chunks = list(record.process.output.chunks) if record.process is not None else []
        fresh = chunks[position:]
        items = [
            api_pb2.TaskLogs(data=data.decode("utf-8", "replace"), timestamp=at, file_descriptor=req.file_descriptor)
            for at, chunk_fd, data in fresh
            if fd is None or chunk_fd == fd
        ]
        position = len(chunks)
        if items or ended:
            await stream.send_message(
                api_pb2.TaskLogsBatch(
                    task_id=record.task_id, sandbox_id=record.id, items=items, entry_id=str(position), eof=ended
                )
            )
        if ended or time.monotonic() > deadline:
            return
        await asyncio.sleep(0.05)
