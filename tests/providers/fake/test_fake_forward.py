"""The fake provider's port-forward: the scenario's echo ports answer byte for byte with
half-close and back-pressure; other ports, stopped instances and HTTP clouds refuse."""

from __future__ import annotations

import threading
import uuid

import pytest

from providers import errors
from providers.base import ClaimName, PortConnection, PortForwarder, ProvisionRequest
from providers.fake import FakeProvider
from providers.fake.forward import EchoConnection
from tests.support.factories import make_pod_spec


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
