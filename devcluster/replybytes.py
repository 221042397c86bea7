"""JSON bytes of replies and watch events, with a write's reply sharing its watch event's encoding.

`api.Api` encodes write replies through `WrittenObjects`; `watchstream` encodes every event with
`encode_event`. A reply reuses a line only for the very object its own thread just stored (the
store never mutates a stored snapshot), so its bytes are exactly `json.dumps` of the reply
object; it never caches across objects. Tests: tests/devcluster/test_replybytes.py.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from typing import Any

from devcluster.store import Store
from devcluster.watch import Change

RECENT = 4  # changes remembered per thread: a write's reply names one of its last few


def encode_object(obj: Any) -> bytes:
    """Compact JSON, as every reply body is written."""
    return json.dumps(obj, separators=(",", ":")).encode()


def _prefix(event_type: str) -> bytes:
    return b'{"type":%s,"object":' % json.dumps(event_type).encode()


def encode_event(event_type: str, obj: Any) -> bytes:
    """One watch NDJSON line: the bytes of json.dumps({"type": ..., "object": obj}) plus a newline."""
    return _prefix(event_type) + encode_object(obj) + b"}\n"


def object_of_line(event_type: str, line: bytes) -> bytes:
    """`encode_object(obj)` taken back out of `encode_event(event_type, obj)`."""
    prefix = _prefix(event_type)
    assert line.startswith(prefix) and line.endswith(b"}\n"), "not a line of encode_event"
    return line[len(prefix) : -2]


class WrittenObjects:
    """Per thread, the last few changes that thread's writes made to the store (a store listener)."""

    def __init__(self, store: Store) -> None:
        self._local = threading.local()
        store.add_listener(self._record)

    def _record(self, change: Change) -> None:
        recent: deque[Change] | None = getattr(self._local, "recent", None)
        if recent is None:
            recent = self._local.recent = deque(maxlen=RECENT)
        recent.append(change)

    def encode(self, obj: Any) -> bytes:
        """`encode_object(obj)`; when `obj` is the object of a change this thread just made, cut
        from that change's watch line (made now if no watcher made it yet, then shared with them)."""
        recent: deque[Change] | None = getattr(self._local, "recent", None)
        if recent is not None:
            for change in reversed(recent):
                if change.obj is obj:
                    return object_of_line(change.type, change.encoded(change.type, encode_event))
        return encode_object(obj)
