"""Port-forward over SPDY/3.1 (`portforward.k8s.io`): a `spdyconn.SpdyConnection` around the session.

Installed on the connection by `upgrade.KubeletRequest` after the 101. Per forwarded
connection the client opens an error and a data stream with headers `streamType`, `port`
and `requestID`; the two are paired by request id, and a complete pair dials the provider
and pumps on its own threads (`portforward_pair`). Errors go as text on the pair's error
stream, then both streams are closed, as the upstream kubelet does (its
pkg/kubelet/cri/streaming/portforward/httpstream.go). Runs on the reactor and never
calls a provider there.
Tests: tests/vnode/kubelet/test_port_forward.py.
"""

from __future__ import annotations

import logging
from typing import Any

from vnode.kubelet import spdy, spdyframes
from vnode.kubelet.loop import reactor
from vnode.kubelet.portforward_pair import Dialer, StreamPair
from vnode.kubelet.problems import Problem
from vnode.kubelet.spdyconn import SpdyConnection
from vnode.kubelet.streamtimers import IDLE_TIMEOUT

logger = logging.getLogger(__name__)

PROTOCOL = "portforward.k8s.io"
CREATION_TIMEOUT = 30.0  # seconds: the first pair's set-up, and each pair's second stream (the kubelet's)
MAX_PAIRS = 128  # I7: forwarded connections open at once on one session; more are refused
INPUT_HIGH = 4 << 20  # client bytes queued for providers: above this, stop reading the client
INPUT_LOW = 1 << 20


def negotiate(offered: list[str]) -> str:
    """The SPDY subprotocol for a port-forward upgrade: 400 if the client names none, 403
    (answered with the one we accept) if it offers only others, as httpstream.Handshake."""
    if not offered:
        raise Problem(400, "unable to upgrade: X-Stream-Protocol-Version is required")
    if PROTOCOL not in [v.strip() for value in offered for v in value.split(",")]:
        raise Problem(
            403,
            f"unable to upgrade: unable to negotiate protocol: client supports {offered}, server supports [{PROTOCOL}]",
        )
    return PROTOCOL


def stream_fields(headers: tuple[tuple[str, str], ...], stream_id: int) -> tuple[str, str, str]:
    """(stream type, port text, request id) of a new stream. A client too old to send a
    request id gets one from the stream ids, as the upstream kubelet does: a pair opens
    its error stream then its data stream, two odd ids apart."""
    fields = dict(headers)
    kind, port = fields.get("streamtype", ""), fields.get("port", "")
    request_id = fields.get("requestid", "")
    if not request_id:
        request_id = str(stream_id - 2 if kind == "data" else stream_id)
    return kind, port, request_id


def parse_port(text: str) -> int | None:
    """A TCP port in 1..65535 (decimal digits only), else None."""
    if not (text.isascii() and text.isdigit()) or len(text) > 5 or not 0 < int(text) < 65536:
        return None
    return int(text)


