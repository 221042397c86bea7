"""`kubectl logs` for a Modal sandbox: its entrypoint's stdout and stderr from Modal's log
store (`Sandbox.logs.fetch`), stamped at the source, merged in time order.

Called by `ModalProvider.logs`. Follow polls `fetch` from the last entry's time every
`log_poll_interval` seconds until the sandbox has ended (then one last fetch), dropping
entries already given. tail_lines, limit_bytes, since and timestamps are applied here.
Tests: tests/providers/modal/test_modal_provider_logs.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from providers import base
from providers.modal.classify import sdk_errors


def stamp(moment: datetime) -> bytes:
    """RFC 3339 with nanoseconds, as the kubelet prefixes a line."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f000Z").encode()


class ModalLogStream:
    """A LogStream over `fetch(since)` (entries with `.message`, `.timestamp`, `.source`)."""

    def __init__(
        self,
        fetch: Callable[[datetime], list[Any]],
        ended: Callable[[], bool],
        options: base.LogOptions,
        *,
        start: datetime,
        poll_seconds: float,
    ) -> None:
        self._fetch = fetch
        self._ended = ended
        self._options = options
        self._poll = poll_seconds
        self._since = options.since or start
        self._seen: set[tuple[datetime, str, str]] = set()
        self._buffer = bytearray()
        self._closed = threading.Event()
        self._first = True
        self._done = False
        self._left = options.limit_bytes

    def _render(self, entries: list[Any]) -> bytes:
        out = bytearray()
        for entry in entries:
            key = (entry.timestamp, str(entry.source), entry.message)
            if key in self._seen or str(entry.source).lower().endswith("system") or entry.timestamp < self._since:
                continue
            self._seen.add(key)
            text = entry.message.encode()
            if self._options.timestamps:
                lines = text.splitlines(keepends=True)
                text = b"".join(stamp(entry.timestamp) + b" " + line for line in lines)
            out += text
        if entries:
            latest = max(entry.timestamp for entry in entries)
            self._seen = {key for key in self._seen if key[0] >= latest - timedelta(seconds=1)}
            self._since = max(self._since, latest)
        return bytes(out)

    def _pull(self) -> None:
        if self._first:
            self._first = False
            data = self._render(self._fetch(self._since))
            if self._options.tail_lines is not None:
                lines = data.splitlines(keepends=True)
                data = b"".join(lines[-self._options.tail_lines :]) if self._options.tail_lines else b""
            self._buffer += data
            self._done = not self._options.follow
            return
        while not self._closed.is_set() and not self._buffer:
            ended = self._ended()
            self._buffer += self._render(self._fetch(self._since))
            if ended:
                self._done = True
                return
            if not self._buffer:
                self._closed.wait(self._poll)

    def read(self, max_bytes: int = 65536) -> bytes:
        if self._closed.is_set() or self._left == 0:
            return b""
        if not self._buffer and not self._done:
            with sdk_errors():
                self._pull()
        size = max_bytes if self._left is None else min(max_bytes, self._left)
        chunk = bytes(self._buffer[:size])
        del self._buffer[:size]
        if self._left is not None:
            self._left -= len(chunk)
        return chunk

    def close(self) -> None:
        self._closed.set()
