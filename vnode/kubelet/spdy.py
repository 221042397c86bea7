"""SPDY/3.1 sessions, sans-IO: bytes in -> events, calls -> bytes out (exec-protocols.md §1).

The kubelet server feeds `ServerSession.receive` what it reads after the 101 and writes
what the other methods return; tests and benches drive `ClientSession` the same way.
Never touches a socket, a thread or a clock; the only exception raised on bad input is
`ProtocolError`, after which the session is dead (send `goaway(1)` and close).
Tests: tests/vnode/kubelet/test_spdy_session.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from vnode.kubelet import spdyframes as frames
from vnode.kubelet.spdyevents import (
    ClientEvent,
    DataReceived,
    Event,
    GoAwayReceived,
    PingAnswered,
    PingReceived,
    StreamOpened,
    StreamReplied,
    StreamReset,
)
from vnode.kubelet.spdyframes import ProtocolError

# The events and ProtocolError are part of this module's API (re-exported).
__all__ = [
    "ClientSession",
    "ServerSession",
    "ProtocolError",
    "MAX_PENDING_FRAMES",
    "ClientEvent",
    "DataReceived",
    "Event",
    "GoAwayReceived",
    "PingAnswered",
    "PingReceived",
    "StreamOpened",
    "StreamReplied",
    "StreamReset",
]

# Parsing stops once this many RST_STREAMs wait to be sent (`stalled`), so a burst of refused
# streams is answered in batches the caller writes between; no more is ever queued here.
MAX_PENDING_FRAMES = 256


class _Stream:
    __slots__ = ("remote_open", "local_open", "replied")

    def __init__(self, *, remote_open: bool, local_open: bool, replied: bool) -> None:
        self.remote_open = remote_open  # the peer may still send DATA
        self.local_open = local_open  # we may still send DATA
        self.replied = replied  # SYN_REPLY sent (server) or received (client)


class _Session:
    """State and frame handling shared by both ends; `_server` says which parity is ours.

    Stream ids opened by the peer must have the peer's parity and increase; a violation,
    a malformed frame, a frame longer than `max_frame_size` (refused from its 8-byte
    header, before any of its body is buffered) or a header block inflating past
    `max_header_block` raises ProtocolError. Stream-level faults are answered with an
    RST_STREAM that the session queues itself (see `data_to_send`).
    """

    _server: bool

    def __init__(
        self, *, max_frame_size: int, max_header_block: int, max_streams: int, max_data_payload: int | None = None
    ) -> None:
        """`max_data_payload` bounds the DATA frames we send (default `max_frame_size`, the
        bound on what we receive)."""
        if not 0 < max_frame_size <= frames.MAX_LENGTH:
            raise ValueError(f"max_frame_size must be in 1..{frames.MAX_LENGTH}")
        if max_data_payload is not None and not 0 < max_data_payload <= frames.MAX_LENGTH:
            raise ValueError(f"max_data_payload must be in 1..{frames.MAX_LENGTH}")
        self.max_frame_size = max_frame_size
        self.max_data_payload = max_data_payload or max_frame_size
        self.max_streams = max_streams
        self._buffer = bytearray()
        self._inflater = frames.HeaderInflater(limit=max_header_block)
        self._deflater = frames.HeaderDeflater()
        self._streams: dict[int, _Stream] = {}
        self._last_peer_stream = 0  # highest id the peer opened, accepted or not
        self._last_accepted = 0  # highest id reported as StreamOpened (GOAWAY's last-good id)
        self._pending: list[bytes] = []
        self._events: list[ClientEvent] = []
        self._failure: str | None = None
        self._goaway_sent = False
        self.stalled = False  # parsing stopped at MAX_PENDING_FRAMES: write `data_to_send`, then `receive(b"")`

    # -- receiving ---------------------------------------------------------------------------

    def _receive(self, data: bytes) -> list[ClientEvent]:
        if self._failure is not None:
            raise ProtocolError(f"session already failed: {self._failure}")
        events: list[ClientEvent] = []
        self._events = events
        buffer = self._buffer
        if buffer:
            buffer += data
        source = buffer if buffer else data  # parse straight from `data` when nothing was left over
        offset = 0
        try:
            offset = self._parse_frames(source)
        except ProtocolError as exc:
            self._failure = str(exc)
            self._buffer = bytearray()
            raise
        if source is buffer:
            del buffer[:offset]
        elif offset < len(data):
            buffer += data[offset:]
        return events

    def _parse_frames(self, source: bytes | bytearray) -> int:
        """Handle every complete frame in `source`; return how many bytes they took."""
        offset, size = 0, len(source)
        self.stalled = False
        with memoryview(source) as view:
            while size - offset >= frames.HEADER_SIZE:
                if len(self._pending) >= MAX_PENDING_FRAMES:
                    self.stalled = True  # the rest waits until these are sent
                    break
                word0, flags, length = frames.parse_head(source, offset)
                if length > self.max_frame_size:
                    raise ProtocolError(f"frame of {length} bytes exceeds the {self.max_frame_size} byte bound")
                end = offset + frames.HEADER_SIZE + length
                if end > size:
                    break
                payload = bytes(view[offset + frames.HEADER_SIZE : end])
                offset = end
                if word0 & 0x80000000:
                    self._on_control(word0, flags, payload)
                else:
                    self._on_data(word0, flags, payload)
        return offset

    def _on_data(self, stream_id: int, flags: int, payload: bytes) -> None:
        if stream_id == 0:
            raise ProtocolError("DATA frame on stream 0")
        stream = self._streams.get(stream_id)
        fin = bool(flags & frames.FLAG_FIN)
        if stream is None:
            self._on_unknown_stream(stream_id)
        elif not stream.remote_open:
            self._reset_by_us(stream_id, frames.STREAM_ALREADY_CLOSED)
        else:
            if fin:
                stream.remote_open = False
                self._forget_if_closed(stream_id, stream)
            self._events.append(DataReceived(stream_id, payload, fin))

    def _on_unknown_stream(self, stream_id: int) -> None:
        """DATA or HEADERS for a stream that is not open: INVALID_STREAM, unless it is a late
        frame for a stream the peer opened and that has since closed (a race, not an error),
        or we already sent GOAWAY (the peer cannot know which streams we still accept)."""
        peer_parity = 1 if self._server else 0
        if self._goaway_sent or (stream_id % 2 == peer_parity and stream_id <= self._last_peer_stream):
            return
        if stream_id % 2 != peer_parity and stream_id < self._next_own_stream():
            return
        self._pending.append(frames.rst_stream_frame(stream_id, frames.INVALID_STREAM))

    def _next_own_stream(self) -> int:
        return 0

    def _on_control(self, word0: int, flags: int, payload: bytes) -> None:
        version = (word0 >> 16) & 0x7FFF
        if version != frames.VERSION:
            raise ProtocolError(f"control frame of SPDY version {version}")
        frame_type = word0 & 0xFFFF
        if frame_type == frames.SYN_STREAM:
            self._on_syn_stream(flags, payload)
        elif frame_type == frames.SYN_REPLY:
            stream_id, block = frames.parse_stream_and_block("SYN_REPLY", payload)
            self._on_syn_reply(stream_id, self._inflater.inflate(block), flags)
        elif frame_type == frames.RST_STREAM:
            self._on_rst_stream(payload)
        elif frame_type == frames.SETTINGS:
            frames.check_settings(payload)
        elif frame_type == frames.PING:
            self._on_ping(frames.parse_ping(payload))
        elif frame_type == frames.GOAWAY:
            last, status = frames.parse_pair("GOAWAY", payload)
            self._events.append(GoAwayReceived(last, status))
        elif frame_type == frames.HEADERS:
            self._on_headers(flags, payload)
        elif frame_type == frames.WINDOW_UPDATE:
            frames.parse_pair("WINDOW_UPDATE", payload)  # no flow control: spdystream has none (§1.5)
        # Any other type (NOOP, CREDENTIAL, unknown) is skipped: its length was already bounded.

    def _on_syn_stream(self, flags: int, payload: bytes) -> None:
        stream_id, block = frames.parse_syn_stream(payload)
        # Inflate before any check: the zlib stream must advance even for a refused stream.
        headers = self._inflater.inflate(block)
        if stream_id == 0 or stream_id % 2 != (1 if self._server else 0):
            raise ProtocolError(f"SYN_STREAM with stream id {stream_id} of the wrong parity")
        if stream_id <= self._last_peer_stream:
            raise ProtocolError(f"SYN_STREAM id {stream_id} does not exceed {self._last_peer_stream}")
        self._last_peer_stream = stream_id
        if self._goaway_sent:
            return  # the peer had not yet seen our GOAWAY; the stream is ignored, as SPDY says
        if len(self._streams) >= self.max_streams:
            self._pending.append(frames.rst_stream_frame(stream_id, frames.REFUSED_STREAM))
            return
        fin = bool(flags & frames.FLAG_FIN)
        unidirectional = bool(flags & frames.FLAG_UNIDIRECTIONAL)
        self._streams[stream_id] = _Stream(remote_open=not fin, local_open=not unidirectional, replied=False)
        self._last_accepted = stream_id
        self._events.append(StreamOpened(stream_id, headers, fin))

    def _on_syn_reply(self, stream_id: int, headers: tuple[tuple[str, str], ...], flags: int) -> None:
        raise ProtocolError(f"SYN_REPLY for stream {stream_id}: a server opens no streams")

    def _on_rst_stream(self, payload: bytes) -> None:
        stream_id, status = frames.parse_pair("RST_STREAM", payload)
        if stream_id == 0 or status == 0:
            raise ProtocolError(f"RST_STREAM with stream id {stream_id} and status {status}")
        if self._streams.pop(stream_id, None) is not None:
            self._events.append(StreamReset(stream_id, status))

    def _on_ping(self, ping_id: int) -> None:
        if ping_id % 2 == (1 if self._server else 0):
            self._events.append(PingReceived(ping_id))
        else:
            self._on_ping_answer(ping_id)

    def _on_ping_answer(self, ping_id: int) -> None:
        """A ping with our own parity answers one of ours; the server sends none, so it is dropped."""

    def _on_headers(self, flags: int, payload: bytes) -> None:
        stream_id, block = frames.parse_stream_and_block("HEADERS", payload)
        self._inflater.inflate(block)  # Kubernetes sends none; the values have no use here
        if stream_id == 0:
            raise ProtocolError("HEADERS frame on stream 0")
        if flags & frames.FLAG_FIN:
            self._on_data(stream_id, frames.FLAG_FIN, b"")
        elif stream_id not in self._streams:
            self._on_unknown_stream(stream_id)

    def _reset_by_us(self, stream_id: int, status: int) -> None:
        del self._streams[stream_id]
        self._pending.append(frames.rst_stream_frame(stream_id, status))
        self._events.append(StreamReset(stream_id, status))

    def _forget_if_closed(self, stream_id: int, stream: _Stream) -> None:
        if not stream.remote_open and not stream.local_open:
            del self._streams[stream_id]

    # -- sending -----------------------------------------------------------------------------

    def data_to_send(self) -> bytes:
        """Frames the session decided on by itself (RST_STREAM for refused or invalid streams).

        Every other sending method also returns these first, so a caller that only writes
        what those methods return sends them too, at its next write.
        """
        out = b"".join(self._pending)
        self._pending.clear()
        return out

    def _out(self, frame: bytes) -> bytes:
        return self.data_to_send() + frame if self._pending else frame

    def send_data(self, stream_id: int, data: bytes, *, fin: bool = False) -> bytes:
        """DATA frames of at most `max_data_payload` bytes each; b"" if we may not send on the
        stream (never opened, reset, or already finished by us) or if there is nothing to send."""
        stream = self._streams.get(stream_id)
        if stream is None or not stream.local_open or (not data and not fin):
            return self.data_to_send()
        if fin:
            stream.local_open = False
            self._forget_if_closed(stream_id, stream)
        return self._out(frames.data_frames(stream_id, data, fin=fin, max_payload=self.max_data_payload))

    def finish(self, stream_id: int) -> bytes:
        """An empty DATA frame with FIN: we send nothing more on this stream (half-close)."""
        return self.send_data(stream_id, b"", fin=True)

    def reset(self, stream_id: int, status: int = frames.CANCEL) -> bytes:
        """RST_STREAM (default CANCEL, as the Go kubelet's close does); b"" if not open."""
        if not 0 < status <= frames.MAX_STATUS:
            raise ValueError(f"RST_STREAM status must be in 1..{frames.MAX_STATUS}")
        if self._streams.pop(stream_id, None) is None:
            return self.data_to_send()
        return self._out(frames.rst_stream_frame(stream_id, status))

    def ping(self, ping_id: int) -> bytes:
        """A PING frame: the echo of a PingReceived, or a ping of our own (our parity)."""
        if not 0 <= ping_id <= frames.MAX_STATUS:
            raise ValueError("a ping id is a 32-bit unsigned integer")
        return self._out(frames.ping_frame(ping_id))

    def goaway(self, status: int = frames.GOAWAY_OK) -> bytes:
        """GOAWAY naming the last stream of the peer's we accepted; later SYN_STREAMs are ignored."""
        if not 0 <= status <= frames.MAX_STATUS:
            raise ValueError("a GOAWAY status is a 32-bit unsigned integer")
        self._goaway_sent = True
        return self._out(frames.goaway_frame(self._last_accepted, status))

    def open_streams(self) -> set[int]:
        """Streams not yet closed in both directions and not reset."""
        return set(self._streams)


class ServerSession(_Session):
    """The kubelet's end: the client opens odd streams, we reply, send DATA and close."""

    _server = True

    def __init__(
        self,
        *,
        max_frame_size: int = 1 << 20,
        max_header_block: int = 256 << 10,
        max_streams: int = 16,
        max_data_payload: int | None = None,
    ) -> None:
        """More than `max_streams` open streams: the extra one is answered RST_STREAM
        REFUSED_STREAM (queued, see `data_to_send`) and never reported."""
        super().__init__(
            max_frame_size=max_frame_size,
            max_header_block=max_header_block,
            max_streams=max_streams,
            max_data_payload=max_data_payload,
        )

    def receive(self, data: bytes) -> list[Event]:
        """Frames completed by `data` as events (partial frames are kept for the next call)."""
        # The server hooks never produce StreamReplied or PingAnswered (see _Session).
        return cast(list[Event], self._receive(data))

    def reply(self, stream_id: int, headers: Sequence[tuple[str, str]] = (), *, fin: bool = False) -> bytes:
        """SYN_REPLY (send it at once: the client waits for it before opening the next stream);
        b"" if the stream is no longer open or was already replied to."""
        stream = self._streams.get(stream_id)
        if stream is None or stream.replied:
            return self.data_to_send()
        stream.replied = True
        block = self._deflater.compress(headers)
        if fin:
            stream.local_open = False
            self._forget_if_closed(stream_id, stream)
        return self._out(frames.syn_reply_frame(stream_id, block, flags=frames.FLAG_FIN if fin else 0))


class ClientSession(_Session):
    """The API server's (or kubectl's) end, for tests and benches: opens odd streams."""

    _server = False

    def __init__(
        self, *, max_frame_size: int = 1 << 20, max_header_block: int = 256 << 10, max_streams: int = 16
    ) -> None:
        super().__init__(max_frame_size=max_frame_size, max_header_block=max_header_block, max_streams=max_streams)
        self._next_stream = 1

    def receive(self, data: bytes) -> list[ClientEvent]:
        return self._receive(data)

    def open(self, headers: Sequence[tuple[str, str]], *, fin: bool = False) -> tuple[int, bytes]:
        """SYN_STREAM with the next odd id; returns (stream id, bytes to write)."""
        stream_id = self._next_stream
        if stream_id > frames.MAX_ID:
            raise ValueError("stream ids exhausted; open a new connection")
        self._next_stream += 2
        block = self._deflater.compress(headers)
        self._streams[stream_id] = _Stream(remote_open=True, local_open=not fin, replied=False)
        return stream_id, self._out(frames.syn_stream_frame(stream_id, block, flags=frames.FLAG_FIN if fin else 0))

    def _next_own_stream(self) -> int:
        return self._next_stream

    def _on_syn_reply(self, stream_id: int, headers: tuple[tuple[str, str], ...], flags: int) -> None:
        stream = self._streams.get(stream_id)
        if stream is None:
            if stream_id >= self._next_stream or stream_id % 2 == 0:
                raise ProtocolError(f"SYN_REPLY for stream {stream_id}, which we never opened")
            return  # a reply racing our own reset or close
        if stream.replied:
            raise ProtocolError(f"second SYN_REPLY for stream {stream_id}")
        stream.replied = True
        self._events.append(StreamReplied(stream_id, headers))
        if flags & frames.FLAG_FIN:
            self._on_data(stream_id, frames.FLAG_FIN, b"")

    def _on_ping_answer(self, ping_id: int) -> None:
        self._events.append(PingAnswered(ping_id))
