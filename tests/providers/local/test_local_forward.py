"""The local provider's port-forward: a real TCP connection to the instance's loopback port,
with half-close, and the dial error's words when nothing listens."""

from __future__ import annotations

import socket
import sys

import pytest

from providers.base import (
    ClaimName,
    DetachablePortConnection,
    InstanceId,
    InstanceState,
    PodSpec,
    PortForwarder,
    ProvisionRequest,
)
from providers.errors import NotFound, Unavailable
from providers.local import LocalProvider
from tests.support.polling import wait_for
from tests.support.servers import echo as echoserver

SERVER = echoserver.__file__


def start_echo(provider: LocalProvider, port: int) -> InstanceId:
    pod = PodSpec("ns", "echo", "uid", "main", "python", command=(sys.executable, SERVER, str(port)))
    instance_id = provider.provision(pod, ProvisionRequest(ClaimName("ns-echo-abcdefghij"))).instance_id
    wait_for(lambda: provider.get(instance_id).state is InstanceState.RUNNING)  # type: ignore[union-attr]
    return instance_id


def test_port_forward_echoes_and_a_half_close_reaches_the_server(provider: LocalProvider) -> None:
    assert isinstance(provider, PortForwarder)
    port = echoserver.free_port()
    instance_id = start_echo(provider, port)
    connection = wait_for(lambda: provider.port_forward(instance_id, port), 30, ignoring=(Unavailable,))
    try:
        connection.write(b"ping\n")
        connection.close_write()
        received = b""
        while data := connection.read():
            received += data
        assert received == b"ping\n"  # the server saw EOF, answered everything, and closed
    finally:
        connection.close()
    assert connection.read() == b""


def test_nothing_listening_is_unavailable_in_the_dial_errors_words(provider: LocalProvider) -> None:
    port = echoserver.free_port()
    pod = PodSpec("ns", "quiet", "uid", "main", "busybox", args=("exec sleep 300",))
    instance_id = provider.provision(pod, ProvisionRequest(ClaimName("ns-quiet-abcdefghij"))).instance_id
    wait_for(lambda: provider.get(instance_id).state is InstanceState.RUNNING)  # type: ignore[union-attr]
    with pytest.raises(Unavailable, match=f"dial tcp4 127.0.0.1:{port}: connect: connection refused"):
        provider.port_forward(instance_id, port)
    with pytest.raises(NotFound):
        provider.port_forward(InstanceId("local-nothing-here"), port)


def test_a_detached_connection_hands_over_its_socket_and_lets_go_of_it(provider: LocalProvider) -> None:
    port = echoserver.free_port()
    instance_id = start_echo(provider, port)
    connection = wait_for(lambda: provider.port_forward(instance_id, port), 30, ignoring=(Unavailable,))
    assert isinstance(connection, DetachablePortConnection)
    sock = connection.detach()
    try:
        connection.close()  # no longer its socket: the caller's stays open
        assert connection.read() == b""
        with pytest.raises(OSError):
            connection.write(b"x")
        with pytest.raises(OSError, match="already detached"):
            connection.detach()
        sock.sendall(b"ping\n")
        sock.shutdown(socket.SHUT_WR)
        received = b""
        while data := sock.recv(65536):
            received += data
        assert received == b"ping\n"
    finally:
        sock.close()
