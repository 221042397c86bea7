"""Port-forward on the kubelet listener over real TLS, driven frame by frame with the test
SPDY client as the API server drives it: pairs by request id, many at once on one session,
half-close both ways, errors as text on the error stream, refusals before the 101, and the
bound on forwarded connections per session (I7). The Pods are local instances running
tests/support/servers/echo.py."""

from __future__ import annotations

import hashlib
import os
import ssl
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import websocket
from twisted.internet.testing import StringTransport

from providers.local import LocalProvider
from tests.support.clients.spdy import SpdyClient, UpgradeRefused
from tests.support.polling import wait_for
from tests.support.rigs.echopod import echo_pod, logs
from tests.support.rigs.noforward import NoForwardProvider
from tests.support.rigs.offline import adopt_new_pod, offline_handler
from tests.support.servers import echo as echoserver
from tests.support.servers.tls import https_get
from vnode.handler import Handler
from vnode.kubelet import loop, portforward, spdy, spdyconn, spdyframes
from vnode.kubelet.limits import Limits
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.server import ListenerConfig, Listeners

TLS = ssl._create_unverified_context()
PROTOCOLS = ("portforward.k8s.io",)


@pytest.fixture(scope="module")
def echo(tmp_path_factory: pytest.TempPathFactory, registry: HandlerRegistry) -> Iterator[tuple[Handler, int]]:
    """A local instance serving an echo on `port`, tracked by a Handler on the listener."""
    folder = tmp_path_factory.mktemp("forward")
    provider = LocalProvider("local", {"state_dir": str(folder), "grace_period": 1})
    with echo_pod(provider, folder, registry) as served:
        yield served


@pytest.fixture(scope="module")
def unforwardable(registry: HandlerRegistry) -> Iterator[str]:
    provider = NoForwardProvider("nofwd", {"cloud": f"pf-{uuid.uuid4().hex}"})
    handler = offline_handler(provider)
    adopt_new_pod(handler, "plain")
    registry.add(handler)
    yield "plain"
    registry.remove(handler)
    for instance in provider.list():
        provider.terminate(instance.id)


def connect(server: Listeners, pod: str = "echo", **kwargs: Any) -> SpdyClient:
    path = f"/portForward/default/{pod}"
    return SpdyClient.connect(("127.0.0.1", server.kubelet_port), path, ssl_context=TLS, **kwargs)


def open_pair(client: SpdyClient, port: int | str, request_id: int) -> tuple[int, int]:
    """As kubectl does: the error stream (half-closed at once), then the data stream."""
    headers = [("port", str(port)), ("requestID", str(request_id))]
    error = client.open("error", headers=headers)
    client.finish(error)
    return error, client.open("data", headers=headers)


def test_a_pair_echoes_and_the_clients_fin_half_closes_the_remote(server: Listeners, echo: tuple[Handler, int]) -> None:
    handler, port = echo
    payload = os.urandom(3 << 20)
    with connect(server, protocols=PROTOCOLS) as client:
        assert client.protocol == "portforward.k8s.io"
        error, data = open_pair(client, port, 0)
        client.send(data, payload, fin=True)
        client.wait_closed([data, error])
        assert hashlib.sha256(client.received(data)).digest() == hashlib.sha256(payload).digest()
        assert client.received(error) == b"" and data in client.fins and error in client.fins
    wait_for(lambda: f"eof after {len(payload)}".encode() in logs(handler), 30, what="the server to see EOF")


def test_twenty_connections_at_once_on_one_session(server: Listeners, echo: tuple[Handler, int]) -> None:
    _, port = echo
    with connect(server, protocols=PROTOCOLS) as client:
        pairs = [open_pair(client, port, n) for n in range(20)]
        for n, (_, data) in enumerate(pairs):
            client.send(data, f"connection {n}\n".encode() * 1000)
        for n, (_, data) in enumerate(pairs):
            expected = f"connection {n}\n".encode() * 1000
            client.wait_for(lambda d=data, e=expected: client.received(d) == e, f"echo on connection {n}")  # type: ignore[misc]
        for _, data in pairs:
            client.finish(data)
        client.wait_closed([stream for pair in pairs for stream in pair])


