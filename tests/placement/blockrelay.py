"""A TCP relay in front of the embedded API server that a test cuts and restores, so a client
behind it finds the API server unreachable (connection refused) and then back, same address.

Used by tests/placement/test_blockstore.py; nothing here is a test.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import yaml

from devcluster import DevCluster


class Relay:
    """Listens on a fixed loopback port and pipes every connection to `upstream`."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = int(probe.getsockname()[1])
        probe.close()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        """Refuse new connections and cut the open ones."""
        with self._lock:
            listener, self._listener = self._listener, None
            opened, self._open = self._open, []
        for sock in ([listener] if listener is not None else []) + opened:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def kubeconfig(self, cluster: DevCluster, folder: Path) -> str:
        """`cluster`'s kubeconfig with its server behind this relay."""
        assert cluster.kubeconfig_path is not None
        config = yaml.safe_load(Path(cluster.kubeconfig_path).read_text())
        for entry in config["clusters"]:
            entry["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        path = folder / f"relay-{self.port}.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        return str(path)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self._upstream)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    server.close()
                    return
                self._open += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=pipe, args=(source, sink), daemon=True).start()


def pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy `source` to `sink` until either ends, then close both (one direction of a relay)."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
