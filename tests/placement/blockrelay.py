"""A TCP relay in front of the embedded API server that a test cuts and restores, so a client
behind it finds the API server unreachable (connection refused) and then back, same address;
`HeldRelay` holds each connection until released (a write kept in flight); `relayed` gives a
relay and a client behind it, both closed at the end.

Used by tests/placement/test_blockstore.py and tests/placement/test_blockstore_clear.py; nothing
here is a test.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlparse

import yaml

from devcluster import DevCluster
from kube.client import Kube, load_api_client


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
            if not self._connect(listener, client):
                return

    def _connect(self, listener: socket.socket, client: socket.socket) -> bool:
        """Pipe `client` to the upstream at once; False once `listener` is no longer the live one."""
        try:
            server = socket.create_connection(self._upstream)
        except OSError:
            client.close()
            return True
        with self._lock:
            if self._listener is not listener:
                client.close()
                server.close()
                return False
            self._open += [client, server]
        _pipe_both(client, server)
        return True


class HeldRelay(Relay):
    """A relay that accepts each connection at once but forwards it only once `released` is set
    (`down` releases what it holds)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        super().__init__(upstream)
        self.released = threading.Event()
        self.held = 0  # connections accepted so far

    def down(self) -> None:
        self.released.set()
        super().down()

    def _connect(self, listener: socket.socket, client: socket.socket) -> bool:
        self.held += 1
        threading.Thread(target=self._forward, args=(client,), daemon=True).start()
        return True

    def _forward(self, client: socket.socket) -> None:
        self.released.wait()
        _pipe_both(client, socket.create_connection(self._upstream))


R = TypeVar("R", bound=Relay)


@contextmanager
def relayed(cluster: DevCluster, folder: Path, kind: type[R], *, timeout: float = 5.0) -> Iterator[tuple[R, Kube]]:
    """A relay of `kind` in front of `cluster` (down until `up()`) and a client behind it; the
    relay cut and the client closed at the end."""
    address = urlparse(cluster.url)
    relay = kind((str(address.hostname), int(address.port or 443)))
    client = Kube(load_api_client(relay.kubeconfig(cluster, folder)), timeout=timeout)
    try:
        yield relay, client
    finally:
        relay.down()
        client.close()


def _pipe_both(client: socket.socket, server: socket.socket) -> None:
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
