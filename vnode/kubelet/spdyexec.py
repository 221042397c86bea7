"""The exec/attach session over SPDY/3.1: a `spdyconn.SpdyConnection` around `spdy.ServerSession`.

Installed on the connection by `upgrade.KubeletRequest` right after the 101. Runs on the
reactor: it replies to every SYN_STREAM at once, echoes pings, and starts the
`RemoteSession` once the streams the request implies exist. The session's threads reach
it through the `Outlet` methods, which hop onto the reactor and wait while the transport
is full (TCP back-pressure; SPDY windows are not enforced, exec-protocols.md §1.5).
Tests: tests/vnode/kubelet/test_spdy_wire.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from providers.base import Process
from vnode.kubelet import spdy
from vnode.kubelet.execparams import StreamRequest, has_resize, json_status
from vnode.kubelet.loop import reactor
from vnode.kubelet.remote import RemoteSession
from vnode.kubelet.spdyconn import SpdyConnection
from vnode.kubelet.streamtimers import CREATION_TIMEOUT, IDLE_TIMEOUT

logger = logging.getLogger(__name__)

CLOSE_LINGER = 5.0  # seconds we let the client close first, so the tail of stdout is not reset
MAX_STREAMS = 8  # error, stdin, stdout, stderr, resize, and slack for races


def expected_streams(request: StreamRequest, protocol: str) -> set[str]:
    """The stream types the client will open for this request (exec-protocols.md §2.2)."""
    wanted = {"error"}
    wanted |= {"stdin"} if request.stdin else set()
    wanted |= {"stdout"} if request.stdout else set()
    wanted |= {"stderr"} if request.stderr and not request.tty else set()
    wanted |= {"resize"} if request.tty and has_resize(protocol) else set()
    return wanted


class SpdyExecProtocol(SpdyConnection):
    """One upgraded connection: one exec or attach."""

    log = logger

    def __init__(
        self,
        *,
        protocol: str,
        request: StreamRequest,
        start_process: Callable[[], Process],
        attach: bool,
        name: str,
        creation_timeout: float = CREATION_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
        on_end: Callable[[], None] | None = None,
    ) -> None:
        """`on_end` is called once, when the session's threads are done (or the connection
        went before they started): the process-wide session cap's give-back."""
        super().__init__(max_streams=MAX_STREAMS, creation_timeout=creation_timeout, idle_timeout=idle_timeout)
        self._request = request
        self._expected = expected_streams(request, protocol)
        self._ids: dict[str, int] = {}
        self._types: dict[int, str] = {}
        self._remote = RemoteSession(
            start_process, request, self, json_status=json_status(protocol), attach=attach, name=name, on_end=on_end
        )
        self._started = False
        self._finished = False
        self._timer: Any = None  # CLOSE_LINGER

    def _release(self) -> None:
        self._cancel_timer()
        self._remote.abort()

    def abandon(self) -> None:
        """The hand-over failed before the connection was ours: end the (unstarted) session."""
        self._remote.abort()

    # -- SPDY events --------------------------------------------------------------------------
    def _on_data(self, event: spdy.DataReceived) -> None:
        kind = self._types.get(event.stream_id)
        if kind == "stdin":
            self._remote.stdin(event.data)
            if event.fin:
                self._remote.stdin_eof()
        elif kind == "resize":
            self._remote.resize(event.data)

    def _on_reset(self, event: spdy.StreamReset) -> None:
        if self._types.get(event.stream_id) == "stdin":
            self._remote.stdin_eof()

    def _on_stream(self, event: spdy.StreamOpened) -> None:
        kind = dict(event.headers).get("streamtype", "")
        self._write(self._session.reply(event.stream_id))  # at once: the client waits for it
        if kind not in self._expected or kind in self._ids:
            logger.info("ignoring an unexpected SPDY stream of type %r", kind)
            return
        self._ids[kind] = event.stream_id
        self._types[event.stream_id] = kind
        if event.fin and kind == "stdin":
            self._remote.stdin_eof()
        if set(self._ids) == self._expected and not self._started:
            self._started = True
            self._clocks.setup_complete()
            self._remote.start()

    def _timed_out(self, reason: str) -> None:
        missing = sorted(self._expected - set(self._ids))
        logger.info("SPDY exec: %s%s; closing", reason, f" (missing {missing})" if missing else "")
        self._close()

    # -- Outlet (called from session threads) ---------------------------------------------
    def write(self, stream: str, data: bytes) -> None:
        stream_id = self._ids.get(stream)
        if stream_id is not None:
            self._queue_data(stream_id, data)

    def close_stream(self, stream: str) -> None:
        stream_id = self._ids.get(stream)
        if stream_id is not None and not self._gone.is_set():
            reactor.callFromThread(self._call, self._session.finish, stream_id)

    def finish(self, status: bytes) -> None:
        if not self._gone.is_set():
            reactor.callFromThread(self._finish, status)

    def pause_input(self, paused: bool) -> None:
        if not self._gone.is_set():
            reactor.callFromThread(self._pause_input, paused)

    # -- on the reactor -------------------------------------------------------------------
    def _call(self, method: Callable[..., bytes], *args: Any) -> None:
        if not self._closed:
            self._write(method(*args))

    def _pause_input(self, paused: bool) -> None:
        if self._closed:
            return
        if paused:
            self.transport.pauseProducing()
        else:
            self.transport.resumeProducing()

    def _finish(self, status: bytes) -> None:
        """Status on the error stream, every stream closed, GOAWAY; then the client closes
        (or we do, after CLOSE_LINGER). stdout and stderr are closed before the error stream:
        the client reads the status only after both (exec-protocols.md §2.4)."""
        if self._closed or self._finished:
            return
        self._finished = True
        error_id = self._ids.get("error")
        for kind in ("stdout", "stderr"):
            if kind in self._ids:
                self._write(self._session.finish(self._ids[kind]))
        if error_id is not None:
            if status:
                self._write(self._session.send_data(error_id, status))
            self._write(self._session.finish(error_id))
        for stream_id in sorted(self._types):
            self._write(self._session.finish(stream_id))  # stdin, resize: we send nothing more
        self._write(self._session.goaway())
        self._timer = reactor.callLater(CLOSE_LINGER, self._close)

    def _close(self) -> None:
        self._timer = None
        super()._close()

    def _cancel_timer(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
