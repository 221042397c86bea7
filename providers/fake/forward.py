"""The fake cloud's port-forward: a scripted echo service on the ports the scenario declares.

Called by `FakeProvider.port_forward` (in-process clouds only). A port listed under the
scenario's `ports.echo` answers every byte with itself, in memory, with TCP-like
back-pressure and half-close; any other port is refused in the dial error's words.
Holds no instance state; never opens a socket.
Tests: tests/providers/fake/test_fake_forward.py.
"""

from __future__ import annotations

import threading

from providers import base
from providers.errors import NotFound, Unavailable

BUFFERED = 4 << 20  # bytes echoed and not yet read before a write waits, as a full socket would


class EchoConnection:
    """A `PortConnection` whose far side sends back what it receives; safe from threads."""

    def __init__(self, limit: int = BUFFERED) -> None:
        self._buffer = bytearray()
        self._limit = limit
        self._eof = False  # the client half-closed: the echo ends once drained
        self._closed = False
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