class SpdyPortForwardProtocol(SpdyConnection):
    """One upgraded connection: any number of forwarded connections to one Pod. Output
    chunks in flight (`spdyconn.IN_FLIGHT`) are each up to `portforward_pair.READ_SIZE`."""

    log = logger
    log_label = "SPDY port-forward"

    def __init__(
        self,
        *,
        dial: Dialer,
        pod: str,
        name: str,
        creation_timeout: float = CREATION_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> None:
        # I7: the session closes if no pair is set up in time, or after idle_timeout without traffic.
        super().__init__(max_streams=2 * MAX_PAIRS, creation_timeout=creation_timeout, idle_timeout=idle_timeout)
        self._dial = dial
        self._pod = pod
        self._name = name
        self._pairs: dict[str, StreamPair] = {}
        self._by_stream: dict[int, StreamPair] = {}
        self._timers: dict[str, Any] = {}
        self._queued = 0  # client bytes handed to pairs and not yet written (reactor only)
        self._paused = False
        self._creation_timeout = creation_timeout

    def _release(self) -> None:
        for timer in self._timers.values():
            if timer.active():
                timer.cancel()
        self._timers.clear()
        for pair in list(self._pairs.values()):
            pair.client_reset()
        self._pairs.clear()
        self._by_stream.clear()

    # -- SPDY events (on the reactor) ---------------------------------------------------------
    def _on_data(self, event: spdy.DataReceived) -> None:
        pair = self._by_stream.get(event.stream_id)
        if pair is None or pair.ended or event.stream_id != pair.data_id:
            return  # the error stream carries nothing from the client
        if event.data:
            self._queued += len(event.data)
            pair.client_data(event.data)
            self._pause_input_if_full()
        if event.fin:
            pair.client_finished()

    def _on_reset(self, event: spdy.StreamReset) -> None:
        pair = self._by_stream.get(event.stream_id)
        if pair is not None:
            pair.client_reset()
            self._end(pair, "")

    def _on_stream(self, event: spdy.StreamOpened) -> None:
        # Set up once a whole stream frame has come (a truncated one held open never is); from
        # then on each pair has its own creation timeout and only idleness ends the session,
        # as the kubelet's port-forward (its httpstream.go) keeps a connection whose pair timed out.
        self._clocks.setup_complete()
        self._write(self._session.reply(event.stream_id))  # at once: the client waits for it
        kind, port_text, request_id = stream_fields(event.headers, event.stream_id)
        pair = self._pairs.get(request_id)
        if pair is None:
            if len(self._pairs) >= MAX_PAIRS:
                self._write(self._session.reset(event.stream_id, spdyframes.REFUSED_STREAM))
                return
            pair = self._pairs[request_id] = StreamPair(request_id)
            self._timers[request_id] = reactor.callLater(self._creation_timeout, self._pair_timed_out, pair)
        port = parse_port(port_text)
        problem = pair.add(kind, event.stream_id, port or 0)
        if not problem and kind in ("error", "data"):
            self._by_stream[event.stream_id] = pair
        if not problem and kind == "data" and port is None:
            problem = f"invalid port {port_text!r}: must be a number between 1 and 65535"
        if problem:
            logger.info("port-forward %s request %s: %s", self._name, request_id, problem)
            if kind not in ("error", "data") or pair.error_id != event.stream_id:
                self._write(self._session.reset(event.stream_id))
            self._end(pair, problem)
            return
        if pair.complete() and not pair.started:
            self._cancel_timer(request_id)
            pair.start(self._dial, self, pod=self._pod, name=f"{self._name}-{pair.port}-{request_id}")

    def _timed_out(self, reason: str) -> None:
        logger.info("SPDY port-forward %s: %s; closing", self._name, reason)
        self._close()

    def _pair_timed_out(self, pair: StreamPair) -> None:
        self._timers.pop(pair.request_id, None)
        if not pair.started:
            self._end(pair, "timed out waiting for streams")

    # -- PairOutlet (from pair threads) -------------------------------------------------------
    def send(self, stream_id: int, data: bytes) -> bool:
        return self._queue_data(stream_id, data)

    def end_pair(self, pair: StreamPair, error: str) -> None:
        if not self._gone.is_set():
            reactor.callFromThread(self._end, pair, error)

    def written(self, size: int) -> None:
        if size and not self._gone.is_set():
            reactor.callFromThread(self._taken, size)

    # -- on the reactor -------------------------------------------------------------------
    def _taken(self, size: int) -> None:
        self._queued -= size
        if self._paused and self._queued <= INPUT_LOW and not self._closed:
            self._paused = False
            self.transport.resumeProducing()

    def _pause_input_if_full(self) -> None:
        if not self._paused and self._queued > INPUT_HIGH:
            self._paused = True
            self.transport.pauseProducing()

    def _end(self, pair: StreamPair, error: str) -> None:
        """The error (if any) on the error stream, then FIN on both; forget the pair. A pair
        that never started is closed here; a started one its threads close."""
        if self._closed or pair.ended:
            return
        pair.ended = True
        self._cancel_timer(pair.request_id)
        if self._pairs.get(pair.request_id) is pair:
            del self._pairs[pair.request_id]
        if not pair.started:
            pair.close()
            self._taken(pair.discard_input())
        for stream_id in (pair.data_id, pair.error_id):
            if stream_id is None:
                continue
            self._by_stream.pop(stream_id, None)
            if stream_id == pair.error_id and error:
                self._write(self._session.send_data(stream_id, error.encode()))
            self._write(self._session.finish(stream_id))

    def _cancel_timer(self, request_id: str) -> None:
        timer = self._timers.pop(request_id, None)
        if timer is not None and timer.active():
            timer.cancel()