def test_a_client_reset_closes_the_remote_connection(server: Listeners, echo: tuple[Handler, int]) -> None:
    handler, port = echo
    marker = b"reset-me-" + uuid.uuid4().hex.encode()
    with connect(server, protocols=PROTOCOLS) as client:
        error, data = open_pair(client, port, 7)
        client.send(data, marker)
        client.wait_for(lambda: client.received(data) == marker, "the echo")
        client.reset(data)
        client.reset(error)
        wait_for(lambda: f"eof after {len(marker)}".encode() in logs(handler), 30, what="the server to see EOF")
        client.ping(1)  # the session lives on


def test_errors_are_text_on_the_error_stream(server: Listeners, echo: tuple[Handler, int], unforwardable: str) -> None:
    closed = echoserver.free_port()
    with connect(server, protocols=PROTOCOLS) as client:
        error, data = open_pair(client, closed, 1)
        client.wait_closed([error, data])
        text = client.received(error).decode()
        assert text.startswith(f"error forwarding port {closed} to pod default/echo")
        assert f"dial tcp4 127.0.0.1:{closed}: connect: connection refused" in text
        error, data = open_pair(client, "http", 2)
        client.wait_closed([error])
        assert "invalid port 'http'" in client.received(error).decode()
    with connect(server, unforwardable, protocols=PROTOCOLS) as client:
        error, data = open_pair(client, 80, 0)
        client.wait_closed([error, data])
        assert "port-forward is not supported by provider nofwd" in client.received(error).decode()


def test_refusals_answer_before_the_101(server: Listeners, echo: tuple[Handler, int], unforwardable: str) -> None:
    with pytest.raises(UpgradeRefused) as other:
        connect(server, protocols=("v4.channel.k8s.io",))
    assert other.value.status == 403
    assert ("X-Accepted-Stream-Protocol-Versions", "portforward.k8s.io") in other.value.headers
    with pytest.raises(UpgradeRefused) as missing:
        connect(server, protocols=())
    assert missing.value.status == 400 and b"X-Stream-Protocol-Version is required" in missing.value.body
    with pytest.raises(UpgradeRefused) as absent:
        connect(server, "absent", protocols=PROTOCOLS)
    assert absent.value.status == 404 and b"not on a node served here" in absent.value.body
    status, _, body = https_get(server.kubelet_port, f"/portForward/default/{unforwardable}")
    assert status == 400 and b"port-forward is not supported by provider nofwd" in body
    status, _, body = https_get(server.kubelet_port, "/portForward/default/echo")
    assert status == 400 and b"Upgrade request required" in body
    status, _, body = https_get(server.kubelet_port, "/portForward/default/absent")
    assert status == 404 and b"not on a node served here" in body


def test_I7_forwarded_connections_per_session_are_bounded(server: Listeners, echo: tuple[Handler, int]) -> None:
    _, port = echo
    with connect(server, protocols=PROTOCOLS) as client:
        for n in range(portforward.MAX_PAIRS):
            client.open("error", headers=[("port", str(port)), ("requestID", str(n))], wait=False)
        extra = client.open("error", headers=[("port", str(port)), ("requestID", "extra")])
        assert client.resets.get(extra) == spdyframes.REFUSED_STREAM
        client.ping(1)


def test_I7_a_burst_of_streams_past_the_cap_is_refused_stream_by_stream_and_the_first_connection_works_on(
    server: Listeners, echo: tuple[Handler, int]
) -> None:
    """700 streams opened at once (far past the 256 a session takes, and past the 256 refusals
    the session queues before it writes them): each one over the cap is refused alone with
    REFUSED_STREAM, and the connection forwarded before them still echoes."""
    _, port = echo
    with connect(server, protocols=PROTOCOLS) as client:
        error, data = open_pair(client, port, 0)
        client.send(data, b"first\n")
        client.wait_for(lambda: client.received(data) == b"first\n", "the first echo")
        burst = [
            client.open("data", headers=[("port", str(port)), ("requestID", str(n))], wait=False) for n in range(1, 701)
        ]
        client.ping(7)
        client.send(data, b"again\n")
        client.wait_for(lambda: client.received(data) == b"first\nagain\n", "the echo after the burst")
        client.wait_for(
            lambda: len([s for s in burst if s in client.resets]) >= 700 - 2 * portforward.MAX_PAIRS, "refusals"
        )
        assert {client.resets[s] for s in burst if s in client.resets} == {spdyframes.REFUSED_STREAM}
        assert client.goaway is None


