"""Logs from the serial console (`GetConsoleOutput`), for instances Nebula cannot SSH to.

Called by `AwsProvider.logs` when SSH cannot serve (no SSH, not running, unreachable). EC2
returns the last 64 KiB of the console, base64-encoded (plain text accepted too), posted
after each state transition and kept for at least an hour after the last, terminated
instances included; `follow` polls it and emits what was appended, until the instance no
longer runs (the snapshot after that is the last) or is gone.
Tests: tests/providers/aws/test_aws_boot.py.
"""

from __future__ import annotations

import base64
import binascii
import threading
from collections.abc import Callable
from dataclasses import dataclass

from providers import base

_OVERLAP = 256  # bytes of the previous snapshot looked for in the next one


@dataclass(frozen=True)
class Snapshot:
    """The console as EC2 served it; `live`: the instance still runs, so more may come."""

    data: bytes
    live: bool


def decode_console(output: str | None) -> bytes:
    """GetConsoleOutput's `Output`: base64 on EC2, plain text elsewhere (moto)."""
    if not output:
        return b""
    try:
        return base64.b64decode(output, validate=True)
    except (binascii.Error, ValueError):
        return output.encode("utf-8", errors="replace")


def appended(old: bytes, new: bytes) -> bytes:
    """What `new` (a rolling window) adds after `old`: the snapshot may have been cut at
    the front, so find the end of `old` inside `new`."""
    if not old:
        return new
    if new.startswith(old):
        return new[len(old) :]
    tail = old[-_OVERLAP:]
    at = new.rfind(tail)
    return new[at + len(tail) :] if at >= 0 else new


def lines_of(data: bytes, prefix: bytes) -> bytes:
    """The console lines of one of several containers (they start with `prefix`, its name and
    a space), the prefix removed; everything else on the console (boot noise, the other
    containers, the markers) left out."""
    return b"".join(line[len(prefix) :] for line in data.splitlines(keepends=True) if line.startswith(prefix))


def tail_lines(data: bytes, lines: int | None) -> bytes:
    if lines is None:
        return data
    if lines <= 0:
        return b""
    return b"".join(data.splitlines(keepends=True)[-lines:])


class ConsoleLogStream:
    """A `LogStream` over console snapshots. `fetch` returns the decoded console, or None
    once the instance is gone; it may raise `providers.errors`. A snapshot that is not
    `live` is the last one read."""

    def __init__(self, fetch: Callable[[], Snapshot | None], options: base.LogOptions, *, poll_seconds: float) -> None:
        self._fetch = fetch
        self._options = options
        self._poll = poll_seconds
        self._seen: bytes | None = None
        self._remaining = options.limit_bytes
        self._pending = bytearray()
        self._closed = threading.Event()
        self._ended = False

    def read(self, max_bytes: int = 65536) -> bytes:
        while not self._pending and not self._closed.is_set() and self._remaining != 0 and not self._ended:
            if self._seen is not None and not self._options.follow:
                break
            if self._seen is not None:
                self._closed.wait(self._poll)
                if self._closed.is_set():
                    break
            fetched = self._fetch()
            if fetched is None:
                break
            self._ended = not fetched.live
            snapshot = fetched.data
            out = (
                tail_lines(snapshot, self._options.tail_lines) if self._seen is None else appended(self._seen, snapshot)
            )
            self._seen = snapshot
            self._pending += self._limit(out)
        chunk = bytes(self._pending[: max(1, max_bytes)])
        del self._pending[: len(chunk)]
        return chunk

    def _limit(self, data: bytes) -> bytes:
        if self._remaining is not None:
            data = data[: self._remaining]
            self._remaining -= len(data)
        return data

    def close(self) -> None:
        self._closed.set()
