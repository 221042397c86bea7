"""The two clocks of an upgraded stream connection: stream creation, then idleness (I7).

Every Twisted protocol over `spdy.ServerSession` (exec and attach in `spdyexec`, port-forward)
owns one `StreamTimers`: `start()` at connectionMade, `setup_complete()` once the streams
its request implies exist (exec: all of them; port-forward: one data and error pair),
`activity()` for every chunk read or written, `stop()` at connectionLost. A connection that
never completes set-up (a truncated frame held open counts) is closed when the creation
timeout passes; a set-up connection with no traffic for the idle timeout is closed too
(the kubelet's --streaming-connection-idle-timeout). Runs on the reactor; never blocks.
Tests: tests/vnode/kubelet/test_listener_limits.py, tests/vnode/kubelet/test_exec_sessions.py.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from vnode.kubelet.loop import reactor

logger = logging.getLogger(__name__)

CREATION_TIMEOUT = 30.0  # seconds (the kubelet's default)
IDLE_TIMEOUT = 4 * 3600.0  # seconds (the kubelet's default)


class StreamTimers:
    """`close(reason)` is called at most once, on the reactor, when a clock runs out."""

    def __init__(
        self,
        close: Callable[[str], object],
        *,
        creation_timeout: float = CREATION_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> None:
        self._close = close
        self.creation_timeout = creation_timeout
        self.idle_timeout = idle_timeout
        self._timer: Any = None
        self._last = time.monotonic()
        self._set_up = False
        self._stopped = False

    def start(self) -> None:
        self._timer = reactor.callLater(self.creation_timeout, self._creation_ran_out)

    def setup_complete(self) -> None:
        """The streams are there: from now on only idleness ends the connection."""
        if self._set_up or self._stopped:
            return
        self._set_up = True
        self._cancel()
        self._last = time.monotonic()
        self._timer = reactor.callLater(self.idle_timeout, self._idle_check)

    def activity(self) -> None:
        self._last = time.monotonic()

    def stop(self) -> None:
        self._stopped = True
        self._cancel()

    @property
    def set_up(self) -> bool:
        return self._set_up

    def _creation_ran_out(self) -> None:
        self._timer = None
        if not self._set_up and not self._stopped:
            self._stopped = True
            self._close(f"streams not set up within {self.creation_timeout:g} s")

    def _idle_check(self) -> None:
        self._timer = None
        if self._stopped:
            return
        idle = time.monotonic() - self._last
        if idle >= self.idle_timeout:
            self._stopped = True
            self._close(f"no traffic for {self.idle_timeout:g} s")
        else:
            self._timer = reactor.callLater(self.idle_timeout - idle, self._idle_check)

    def _cancel(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None


def watch_websocket(protocol: Any, *, idle_timeout: float) -> StreamTimers:
    """The idle clock on an upgraded websocket (Daphne's protocol over autobahn), installed
    before its first byte: frames either way count as traffic. Its handshake has its own
    bound (autobahn's openHandshakeTimeout, the creation timeout); exec over websocket sets
    up no streams, so the idle clock runs from the start. A close that times out ends the
    connection with a FIN, not autobahn's reset."""

    def close(reason: str) -> None:
        logger.info("websocket stream: %s; closing", reason)
        if protocol.transport is not None:
            protocol.transport.abortConnection()

    clocks = StreamTimers(close, idle_timeout=idle_timeout)
    received, sent, lost = protocol.dataReceived, protocol.sendData, protocol.connectionLost

    def data_received(data: bytes) -> None:
        clocks.activity()
        received(data)

    def send_data(data: bytes, sync: bool = False, chopsize: int | None = None) -> None:
        clocks.activity()
        sent(data, sync, chopsize)

    def connection_lost(reason: Any = None) -> None:
        clocks.stop()
        lost(reason)

    drop = protocol.dropConnection

    def drop_connection(abort: bool = False) -> None:
        # autobahn aborts (a TCP reset) when the client is slow to answer our Close: the reset
        # throws away what the client has not read yet, the exit status included, so kubectl
        # sees close 1006. A kubelet closes with a FIN; so do we.
        drop(abort=False)

    protocol.dataReceived, protocol.sendData, protocol.connectionLost = data_received, send_data, connection_lost
    protocol.dropConnection = drop_connection
    clocks.setup_complete()
    return clocks
