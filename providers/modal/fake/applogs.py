"""Test infrastructure: AppFetchLogs and AppCountLogs for the fake Modal (the SDK's
`Sandbox.logs.fetch(since=, until=, source=, search_text=)` counts buckets with AppCountLogs, then
fetches each interval with AppFetchLogs; `Sandbox.logs.tail(n)` calls AppFetchLogs alone).

Entries come from the sandboxes' captured output (what SandboxGetLogs serves): each captured
chunk split into lines, each line stamped with its chunk's arrival time. The filters the SDK
sends are honoured: app id, task id, sandbox id, source (stdout/stderr; system has no entries),
search text, `since <= t < until`, and `limit` (the most recent `limit` entries, in time order).
Count buckets start at multiples of `bucket_secs` since the epoch, as the SDK expects.
Tests: tests/providers/modal/test_modal_fake_applogs.py
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from modal_proto import api_pb2

from providers.modal.fake.sandboxes import STDERR, STDOUT
from providers.modal.fake.state import SandboxRecord

_SOURCES = {api_pb2.FILE_DESCRIPTOR_STDOUT: STDOUT, api_pb2.FILE_DESCRIPTOR_STDERR: STDERR}
_TO_PROTO = {STDOUT: api_pb2.FILE_DESCRIPTOR_STDOUT, STDERR: api_pb2.FILE_DESCRIPTOR_STDERR}


@dataclass(frozen=True)
class Entry:
    at: float
    fd: int
    text: str
    record: SandboxRecord


def _seconds(req: Any, name: str, default: float) -> float:
    if not req.HasField(name):
        return default
    ts = getattr(req, name)
    return float(ts.seconds) + float(ts.nanos) / 1e9


def _matches(record: SandboxRecord, req: Any) -> bool:
    return (
        (not req.app_id or record.app_id == req.app_id)
        and (not req.task_id or record.task_id == req.task_id)
        and (not req.sandbox_id or record.id == req.sandbox_id)
    )


def entries(records: list[SandboxRecord], req: Any) -> list[Entry]:
    """The entries of the matching sandboxes within [since, until), in time order."""
    since = _seconds(req, "since", 0.0)
    until = _seconds(req, "until", math.inf)
    wanted_fd = _SOURCES.get(req.source)
    if req.source == api_pb2.FILE_DESCRIPTOR_INFO:
        return []
    found: list[Entry] = []
    for record in records:
        if record.process is None or not _matches(record, req):
            continue
        for at, fd, data in list(record.process.output.chunks):
            if not since <= at < until or (wanted_fd is not None and fd != wanted_fd):
                continue
            for line in data.decode("utf-8", "replace").splitlines(keepends=True):
                if not req.search_text or req.search_text in line:
                    found.append(Entry(at, fd, line, record))
    found.sort(key=lambda e: e.at)
    return found


def fetch_response(records: list[SandboxRecord], req: Any) -> api_pb2.AppFetchLogsResponse:
    found = entries(records, req)
    if req.limit > 0:
        found = found[-req.limit :]
    batches: list[api_pb2.TaskLogsBatch] = []
    for entry in found:
        item = api_pb2.TaskLogs(
            data=entry.text, timestamp=entry.at, timestamp_ns=int(entry.at * 1e9), file_descriptor=_TO_PROTO[entry.fd]
        )
        last = batches[-1] if batches else None
        if last is None or last.sandbox_id != entry.record.id:
            last = api_pb2.TaskLogsBatch(task_id=entry.record.task_id, sandbox_id=entry.record.id)
            batches.append(last)
        last.items.append(item)
    return api_pb2.AppFetchLogsResponse(batches=batches)


def count_response(records: list[SandboxRecord], req: Any) -> api_pb2.AppCountLogsResponse:
    size = max(int(req.bucket_secs), 1)
    since = _seconds(req, "since", 0.0)
    until = _seconds(req, "until", 0.0)
    counts: dict[int, list[int]] = {}
    start = math.floor(since / size) * size
    while start < until:
        counts[start] = [0, 0]
        start += size
    for entry in entries(records, req):
        bucket = counts.setdefault(math.floor(entry.at / size) * size, [0, 0])
        bucket[0 if entry.fd == STDOUT else 1] += 1
    buckets = []
    for begin in sorted(counts):
        stamp = api_pb2.AppCountLogsResponse.LogBucket(stdout_logs=counts[begin][0], stderr_logs=counts[begin][1])
        stamp.bucket_start_at.seconds = begin
        buckets.append(stamp)
    return api_pb2.AppCountLogsResponse(buckets=buckets)
