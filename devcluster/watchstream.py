"""Serving watches: one hub thread writes every open watch stream as chunked NDJSON.

`server.py` sends the response head, then hands the socket to `WatchHub.serve`, which blocks
the connection thread until the stream ends. The hub thread alone encodes and writes events
(non-blocking, through one selector), so hundreds of watchers cost one thread, a writer never
waits for a watcher, and a slow client only grows its own bounded buffer. A stream ends on
timeout, server stop, client disconnect, or expiry (an ERROR event carrying 410 Gone).
"""

from __future__ import annotations

import logging
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from typing import Any

from devcluster import crddefaults, tables
from devcluster.api import WatchReply
from devcluster.errors import failure_status
from devcluster.replybytes import encode_event
from devcluster.store import Expired, Store
from devcluster.watch import Change, Watcher, transition

log = logging.getLogger(__name__)

MAX_PENDING = 8 * 1024 * 1024  # bytes buffered for one slow client before it stops taking events
IDLE_TICK = 0.5


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class WatchStream:
    """One open watch: its watcher, its socket, the bytes not yet written, and how it ended."""

    def __init__(self, reply: WatchReply, sock: socket.socket, watcher: Watcher | None, *, now: float) -> None:
        self.reply = reply
        self.sock = sock
        self.watcher = watcher
        self.pending = bytearray()
        self.deadline = now + reply.timeout if reply.timeout else None
        self.last_bookmark = now
        self.client_gone = False
        self.events = selectors.EVENT_READ
        self.done = threading.Event()

    def add(self, data: bytes) -> None:
        if data:
            self.pending += chunk(data)

    def flush(self) -> None:
        """Write what the socket takes now; never blocks."""
        while self.pending:
            try:
                sent = self.sock.send(self.pending)
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                return
            except OSError:
                self.client_gone = True
                self.pending.clear()
                return
            del self.pending[:sent]


