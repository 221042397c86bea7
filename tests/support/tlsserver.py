"""Throwaway raw listeners for tests: a TCP socket on 127.0.0.1 with a free port whose accept
loop runs on a daemon thread and hands each connection to the subclass's `handle`, and the
TLS context a stand-in kubelet serves with. Used by the devcluster kubelet-proxy, port-forward
and metrics-server tests, the SPDY wire tests and the console forwarder tests. It never
speaks a protocol itself: what a connection gets is the subclass's business.

Tests: tests/devcluster/test_kubelet_proxy.py, tests/devcluster/test_portforward_tunnel.py,
tests/devcluster/test_metrics_server_scrape.py, tests/vnode/kubelet/test_spdy_wire.py,
tests/console/test_forward.py
"""

from __future__ import annotations

import socket
import ssl
import threading

from devcluster import tls


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
