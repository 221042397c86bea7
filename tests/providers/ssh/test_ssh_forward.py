"""Port-forward over SSH against a real OpenSSH sshd: a `direct-tcpip` channel reaches a
server on the far end's loopback, half-closes reach it, and a closed port is Unavailable."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from providers.errors import Unavailable
from providers.ssh import open_forward
from tests.support.servers import echo as echoserver
from tests.support.servers.sshd import Sshd


@pytest.fixture
def echo_port() -> Iterator[int]:
    """An echo server on 127.0.0.1 (the sshd's loopback), one connection at a time."""
    server = socket.create_server(("127.0.0.1", 0))
    port = int(server.getsockname()[1])

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=echoserver.serve, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield port
    server.close()


def test_a_direct_tcpip_channel_echoes_and_half_closes(sshd: Sshd, echo_port: int) -> None:
    forward = open_forward(sshd.target(), echo_port)
    try:
        payload = bytes(range(256)) * 4096
        forward.write(payload)
        forward.close_write()
        received = b""
        while data := forward.read():
            received += data
        assert received == payload
    finally:
        forward.close()
    assert forward.read() == b""


def test_a_port_nothing_listens_on_is_unavailable(sshd: Sshd) -> None:
    port = echoserver.free_port()
    with pytest.raises(Unavailable, match=f"dial tcp4 127.0.0.1:{port}"):
        open_forward(sshd.target(), port)