def test_I7_refusals_wait_in_a_full_transport_up_to_a_bound_and_past_it_the_session_ends() -> None:
    """On the protocol itself, its transport full (`pauseProducing`: a busy client, e.g. one
    receiving a download, or one that reads nothing): 2,000 refused streams still leave the
    session alive; past spdyconn.UNREAD_REFUSALS more while it stays full, it ends with GOAWAY;
    once the transport drains (`resumeProducing`) the count starts again."""
    loop.ensure_running()
    client = spdy.ClientSession()

    def syn_streams(count: int) -> bytes:
        return b"".join(
            client.open([("streamtype", "data"), ("port", "80"), ("requestID", str(n))])[1] for n in range(count)
        )

    def run() -> tuple[bool, bool, bool]:
        protocol = portforward.SpdyPortForwardProtocol(dial=lambda port: None, pod="default/p", name="p")  # type: ignore[arg-type,return-value]
        transport = StringTransport()
        protocol.makeConnection(transport)
        try:
            protocol.pauseProducing()
            protocol.dataReceived(syn_streams(2 * portforward.MAX_PAIRS + 2000))
            alive_while_full = not protocol._closed
            protocol.resumeProducing()
            protocol.pauseProducing()
            protocol.dataReceived(syn_streams(2000))
            alive_after_drain = not protocol._closed
            protocol.dataReceived(syn_streams(spdyconn.UNREAD_REFUSALS))
            return alive_while_full, alive_after_drain, protocol._closed
        finally:
            protocol.connectionLost()

    alive_while_full, alive_after_drain, ended = loop.on_reactor(run)
    assert alive_while_full and alive_after_drain and ended


def test_old_clients_without_request_ids_are_paired_by_stream_id() -> None:
    assert portforward.stream_fields((("streamtype", "error"), ("port", "80")), 5) == ("error", "80", "5")
    assert portforward.stream_fields((("streamtype", "data"), ("port", "80")), 7) == ("data", "80", "5")
    assert portforward.parse_port("65535") == 65535
    assert [portforward.parse_port(t) for t in ("0", "65536", "-1", "", "８０", "000080")] == [None] * 6


def test_the_kubelets_own_websocket_port_forward_is_refused_before_the_handshake(
    server: Listeners, echo: tuple[Handler, int]
) -> None:
    """Not implemented (docs/kubelet-api.md says so): kubectl tunnels SPDY through the API
    server instead, so only a direct websocket client would ask, and it gets a 403."""
    _, port = echo
    url = f"wss://127.0.0.1:{server.kubelet_port}/portForward/default/echo?port={port}"
    conn = websocket.WebSocket(sslopt={"cert_reqs": ssl.CERT_NONE})
    try:
        with pytest.raises(websocket.WebSocketBadStatusException) as refused:
            conn.connect(url, subprotocols=["v4.channel.k8s.io", "portforward.k8s.io"], timeout=30)  # type: ignore[no-untyped-call]
    finally:
        conn.close()
    assert refused.value.status_code == 403


def test_a_dropped_session_closes_every_remote_connection(server: Listeners, echo: tuple[Handler, int]) -> None:
    handler, port = echo
    markers = [b"dropped-" + uuid.uuid4().hex.encode() + b"-%d" % n for n in range(3)]
    client = connect(server, protocols=PROTOCOLS)
    for n, marker in enumerate(markers):
        _, data = open_pair(client, port, n)
        client.send(data, marker)
        client.wait_for(lambda d=data, m=marker: client.received(d) == m, "the echo")  # type: ignore[misc]
    client.close()  # no FIN, no RST_STREAM: the TCP connection just goes
    for marker in markers:
        wait_for(lambda m=marker: f"eof after {len(m)}".encode() in logs(handler), 30, what="every remote's EOF")  # type: ignore[misc]


@pytest.fixture(scope="module")
def quick(registry: HandlerRegistry) -> Iterator[Listeners]:
    """A kubelet listener whose stream-creation timeout is half a second."""
    running = Listeners(
        registry,
        kubelet=ListenerConfig("127.0.0.1", 0),
        node_ip="127.0.0.1",
        bounds=Limits(stream_creation_timeout=0.5),
    )
    running.start()
    yield running
    running.stop()


def test_a_pair_missing_its_data_stream_times_out_on_its_error_stream(
    quick: Listeners, echo: tuple[Handler, int]
) -> None:
    _, port = echo
    with connect(quick, protocols=PROTOCOLS) as client:
        error = client.open("error", headers=[("port", str(port)), ("requestID", "lonely")])
        client.finish(error)
        client.wait_closed([error], 30)
        assert client.received(error) == b"timed out waiting for streams"
        client.ping(1)
