"""Throwaway raw listeners for tests: a TCP socket on 127.0.0.1 at a free port whose accept
loop runs on a daemon thread and hands each connection to the subclass's `handle`; on it a
stand-in kubelet (TLS, each request head recorded) and the SPDY upgrade that echoes. Used by
the devcluster kubelet-proxy, port-forward and metrics-server tests, the SPDY wire tests and
the console forwarder tests; what a request gets beyond that is each test's own business.

Tests: tests/devcluster/test_kubelet_proxy.py, tests/devcluster/test_portforward_tunnel.py,
tests/devcluster/test_metrics_server_scrape.py, tests/vnode/kubelet/test_spdy_wire.py,
tests/console/test_forward.py
"""

from __future__ import annotations

import socket
import ssl
import threading

from devcluster import tls
from tests.support.servers.tls import read_head


def kubelet_context() -> ssl.SSLContext:
    """A server context with a fresh certificate for 127.0.0.1, as a stand-in kubelet serves."""
    return tls.server_context(tls.make_credentials("127.0.0.1"))


class Listener:
    """Listens on 127.0.0.1 at a free `port`; once `start`ed, accepts until `close` and passes
    each accepted socket to `handle`, on the accepting thread (one connection at a time) or,
    with `per_connection`, on a daemon thread of its own."""

    join_timeout = 10.0

    def __init__(self, *, per_connection: bool = False) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self._per_connection = per_connection

    def start(self) -> None:
        self.thread.start()

    def handle(self, raw: socket.socket) -> None:
        """Serves one accepted connection; the subclass owns (and closes) `raw`."""
        raise NotImplementedError

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            if self._per_connection:
                threading.Thread(target=self.handle, args=(raw,), daemon=True).start()
            else:
                self.handle(raw)

    def close(self) -> None:
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept (close alone does not, on Linux)
        except OSError:
            pass
        self.listener.close()
        if self.thread.is_alive():
            self.thread.join(self.join_timeout)


class StandInKubelet(Listener):
    """A kubelet stand-in over TLS (`kubelet_context`): reads each request's head, records it
    in `heads` (decoded, without its blank line) and lets the subclass's `answer` reply; a
    connection closed before a whole head gets no answer."""

    def __init__(self, *, per_connection: bool = False) -> None:
        super().__init__(per_connection=per_connection)
        self.context = kubelet_context()
        self.heads: list[str] = []

    def handle(self, raw: socket.socket) -> None:
        with self.context.wrap_socket(raw, server_side=True) as conn:
            got = read_head(conn, 4096)
            if got is None:
                return
            head, rest = got
            self.heads.append(head.decode())
            self.answer(conn, head, rest)

    def answer(self, conn: ssl.SSLSocket, head: bytes, rest: bytes) -> None:
        """Replies to one request; `rest` is what the client sent after the head."""
        raise NotImplementedError


def upgrade_and_echo(conn: ssl.SSLSocket, rest: bytes, *, protocol: str | None = None) -> None:
    """Accepts a SPDY upgrade with 101 (naming `protocol` as X-Stream-Protocol-Version, if
    given), then echoes `rest` and every byte after it until the client closes."""
    chosen = f"X-Stream-Protocol-Version: {protocol}\r\n" if protocol else ""
    head = f"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n{chosen}\r\n"
    conn.sendall(head.encode() + rest)
    try:
        while data := conn.recv(65536):
            conn.sendall(data)
    except OSError:
        pass  # the client hung up mid-echo: nothing is left to answer
