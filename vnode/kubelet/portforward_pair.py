"""One forwarded connection of a port-forward session: its error and data streams, the
provider's connection, and the two threads that pump between them.

Created by `portforward.SpdyPortForwardProtocol` when the client opens a stream; the
protocol calls the `on_*` methods on the reactor, the threads reach the session only
through the `PairOutlet` it passes in. Never blocks the reactor: the dial, every read and
every write to the provider's connection happen on this pair's two threads.
Tests: tests/vnode/kubelet/test_port_forward.py.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Protocol

from providers.base import PortConnection
from vnode.kubelet.problems import problem_from

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


def error_text(port: int, pod: str, exc: BaseException) -> str:
    """The upstream kubelet's wording, which kubectl prints after `an error occurred forwarding`."""
    return f"error forwarding port {port} to pod {pod}, uid : {problem_from(exc).message}"


class StreamPair:
    """The error and data streams of one request id, and what flows through them."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.error_id: int | None = None
        self.data_id: int | None = None
        self.port = 0
        self.started = False
        self.ended = False
        self._inbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()  # None: reset, drop the rest
        self._connection: PortConnection | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._dialed = threading.Event()

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

    # -- from the reactor ---------------------------------------------------------------------
    def start(self, dial: Dialer, outlet: PairOutlet, *, pod: str, name: str) -> None:
        """Dial and read on one thread (the provider's side to the data stream), write on a
        second (what the client sent, to the provider's side)."""
        self.started = True
        threading.Thread(target=self._read_loop, args=(dial, outlet, pod), name=f"{name}-read", daemon=True).start()
        threading.Thread(target=self._write_loop, args=(outlet,), name=f"{name}-write", daemon=True).start()

    def client_data(self, data: bytes) -> None:
        if data:
            self._inbox.put(data)

    def client_finished(self) -> None:
        """FIN on the data stream: the provider's side reads EOF once what came before is written."""
        self._inbox.put(_EOF)

    def client_reset(self) -> None:
        """RST_STREAM on either stream (or the session ended): close the provider's side now."""
        self._inbox.put(None)
        self.close()

    def discard_input(self) -> int:
        """Drop what the client sent that no thread will write (a pair that never started);
        returns how many bytes, so the session's input count stays honest."""
        dropped = 0
        while True:
            try:
                data = self._inbox.get_nowait()
            except queue.Empty:
                return dropped
            dropped += len(data or b"")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connection = self._connection
        self._dialed.set()
        if connection is not None:
            connection.close()

    # -- on the pair's threads ----------------------------------------------------------------
    def _read_loop(self, dial: Dialer, outlet: PairOutlet, pod: str) -> None:
        """Dial, then copy the provider's side to the data stream until it ends; the pair
        ends with it (as the upstream kubelet closes both streams when the copy returns)."""
        error = ""
        try:
            connection = dial(self.port)
        except Exception as exc:
            if problem_from(exc).code == 500:
                logger.warning("port-forward to %s:%d failed", pod, self.port, exc_info=exc)
            error = error_text(self.port, pod, exc)
        else:
            with self._lock:
                closed, self._connection = self._closed, connection
            self._dialed.set()
            if closed:
                connection.close()
            else:
                error = self._copy_out(connection, outlet, pod)
        self._dialed.set()
        outlet.end_pair(self, error)
        self._inbox.put(None)  # the writer stops (after what is queued) and closes the connection

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
        self._dialed.wait()
        connection, failed = self._connection, False
        while (data := self._inbox.get()) is not None:
            if connection is None or failed:
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
        if connection is not None:
            connection.close()