class WatchHub:
    def __init__(self, store: Store, *, bookmark_interval: float) -> None:
        self.store = store
        self.bookmark_interval = bookmark_interval
        self._lock = threading.Lock()
        self._new: list[WatchStream] = []
        self._streams: set[WatchStream] = set()
        self._stopping = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._signalled = False
        self._thread = threading.Thread(target=self._run, name="devcluster-watch-hub", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End every stream and join the hub thread."""
        with self._lock:
            self._stopping = True
        self._wake()
        self._thread.join()
        self._wake_r.close()
        self._wake_w.close()

    def serve(self, reply: WatchReply, sock: socket.socket) -> WatchStream:
        """Run one watch to its end on the hub; returns the ended stream (its unsent bytes in `pending`)."""
        now = time.monotonic()
        try:
            watcher, initial, start_rv = self.store.watch(reply.rt.storage_key, reply.namespace, reply.since)
        except Expired as err:
            stream = WatchStream(reply, sock, None, now=now)
            stream.add(encode_event("ERROR", failure_status(410, "Expired", str(err))))
            return stream
        stream = WatchStream(reply, sock, watcher, now=now)
        if reply.since is None:
            lines = [_line(reply, "ADDED", c.obj) for c in initial if _visible(reply, c.obj)]
            if reply.initial_events_end:
                lines.append(_bookmark(reply, start_rv, initial_end=True))
            stream.add(b"".join(lines))
        watcher.on_ready = self._wake
        with self._lock:
            if self._stopping:
                self.store.unwatch(watcher)
                return stream
            self._new.append(stream)
        self._wake()
        stream.done.wait()
        return stream

    def _wake(self) -> None:
        """Called under the store lock by every offer: one byte at most per hub round."""
        if self._signalled:
            return
        self._signalled = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _run(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._wake_r, selectors.EVENT_READ)
            while True:
                with self._lock:
                    stopping = self._stopping
                    new, self._new = self._new, []
                for stream in new:
                    self._streams.add(stream)
                    selector.register(stream.sock, selectors.EVENT_READ, stream)
                if stopping:
                    for stream in list(self._streams):
                        self._finish(selector, stream)
                    return
                for key, mask in selector.select(timeout=IDLE_TICK):
                    if key.fileobj is self._wake_r:
                        self._drain_wake()
                    elif mask & selectors.EVENT_READ and isinstance(key.data, WatchStream):
                        key.data.client_gone = True  # a watch client sends nothing more: it closed
                now = time.monotonic()
                for stream in list(self._streams):
                    try:
                        ended = self._pump(stream, now)
                    except Exception:  # one broken stream must not stop every other watch
                        log.exception("watch stream failed; closing it")
                        stream.client_gone = ended = True
                    if ended:
                        self._finish(selector, stream)
                    else:
                        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if stream.pending else 0)
                        if events != stream.events:
                            selector.modify(stream.sock, events, stream)
                            stream.events = events

    def _drain_wake(self) -> None:
        # Drained before the flag is cleared: cleared first, a wake landing in between was
        # drained with the flag left set, and every later wake then skipped its byte, so each
        # change waited for the IDLE_TICK (a 0.5 s watch lag, for good). A wake after the drain
        # sends one spare byte at worst; the pump that follows sees every change offered before.
        # One read takes them all (a byte or two: one per flag clear), so no second read to see
        # EAGAIN; were any left, the selector would just report the socket ready again.
        try:
            self._wake_r.recv(4096)
        except (BlockingIOError, OSError):
            pass
        self._signalled = False

    def _pump(self, stream: WatchStream, now: float) -> bool:
        """Move ready changes into the stream and write; True when the stream has ended."""
        watcher, reply = stream.watcher, stream.reply
        if stream.client_gone or watcher is None or watcher.closed:
            return True
        if watcher.expired:
            message = "the watch fell too far behind and was closed; re-list and watch again"
            stream.add(encode_event("ERROR", failure_status(410, "Expired", message)))
            return True
        if stream.deadline is not None and now >= stream.deadline:
            return True
        if len(stream.pending) < MAX_PENDING:
            changes = watcher.take(0)
            if changes:
                stream.add(b"".join(line for line in (_change_line(reply, c) for c in changes) if line))
                stream.last_bookmark = now
            elif reply.bookmarks and now - stream.last_bookmark >= self.bookmark_interval:
                with self.store.lock:
                    rv = self.store.resource_version if watcher.empty() else None
                if rv is not None:
                    stream.add(_bookmark(reply, rv))
                stream.last_bookmark = now
        stream.flush()
        return stream.client_gone

    def _finish(self, selector: selectors.BaseSelector, stream: WatchStream) -> None:
        self._streams.discard(stream)
        try:
            selector.unregister(stream.sock)
        except (KeyError, ValueError):
            pass
        if stream.watcher is not None:
            self.store.unwatch(stream.watcher)
        stream.done.set()


def _visible(reply: WatchReply, obj: Mapping[str, Any]) -> bool:
    return reply.label.matches(obj) and reply.field.matches(obj)


def _everything(obj: Mapping[str, Any]) -> bool:
    return True


def _change_line(reply: WatchReply, change: Change) -> bytes | None:
    everything = reply.label.empty and reply.field.empty  # no selector: skip matching each object twice
    result = transition(change, _everything if everything else lambda obj: _visible(reply, obj))
    if result is None:
        return None
    event_type, obj = result
    if reply.table is None and crddefaults.defaulted(reply.defaults, obj) is obj:
        return change.encoded(event_type, encode_event)
    return _line(reply, event_type, obj)


def _line(reply: WatchReply, event_type: str, obj: dict[str, Any]) -> bytes:
    obj = crddefaults.defaulted(reply.defaults, obj)
    if reply.table is None:
        return encode_event(event_type, obj)
    rv = obj["metadata"].get("resourceVersion", "")
    table = tables.to_table(
        reply.rt.kind, [obj], resource_version=rv, include_object=reply.table, custom=reply.rt.printer_columns
    )
    return encode_event(event_type, table)


def _bookmark(reply: WatchReply, rv: int, *, initial_end: bool = False) -> bytes:
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    return encode_event("BOOKMARK", {"kind": reply.rt.kind, "apiVersion": reply.rt.api_version, "metadata": meta})
