"""A fake instance's console output: which scripted lines exist at a time, and the
`LogStream` that serves them with the kubelet's options (follow, tail, since, limit).

`log_chunk` is called by the cloud (in-process or behind the HTTP service); the stream
is built by the provider around a fetch function, so it reads the same way locally and
over HTTP. Output is derived from the clock and each run's times, never stored, so the
previous run's output (`--previous`) and a terminated instance's stay readable for free.
Tests: tests/providers/fake/test_fake_console.py.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from providers import base, errors
from providers.fake.records import InstanceRecord
from providers.fake.scenario import LogScript
from providers.fake.workload import Run

MAX_CHUNK_LINES = 5000


@dataclass(frozen=True)
class LogLine:
    index: int
    at: float  # clock time the instance printed it
    text: str


@dataclass(frozen=True)
class LogChunk:
    """Lines `after`.. of the output so far; `total` lines exist now; `ended`: the
    workload stopped and nothing more will come."""

    lines: tuple[LogLine, ...]
    total: int
    ended: bool


def produced(run: Run | None, script: LogScript, now: float) -> int:
    """How many lines `run` has printed by `now`."""
    if run is None:
        return 0
    until = now if run.stopped_at is None else min(now, run.stopped_at)
    if until < run.started_at:
        return 0
    if script.interval <= 0:
        count = len(script.lines or ())
    else:
        count = math.floor((until - run.started_at) / script.interval) + 1
    return count if script.lines is None else min(count, len(script.lines))


def log_chunk(
    record: InstanceRecord,
    script: LogScript,
    now: float,
    *,
    after: int,
    limit: int,
    previous: bool = False,
    container: str = "",
) -> LogChunk:
    """Lines of `container`'s current run (empty: the first app container's), or with
    `previous` of its run before the last restart. NotFound for a container the instance
    does not have, one that has not started, or a previous run that never was."""
    target = record.container(container)
    if target is None:
        raise errors.NotFound(f"fake: instance {record.id} has no container {container!r}")
    run = target.run(previous=previous)
    if run is None:
        what = "has no previous run" if previous else "has not started"
        raise errors.NotFound(f"fake: container {container or target.name!r} of {record.id} {what}")
    total = produced(run, script, now)
    start = max(0, after)
    stop = min(total, start + max(0, min(limit, MAX_CHUNK_LINES)))
    primary = target is record.container("")
    lines = tuple(
        LogLine(i, run.started_at + i * script.interval, script.text(i, record.id, record.claim, target.name, primary))
        for i in range(start, stop)
    )
    ended = (previous or not target.running) and stop >= total
    return LogChunk(lines=lines, total=total, ended=ended)


class Fetch(Protocol):
    """Lines `after`.. (at most `limit`) of one instance's output; raises providers.errors.
    `opening` is true for the stream's first look (the one the call log counts as `logs`)."""

    def __call__(self, after: int, limit: int, *, opening: bool = False) -> LogChunk: ...


def rfc3339(seconds: float) -> str:
    """The kubelet's timestamp form: RFC 3339 with nanoseconds, UTC."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


class ScriptedLogStream:
    """A `LogStream` over a fetch function. Without follow it ends at what existed when
    it was opened; with follow it ends when the workload stops or the instance is gone."""

    def __init__(self, fetch: Fetch, options: base.LogOptions, *, poll: float = 0.2) -> None:
        self._fetch = fetch
        self._options = options
        self._poll = poll
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._buffer = bytearray()
        self._cursor = 0
        self._stop_at: int | None = None  # without follow: the line count at opening
        self._sent = 0
        self._done = False

    def open(self) -> ScriptedLogStream:
        """Take the first look (raises NotFound, Unavailable) and place the cursor."""
        first = self._fetch(0, 0, opening=True)
        if self._options.tail_lines is not None:
            self._cursor = max(0, first.total - self._options.tail_lines)
        if not self._options.follow:
            self._stop_at = first.total
        return self

    def read(self, max_bytes: int = 65536) -> bytes:
        """Block (asking again every `poll` seconds) until `read_nowait` has an answer."""
        while (data := self.read_nowait(max_bytes)) is None:
            self._closed.wait(self._poll)
        return data

    def read_nowait(self, max_bytes: int = 65536) -> bytes | None:
        """`PolledLogStream`: output, b"" at the end (or once closed), None for nothing new yet.
        Fetches until output is there or nothing new came (over HTTP for a cloud behind its service)."""
        with self._lock:
            while not self._buffer and not self._done and not self._closed.is_set():
                if not self._fill():
                    return None
            if self._closed.is_set():
                return b""
            chunk = bytes(self._buffer[:max_bytes])
            del self._buffer[:max_bytes]
            return chunk

    def close(self) -> None:
        self._closed.set()

    def _fill(self) -> bool:
        """Fetch what is new into the buffer; False means wait and try again."""
        limit = MAX_CHUNK_LINES if self._stop_at is None else self._stop_at - self._cursor
        if limit <= 0:
            self._done = True
            return True
        try:
            chunk = self._fetch(self._cursor, limit)
        except errors.ProviderError:
            # Gone or unreachable mid-stream: the stream ends, as a container's log does.
            self._done = True
            return True
        for line in chunk.lines:
            self._cursor = line.index + 1
            self._append(line)
        if chunk.ended and not chunk.lines:
            self._done = True
        return bool(chunk.lines) or self._done

    def _append(self, line: LogLine) -> None:
        since = self._options.since
        if since is not None and line.at < since.timestamp():
            return
        text = f"{rfc3339(line.at)} {line.text}\n" if self._options.timestamps else f"{line.text}\n"
        data = text.encode()
        limit = self._options.limit_bytes
        if limit is not None:
            data = data[: max(0, limit - self._sent)]
            if self._sent + len(data) >= limit:
                self._done = True
        self._sent += len(data)
        self._buffer += data
