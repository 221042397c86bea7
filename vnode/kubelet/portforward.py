"""Port-forward over SPDY/3.1 (`portforward.k8s.io`): a `spdyconn.SpdyConnection` around the session.

Installed on the connection by `upgrade.KubeletRequest` after the 101. Per forwarded
connection the client opens an error and a data stream (headers `streamType`, `port`,
`requestID`), paired by request id. A complete pair takes a process-wide place
(`StreamCaps.forwards`), dials the provider on the shared pool (`portforward_socket.DIALS`)
and is pumped on the reactor (a detachable connection) or by two threads under
`threaded_forwards`; a pair past a cap is refused alone. Errors go as text on the error
stream, then both streams close, as upstream's httpstream.go. Never calls a provider here.
Tests: tests/vnode/kubelet/test_port_forward.py, tests/vnode/kubelet/test_port_forward_threads.py.
"""

from __future__ import annotations

import logging
from typing import Any

from providers.base import DetachablePortConnection, PortConnection
from vnode.kubelet import spdy, spdyframes
from vnode.kubelet.limits import Limits
from vnode.kubelet.loop import reactor
from vnode.kubelet.portforward_pair import Dialer, StreamPair, error_text, refusal_text
from vnode.kubelet.portforward_socket import DIALS, SocketPump, adopt
from vnode.kubelet.problems import Problem, problem_from
from vnode.kubelet.spdyconn import SpdyConnection
from vnode.kubelet.streamcaps import StreamCaps
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
        caps: StreamCaps | None = None,
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
        self._caps = caps or StreamCaps.from_limits(Limits())  # the listener's, shared by every session
        self._pumps: set[SocketPump] = set()  # pairs pumped on the reactor (paused with the transport)

    def _release(self) -> None:
        for timer in self._timers.values():
            if timer.active():
                timer.cancel()
        self._timers.clear()
        for pair in list(self._pairs.values()):
            pair.client_reset()
        for pump in list(self._pumps):
            pump.abort()  # also those whose pair ended and that still flush to the provider
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
            if pair.started:
                pair.client_reset()  # its provider side is closed with its streams
            self._end(pair, problem)
            return
        if pair.complete() and not pair.started:
            self._cancel_timer(request_id)
            self._start(pair)

    def _start(self, pair: StreamPair) -> None:
        """A place among the process's forwarded connections, then the dial on the pool."""
        pair.started = True
        if not pair.hold(self._caps.forwards):
            logger.info("port-forward %s request %s refused: %s", self._name, pair.request_id, "forwards_total")
            self._end(pair, refusal_text(pair.port, self._pod, self._caps.forwards))
            return
        dial, port = self._dial, pair.port

        def job() -> None:
            try:
                connection = dial(port)
            except Exception as exc:
                if problem_from(exc).code == 500:
                    logger.warning("port-forward to %s:%d failed", self._pod, port, exc_info=exc)
                reactor.callFromThread(self._dialed, pair, None, error_text(port, self._pod, exc))
            else:
                reactor.callFromThread(self._dialed, pair, connection, "")

        DIALS.submit(job)

    def _dialed(self, pair: StreamPair, connection: PortConnection | None, error: str) -> None:
        """On the reactor, the dial's outcome: pump it on the reactor if the provider can
        detach it, else on two threads if a threaded place is free; else refuse the pair."""
        if connection is None or self._closed or pair.ended:
            if connection is not None:
                DIALS.submit(connection.close)
            self._end(pair, error)
            pair.give_back()
            return
        if isinstance(connection, DetachablePortConnection):
            try:
                sock = connection.detach()
            except Exception as exc:  # the provider's fault: this pair alone ends
                DIALS.submit(connection.close)
                self._end(pair, error_text(pair.port, self._pod, exc))
                pair.give_back()
                return
            try:
                adopt(sock, SocketPump(pair, self))
            except Exception as exc:  # not a stream socket the reactor can take: the provider's fault
                logger.warning("port-forward to %s:%d: cannot pump the socket", self._pod, pair.port, exc_info=exc)
                self._end(pair, error_text(pair.port, self._pod, exc))
                pair.give_back()
        elif pair.hold(self._caps.threaded_forwards):
            pair.start_threads(connection, self, pod=self._pod, name=f"{self._name}-{pair.port}-{pair.request_id}")
        else:
            DIALS.submit(connection.close)
            self._end(pair, refusal_text(pair.port, self._pod, self._caps.threaded_forwards))
            pair.give_back()

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

    # -- SocketOutlet (from reactor pumps) ----------------------------------------------------
    def forward(self, pair: StreamPair, data: bytes) -> None:
        if not pair.ended and pair.data_id is not None:
            self._write(self._session.send_data(pair.data_id, data))

    def finish_pair(self, pair: StreamPair, broke: str = "") -> None:
        self._end(pair, f"error forwarding port {pair.port} to pod {self._pod}, uid : {broke}" if broke else "")

    def taken(self, size: int) -> None:
        self._taken(size)

    def pump_started(self, pump: SocketPump) -> None:
        self._pumps.add(pump)
        if not self._writable.is_set():
            pump.hold_output(True)

    def pump_gone(self, pump: SocketPump) -> None:
        self._pumps.discard(pump)

    # IPushProducer (the session's transport): a full transport stops reading every reactor pump.
    def pauseProducing(self) -> None:
        super().pauseProducing()
        for pump in self._pumps:
            pump.hold_output(True)

    def resumeProducing(self) -> None:
        super().resumeProducing()
        for pump in list(self._pumps):
            pump.hold_output(False)

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
        without a pump is closed here; a pumped one its pump closes (and gives its places back)."""
        if self._closed or pair.ended:
            return
        pair.ended = True
        self._cancel_timer(pair.request_id)
        if self._pairs.get(pair.request_id) is pair:
            del self._pairs[pair.request_id]
        if not pair.threaded and pair.sink is None:
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
