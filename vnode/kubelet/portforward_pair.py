"""One forwarded connection of a port-forward session: its error and data streams, the
client's input until a pump takes it, and the two-thread pump for a provider connection
that cannot be detached (`portforward_socket` pumps the others on the reactor).

Created by `portforward.SpdyPortForwardProtocol` when the client opens a stream; the
protocol calls the `client_*` methods on the reactor, the threads reach the session only
through the `PairOutlet` it passes in. Never blocks the reactor: every read and write to a
threaded provider connection happens on this pair's two threads.
Tests: tests/vnode/kubelet/test_port_forward.py, tests/vnode/kubelet/test_port_forward_threads.py.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Protocol

from providers.base import PortConnection
from vnode.kubelet.problems import problem_from
from vnode.kubelet.streamcaps import Gauge

logger = logging.getLogger(__name__)

READ_SIZE = 128 * 1024  # one reactor hop per read; sent as 32 KiB DATA frames (kubectl-sized)
Dialer = Callable[[int], PortConnection]  # blocking: one connection to a port, or a provider error
_EOF = b""


class PairOutlet(Protocol):
    """What a pair's threads may ask of the session (every method is safe from threads)."""

    def send(self, stream_id: int, data: bytes) -> bool:
        """Queue DATA to the client, waiting while the transport is full; False once gone."""
        ...

    def end_pair(self, pair: StreamPair, error: str) -> None:
        """The pair is done: `error` (if any) on its error stream, then both streams closed."""
        ...

    def written(self, size: int) -> None:
        """`size` bytes the client sent have reached the provider (input back-pressure)."""
        ...


class InputSink(Protocol):
    """Where a pair pumped on the reactor sends what the client sends (reactor only)."""

    def write(self, data: bytes) -> None: ...

    def finish(self) -> None: ...

    def abort(self) -> None: ...


def error_text(port: int, pod: str, exc: BaseException) -> str:
    """The upstream kubelet's wording, which kubectl prints after `an error occurred forwarding`."""
    return f"error forwarding port {port} to pod {pod}, uid : {problem_from(exc).message}"


def refusal_text(port: int, pod: str, gauge: Gauge) -> str:
    """A connection refused at a process-wide cap, in the same words (the cap and its setting)."""
    return f"error forwarding port {port} to pod {pod}, uid : {gauge.refusal()}"


class StreamPair:
    """The error and data streams of one request id, and what flows through them."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.error_id: int | None = None
        self.data_id: int | None = None
        self.port = 0
        self.started = False  # complete: refused, or its dial asked for
        self.ended = False  # its streams are closed (the pump may still be finishing)
        self.threaded = False  # pumped by two threads (else on the reactor, once dialed)
        self.sink: InputSink | None = None  # the reactor pump, once it runs
        self._inbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()  # None: reset, drop the rest
        self._connection: PortConnection | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._places: list[Gauge] = []  # the process-wide places this pair holds
        self._running = 0  # pump threads still running

    def add(self, stream_type: str, stream_id: int, port: int) -> str:
        """Record one of the pair's streams; "" or why it cannot be added (upstream's words)."""
        if stream_type == "error":
            if self.error_id is not None:
                return "error stream already assigned"
            self.error_id = stream_id
        elif stream_type == "data":
            if self.data_id is not None:
                return "data stream already assigned"
            self.data_id, self.port = stream_id, port
        else:
            return f"unknown stream type {stream_type!r}"
        return ""

    def complete(self) -> bool:
        return self.error_id is not None and self.data_id is not None

    # -- process-wide places (any thread) -----------------------------------------------------
    def hold(self, gauge: Gauge) -> bool:
        """Take a place on `gauge` for as long as this pair's pump lives; False at the cap."""
        if not gauge.take():
            return False
        with self._lock:
            self._places.append(gauge)
        return True

    def give_back(self) -> None:
        """Give back every place held (each exactly once, however often this is called)."""
        with self._lock:
            places, self._places = self._places, []
        for gauge in places:
            gauge.give()

    # -- from the reactor ---------------------------------------------------------------------
    def start_threads(self, connection: PortConnection, outlet: PairOutlet, *, pod: str, name: str) -> None:
        """Read on one thread (the provider's side to the data stream), write on a second
        (what the client sent, to the provider's side); the places go back when both end."""
        self.threaded, self._connection, self._running = True, connection, 2
        threading.Thread(target=self._read_loop, args=(outlet, pod), name=f"{name}-read", daemon=True).start()
        threading.Thread(target=self._write_loop, args=(outlet,), name=f"{name}-write", daemon=True).start()
        if self._closed:
            connection.close()

    def client_data(self, data: bytes) -> None:
        if self.sink is not None:
            self.sink.write(data)
        elif data:
            self._inbox.put(data)

    def client_finished(self) -> None:
        """FIN on the data stream: the provider's side reads EOF once what came before is written."""
        if self.sink is not None:
            self.sink.finish()
        else:
            self._inbox.put(_EOF)

    def client_reset(self) -> None:
        """RST_STREAM on either stream (or the session ended): close the provider's side now."""
        self._inbox.put(None)
        self.close()
        if self.sink is not None:
            self.sink.abort()

    def early_input(self) -> list[bytes | None]:
        """What the client sent before a reactor pump took over (b"": its FIN; None: reset)."""
        taken: list[bytes | None] = []
        while True:
            try:
                taken.append(self._inbox.get_nowait())
            except queue.Empty:
                return taken

    def discard_input(self) -> int:
        """Drop what the client sent that no pump will write; returns how many bytes, so
        the session's input count stays honest."""
        return sum(len(data or b"") for data in self.early_input())

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connection = self._connection
        if connection is not None:
            connection.close()

    # -- on the pair's threads ----------------------------------------------------------------
    def _read_loop(self, outlet: PairOutlet, pod: str) -> None:
        """Copy the provider's side to the data stream until it ends; the pair ends with it
        (as the upstream kubelet closes both streams when the copy returns)."""
        assert self._connection is not None
        error = self._copy_out(self._connection, outlet, pod)
        outlet.end_pair(self, error)
        self._inbox.put(None)  # the writer stops (after what is queued) and closes the connection
        self._thread_done()

    def _copy_out(self, connection: PortConnection, outlet: PairOutlet, pod: str) -> str:
        assert self.data_id is not None
        try:
            while data := connection.read(READ_SIZE):
                if not outlet.send(self.data_id, data):
                    break
        except OSError as exc:
            return error_text(self.port, pod, exc)
        return ""

    def _write_loop(self, outlet: PairOutlet) -> None:
        """Write what the client sent, in order; a FIN half-closes, None ends. Bytes that can
        no longer be written are still counted as taken, so the session's input never stalls."""
        connection, failed = self._connection, False
        assert connection is not None
        while (data := self._inbox.get()) is not None:
            if failed:
                outlet.written(len(data))
                continue
            try:
                if data:
                    connection.write(data)
                else:
                    connection.close_write()
            except OSError:
                failed = True
            finally:
                outlet.written(len(data))
        connection.close()
        self._thread_done()

    def _thread_done(self) -> None:
        with self._lock:
            self._running -= 1
            last = self._running == 0
        if last:
            self.give_back()
