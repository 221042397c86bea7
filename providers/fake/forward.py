"""The fake cloud's port-forward: a scripted echo service on the ports the scenario declares.

Called by `FakeProvider.port_forward` (in-process clouds only). A port listed under the
scenario's `ports.echo` answers every byte with itself, with TCP-like back-pressure and
half-close: in memory for the blocking `PortConnection` calls, or over a socket pair once
`detach`ed, whose far ends ONE shared event-loop thread echoes for every connection (never a
thread each). Any other port is refused in the dial error's words. Holds no instance state.
Tests: tests/providers/fake/test_fake_forward.py.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import socket
import threading

from providers import base
from providers.errors import NotFound, Unavailable
from providers.eventloop import LoopThread

BUFFERED = 4 << 20  # bytes echoed and not yet read before a write waits, as a full socket would
_CHUNK = 65536  # what the loop reads at a time; it reads again once the echo has drained

_echo_loop = LoopThread("nebula-fake-echo")
atexit.register(_echo_loop.stop)
_echoing: set[asyncio.Future[None]] = set()  # the detached echoes (the loop holds tasks weakly)


class EchoConnection:
    """A `DetachablePortConnection` whose far side sends back what it receives; safe from threads."""

    def __init__(self, limit: int = BUFFERED) -> None:
        self._buffer = bytearray()
        self._limit = limit
        self._eof = False  # the client half-closed: the echo ends once drained
        self._closed = False
        self._detached = False
        self._changed = threading.Condition()

    def read(self, max_bytes: int = 65536) -> bytes:
        with self._changed:
            self._changed.wait_for(lambda: self._buffer or self._eof or self._closed)
            if self._closed:
                return b""
            data = bytes(self._buffer[:max_bytes])
            del self._buffer[:max_bytes]
            self._changed.notify_all()
            return data

    def write(self, data: bytes) -> None:
        with self._changed:
            self._changed.wait_for(lambda: len(self._buffer) < self._limit or self._closed or self._eof)
            if self._closed or self._eof:
                raise BrokenPipeError("the echo connection is closed for writing")
            self._buffer += data
            self._changed.notify_all()

    def close_write(self) -> None:
        with self._changed:
            self._eof = True
            self._changed.notify_all()

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._buffer.clear()
            self._changed.notify_all()

    def detach(self) -> socket.socket:
        """One end of a socket pair whose other end the shared echo loop answers: what the
        caller sends comes back; after its shutdown(SHUT_WR) the rest comes back, then EOF.
        The loop reads only what it could send back (drain), so a caller that stops reading
        stalls its own writes once the socket buffers are full. This object is closed."""
        with self._changed:
            if self._detached or self._closed or self._eof or self._buffer:
                raise RuntimeError("an echo connection is detached at most once, before any use")
            self._detached = self._closed = True
            self._changed.notify_all()
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        _echo_loop.submit(_echo(ours))
        return theirs


def live_echoes() -> int:
    """How many detached echo connections the shared loop still serves (tests, the soak bench)."""
    return len(_echoing)


async def _echo(ours: socket.socket) -> None:
    task = asyncio.current_task()
    if task is not None:
        _echoing.add(task)
    try:
        await _answer(ours)
    finally:
        if task is not None:
            _echoing.discard(task)


async def _answer(ours: socket.socket) -> None:
    try:
        reader, writer = await asyncio.open_connection(sock=ours, limit=_CHUNK)
    except OSError:
        ours.close()
        return
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        writer.write_eof()
        await writer.drain()
    except OSError:
        pass  # the caller closed: nothing is left to echo to
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def open_port(
    instance: base.Instance | None, port: int, *, echo_ports: tuple[int, ...], instance_id: str
) -> EchoConnection:
    """The connection to `port` of a running instance: NotFound if it is gone or not running,
    Unavailable (connection refused) for a port the scenario does not serve."""
    if instance is None:
        raise NotFound(f"no fake instance {instance_id}")
    if instance.state is not base.InstanceState.RUNNING:
        raise NotFound(f"fake instance {instance_id} is not running ({instance.state.value})")
    if port not in echo_ports:
        raise Unavailable(f"fake instance {instance_id}: dial tcp4 127.0.0.1:{port}: connect: connection refused")
    return EchoConnection()
