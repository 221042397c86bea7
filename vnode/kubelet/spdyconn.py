"""The connection plumbing shared by the kubelet's SPDY/3.1 protocols: exec/attach and port-forward.

`SpdyConnection` is a Twisted protocol around one `spdy.ServerSession`: it feeds the wire
to the session (a protocol error answers GOAWAY and closes), dispatches its events to the
subclass, echoes pings, is the transport's push producer, runs the stream clocks and
closes under TLS. Subclassed by `spdyexec.SpdyExecProtocol` and
`portforward.SpdyPortForwardProtocol`. Runs on the reactor, except `_queue_data`, which
only threads call; never calls a provider.
Tests: tests/vnode/kubelet/test_spdy_wire.py, tests/vnode/kubelet/test_port_forward.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from twisted.internet.protocol import Protocol

from vnode.kubelet import spdy
from vnode.kubelet.loop import reactor
from vnode.kubelet.streamtimers import StreamTimers

MAX_FRAME = 1 << 20  # I7: kubectl writes at most 32 KiB per frame
MAX_HEADER_BLOCK = 64 << 10
IN_FLIGHT = 16  # output chunks handed to the reactor and not yet written
DATA_FRAME = 32 * 1024  # kubectl's own frame size: safe for every client
UNREAD_REFUSALS = 4096  # I7: RST_STREAMs (16 bytes each) added to a full transport before the session ends


class SpdyConnection(Protocol):
    """One upgraded connection. Subclasses handle the streams (`_on_stream`, `_on_data`,
    `_on_reset`), say why the clocks ran out (`_timed_out`) and drop what they hold when the
    connection goes (`_release`)."""

    transport: Any  # a TCP or TLS transport (Twisted types it loosely as ITransport | None)
    log: logging.Logger  # the subclass's module logger
    log_label = "SPDY"  # how the log names the session

    def __init__(self, *, max_streams: int, creation_timeout: float, idle_timeout: float) -> None:
        self._session = spdy.ServerSession(
            max_frame_size=MAX_FRAME,
            max_header_block=MAX_HEADER_BLOCK,
            max_streams=max_streams,
            max_data_payload=DATA_FRAME,
        )
        self._closed = False
        self._unread_refusals = 0  # RST_STREAMs written while the transport was full (see dataReceived)
        self._writable = threading.Event()
        self._writable.set()
        self._gone = threading.Event()
        self._in_flight = threading.BoundedSemaphore(IN_FLIGHT)
        self._clocks = StreamTimers(self._timed_out, creation_timeout=creation_timeout, idle_timeout=idle_timeout)
        self.on_closed: Callable[[], object] | None = None  # the server's bookkeeping

    # -- Twisted ------------------------------------------------------------------------------
    def connectionMade(self) -> None:
        self.transport.registerProducer(self, True)
        self._clocks.start()

    def dataReceived(self, data: bytes) -> None:
        if self._closed:
            return
        self._clocks.activity()
        while True:
            try:
                events = self._session.receive(data)
            except spdy.ProtocolError as exc:
                self._end_session(str(exc))
                return
            for event in events:
                self._on_event(event)
            self._write(self._session.data_to_send())
            if not self._session.stalled or self._closed:
                return
            # A burst of refused streams: their RST_STREAMs went out in a batch, parsing goes on.
            # While the transport is full (a busy client, or one that reads nothing), at most
            # UNREAD_REFUSALS of them are added to it; past that the client is not collecting them.
            if not self._writable.is_set():
                self._unread_refusals += spdy.MAX_PENDING_FRAMES
                if self._unread_refusals > UNREAD_REFUSALS:
                    self._end_session("too many stream errors left unread by the client")
                    return
            data = b""

    def _end_session(self, why: str) -> None:
        self.log.info("%s session ended: %s", self.log_label, why)
        self._write(self._session.goaway(1))
        self._close()

    def connectionLost(self, reason: Any = None) -> None:
        self._closed = True
        self._clocks.stop()
        self._gone.set()
        self._writable.set()
        self._release()
        if self.on_closed is not None:
            self.on_closed()

    # IPushProducer: the transport's buffer filled up (pause) or drained (resume).
    def pauseProducing(self) -> None:
        self._writable.clear()

    def resumeProducing(self) -> None:
        self._unread_refusals = 0
        self._writable.set()

    def stopProducing(self) -> None:
        self._gone.set()
        self._writable.set()

    # -- SPDY events --------------------------------------------------------------------------
    def _on_event(self, event: spdy.Event) -> None:
        if isinstance(event, spdy.StreamOpened):
            self._on_stream(event)
        elif isinstance(event, spdy.DataReceived):
            self._on_data(event)
        elif isinstance(event, spdy.StreamReset):
            self._on_reset(event)
        elif isinstance(event, spdy.PingReceived):
            self._write(self._session.ping(event.ping_id))
        # GoAwayReceived: the client opens nothing more; the session runs on until it ends.

    def _on_stream(self, event: spdy.StreamOpened) -> None:
        raise NotImplementedError

    def _on_data(self, event: spdy.DataReceived) -> None:
        raise NotImplementedError

    def _on_reset(self, event: spdy.StreamReset) -> None:
        raise NotImplementedError

    def _timed_out(self, reason: str) -> None:
        raise NotImplementedError

    def _release(self) -> None:
        """The connection is gone (on the reactor): cancel timers, end what runs on threads."""
        raise NotImplementedError

    # -- from threads -------------------------------------------------------------------------
    def _queue_data(self, stream_id: int, data: bytes) -> bool:
        """Hand DATA to the reactor, waiting while the transport is full or IN_FLIGHT chunks
        are pending; False once the connection is gone."""
        while not self._gone.is_set():
            if self._writable.wait(0.5) and self._in_flight.acquire(timeout=0.5):
                if self._gone.is_set():
                    self._in_flight.release()
                    return False
                reactor.callFromThread(self._send_data, stream_id, data)
                return True
        return False

    # -- on the reactor -----------------------------------------------------------------------
    def _send_data(self, stream_id: int, data: bytes) -> None:
        self._in_flight.release()
        if not self._closed:
            self._write(self._session.send_data(stream_id, data))

    def _write(self, data: bytes) -> None:
        if data and not self._closed:
            self._clocks.activity()
            self.transport.write(data)

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            self.transport.unregisterProducer()  # TLS holds the close while a producer is registered
            self.transport.loseConnection()
