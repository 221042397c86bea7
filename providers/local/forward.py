"""Port-forward for local instances: a TCP connection to the instance's loopback port.

Called by `LocalProvider.port_forward` on a kubelet worker thread. Local instances are
process groups on this machine, sharing its network, so the Pod's port is 127.0.0.1:port.
Wraps the socket as a `DetachablePortConnection` (the kubelet detaches it and pumps it on its
event loop); never listens, never touches the instance's files.
Tests: tests/providers/local/test_local_forward.py.
"""

from __future__ import annotations

import socket
import threading

from providers.errors import Unavailable

CONNECT_TIMEOUT = 10.0


class SocketConnection:
    """A connected TCP socket as a `DetachablePortConnection`; safe from threads (one reader,
    writers serialised by the kernel's send path, close from anywhere)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._closed = threading.Event()
        self._lock = threading.Lock()

    def read(self, max_bytes: int = 65536) -> bytes:
        if self._closed.is_set():
            return b""
        try:
            return self._sock.recv(max_bytes)
        except OSError:
            return b""

    def write(self, data: bytes) -> None:
        if self._closed.is_set():
            raise BrokenPipeError("the connection is closed")
        self._sock.sendall(data)

    def close_write(self) -> None:
        with self._lock:
            if not self._closed.is_set():
                try:
                    self._sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

    def close(self) -> None:
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
            try:
                self._sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv
            except OSError:
                pass
            self._sock.close()

    def detach(self) -> socket.socket:
        """The TCP socket itself; the caller owns it from now on (this object's `close` leaves
        it alone, its reads return b"" and its writes fail)."""
        with self._lock:
            if self._closed.is_set():
                raise BrokenPipeError("the connection is closed or already detached")
            self._closed.set()
            return self._sock


def connect_loopback(port: int, *, label: str) -> SocketConnection:
    """A connection to 127.0.0.1:`port`; Unavailable in the words of the dial error
    (the upstream kubelet's `dial tcp4 127.0.0.1:8080: connect: connection refused`)."""
    if not 0 < port < 65536:
        raise Unavailable(f"invalid port {port}")
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=CONNECT_TIMEOUT)
    except OSError as exc:
        why = "connection refused" if isinstance(exc, ConnectionRefusedError) else (exc.strerror or str(exc))
        raise Unavailable(f"{label}: dial tcp4 127.0.0.1:{port}: connect: {why}") from exc
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return SocketConnection(sock)
