"""What a SPDY session reports to its user: one frozen dataclass per thing the peer did.

Produced by `vnode.kubelet.spdy` (ServerSession/ClientSession.receive), consumed by the kubelet's
exec bridge and by tests and benches (tests/vnode/kubelet/test_spdy_session.py). Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StreamOpened:
    """The peer opened a stream (SYN_STREAM); `fin` means it will send no DATA on it."""

    stream_id: int
    headers: tuple[tuple[str, str], ...]
    fin: bool


@dataclass(frozen=True, slots=True)
class DataReceived:
    """Bytes on a stream; `fin` (possibly with empty data) is the peer's end of that stream."""

    stream_id: int
    data: bytes
    fin: bool


@dataclass(frozen=True, slots=True)
class StreamReset:
    """The stream is gone: reset by the peer, or by the session when the peer broke its rules."""

    stream_id: int
    status: int


@dataclass(frozen=True, slots=True)
class PingReceived:
    """The peer pinged; answer with `ping(ping_id)`. Answers to our own pings never appear here."""

    ping_id: int


@dataclass(frozen=True, slots=True)
class GoAwayReceived:
    """The peer opens no more streams; those above `last_stream_id` were not processed by it."""

    last_stream_id: int
    status: int


@dataclass(frozen=True, slots=True)
class StreamReplied:
    """(client side) The server accepted a stream we opened (SYN_REPLY)."""

    stream_id: int
    headers: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class PingAnswered:
    """(client side) The server echoed one of our pings."""

    ping_id: int


Event = StreamOpened | DataReceived | StreamReset | PingReceived | GoAwayReceived
ClientEvent = Event | StreamReplied | PingAnswered
