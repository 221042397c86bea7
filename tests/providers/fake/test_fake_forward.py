"""The fake provider's port-forward: the scenario's echo ports answer byte for byte with
half-close and back-pressure, in memory or detached (a socket pair one shared loop thread
echoes, no thread per connection); other ports, stopped instances and HTTP clouds refuse."""

from __future__ import annotations

import socket
import threading
import uuid

import pytest

from providers import errors
from providers.base import ClaimName, PortConnection, PortForwarder, ProvisionRequest
from providers.fake import FakeProvider
from providers.fake.forward import EchoConnection, live_echoes
from providers.streams import DetachablePortConnection
from tests.support.factories import make_pod_spec
from tests.support.polling import wait_for
from tests.support.stalling import BOUND, pattern, read_to_eof, send_until_stalled


def test_an_echo_port_answers_every_byte_and_ends_after_a_half_close() -> None:
    provider = FakeProvider("fake", {"cloud": f"fwd-{uuid.uuid4().hex}", "scenario": {"ports": {"echo": [8080]}}})
    assert isinstance(provider, PortForwarder)
    result = provider.provision(make_pod_spec(), ProvisionRequest(ClaimName("ns-p-fwdfwdfwd")))
    connection = provider.port_forward(result.instance_id, 8080)
    payload = bytes(range(256)) * 40000  # 10 MB: more than the echo buffers, so writes wait for reads
    received = bytearray()
    reader = threading.Thread(target=lambda: received.extend(iter_read(connection)), daemon=True)
    reader.start()
    for start in range(0, len(payload), 65536):
        connection.write(payload[start : start + 65536])
    connection.close_write()
    reader.join(30)
    assert bytes(received) == payload
    with pytest.raises(OSError):
        connection.write(b"late")
    with pytest.raises(errors.Unavailable, match="127.0.0.1:9090: connect: connection refused"):
        provider.port_forward(result.instance_id, 9090)
    provider.terminate(result.instance_id)
    with pytest.raises(errors.NotFound):
        provider.port_forward(result.instance_id, 8080)


def iter_read(connection: PortConnection) -> bytes:
    out = bytearray()
    while data := connection.read():
        out += data
    return bytes(out)


def test_close_wakes_a_blocked_reader() -> None:
    connection = EchoConnection()
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(connection.read()), daemon=True)
    reader.start()
    connection.close()
    reader.join(10)
    assert got == [b""]


def test_a_bad_ports_entry_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="ports.echo"):
        FakeProvider("fake", {"cloud": f"fwd-{uuid.uuid4().hex}", "scenario": {"ports": {"echo": ["http"]}}})


# The detached echo (`DetachablePortConnection`): a socket pair whose far ends one shared
# event-loop thread answers.


def detached(port: int = 8080) -> tuple[FakeProvider, socket.socket]:
    provider = FakeProvider("fake", {"cloud": f"fwd-{uuid.uuid4().hex}", "scenario": {"ports": {"echo": [8080]}}})
    result = provider.provision(make_pod_spec(), ProvisionRequest(ClaimName("ns-p-fwdfwdfwd")))
    connection = provider.port_forward(result.instance_id, port)
    assert isinstance(connection, DetachablePortConnection)
    return provider, connection.detach()


def test_a_detached_echo_answers_every_byte_and_ends_after_a_half_close() -> None:
    _, sock = detached()
    with sock:
        sock.settimeout(60)
        payload = bytes(range(256)) * 40000  # 10 MB: more than the socket buffers, so sends wait for reads
        received: list[bytes] = []
        reader = threading.Thread(target=lambda: received.append(read_to_eof(sock)), daemon=True)
        reader.start()
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)  # the rest comes back, then EOF
        reader.join(60)
        assert received == [payload]


def test_closing_a_detached_echo_frees_its_far_side() -> None:
    wait_for(lambda: live_echoes() == 0, timeout=60, what="earlier tests' echoes ended")
    _, sock = detached()
    sock.sendall(b"unread" * 1000)
    wait_for(lambda: live_echoes() == 1, timeout=60, what="the echo serves the connection")
    sock.close()  # with echoed bytes unread
    wait_for(lambda: live_echoes() == 0, timeout=60, what="the far side closed")


def test_a_stalled_reader_stalls_the_detached_writer() -> None:
    """Invariant: the echo reads on only once it has sent back what it read; a caller that
    never reads is refused more bytes once the socket buffers are full."""
    _, sock = detached()
    with sock:
        sent = send_until_stalled(sock)
        assert 0 < sent < BOUND
        sock.setblocking(True)
        sock.shutdown(socket.SHUT_WR)
        assert read_to_eof(sock) == pattern(sent)


def test_an_echo_connection_detaches_once_before_any_use() -> None:
    used = EchoConnection()
    used.write(b"x")
    with pytest.raises(RuntimeError, match="before any use"):
        used.detach()
    assert used.read() == b"x"  # the refused detach changed nothing
    fresh = EchoConnection()
    with fresh.detach():
        with pytest.raises(RuntimeError, match="at most once"):
            fresh.detach()
        assert fresh.read() == b""  # the object itself is closed once detached
        with pytest.raises(OSError):
            fresh.write(b"late")


def test_I7_detached_echoes_no_thread_per_connection() -> None:
    """Invariant: 200 detached echo connections, all open and echoing at once, add no thread each."""
    first = EchoConnection().detach()  # the shared echo loop is running from here on
    baseline = threading.active_count()
    socks = [first] + [EchoConnection().detach() for _ in range(199)]
    try:
        for number, sock in enumerate(socks):
            sock.sendall(b"%d\n" % number)
        for number, sock in enumerate(socks):
            sock.settimeout(60)
            line = b""
            while not line.endswith(b"\n") and (data := sock.recv(64)):
                line += data
            assert line == b"%d\n" % number
        assert threading.active_count() <= baseline + 2
    finally:
        for sock in socks:
            sock.close()
