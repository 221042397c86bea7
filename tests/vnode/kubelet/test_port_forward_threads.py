"""Port-forward's threads and process-wide caps (I7), over real TLS with the test SPDY client:
8 sessions x 128 forwarded connections pumped on the reactor with no thread per connection,
`forwards_total` refusing a connection alone (kubelet words on its error stream), the
two-thread pump of a provider that cannot detach under `forwards_threaded`, and every place
given back. The Pod is a local instance running tests/support/servers/echo.py."""

from __future__ import annotations

import socket
import ssl
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from twisted.internet.testing import StringTransport

from providers.base import InstanceId, PortConnection
from providers.local import LocalProvider
from tests.support.clients.spdy import SpdyClient
from tests.support.polling import wait_for
from tests.support.rigs.echopod import echo_pod, logs
from tests.support.servers import echo as echoserver
from vnode.handler import Handler
from vnode.kubelet import loop, portforward, portforward_socket, spdy
from vnode.kubelet.limits import Limits
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.server import ListenerConfig, Listeners
from vnode.kubelet.streamcaps import StreamCaps

TLS = ssl._create_unverified_context()
PROTOCOLS = ("portforward.k8s.io",)
SESSIONS = 8
SLACK = portforward_socket.DIAL_THREADS + 8  # the dial pool at its most, and the test process's own comings and goings


class Undetachable:
    """A provider connection without `detach`: the kubelet must pump it with threads."""

    def __init__(self, inner: PortConnection) -> None:
        self._inner = inner

    def read(self, max_bytes: int = 65536) -> bytes:
        return self._inner.read(max_bytes)

    def write(self, data: bytes) -> None:
        self._inner.write(data)

    def close_write(self) -> None:
        self._inner.close_write()

    def close(self) -> None:
        self._inner.close()


class SwitchableProvider(LocalProvider):
    """The local provider, whose connections are detachable unless `detachable` is off."""

    detachable = True

    def port_forward(self, instance_id: InstanceId, port: int) -> PortConnection:
        connection = super().port_forward(instance_id, port)
        return connection if self.detachable else Undetachable(connection)


def connect(server: Listeners, **kwargs: Any) -> SpdyClient:
    return SpdyClient.connect(
        ("127.0.0.1", server.kubelet_port), "/portForward/default/echo", ssl_context=TLS, **kwargs
    )


def open_pair(client: SpdyClient, port: int, request_id: int, *, wait: bool = True) -> tuple[int, int]:
    """As kubectl does: the error stream (half-closed at once), then the data stream; each
    waiting for its reply, unless `wait` is off (many pairs opened at once, `open_pairs`)."""
    headers = [("port", str(port)), ("requestID", str(request_id))]
    error = client.open("error", headers=headers, wait=wait)
    client.finish(error)
    return error, client.open("data", headers=headers, wait=wait)


def open_pairs(client: SpdyClient, port: int, count: int) -> list[tuple[int, int]]:
    """`count` pairs opened back to back, as a browser's burst of connections, then every reply."""
    pairs = [open_pair(client, port, n, wait=False) for n in range(count)]
    streams = [stream for pair in pairs for stream in pair]
    client.wait_for(lambda: all(s in client.replied or s in client.resets for s in streams), "every reply")
    return pairs


def echo_all(client: SpdyClient, pairs: list[tuple[int, int]], say: Callable[[int], bytes]) -> None:
    """`say(n)` sent on every pair's data stream at once, then each one's echo awaited."""
    before = {data: len(client.received(data)) for _, data in pairs}
    for n, (_, data) in enumerate(pairs):
        client.send(data, say(n))
    for n, (_, data) in enumerate(pairs):
        expected = say(n)
        client.wait_for(lambda d=data, e=expected: client.received(d)[before[d] :] == e, f"the echo on {n}")  # type: ignore[misc]


@pytest.fixture(scope="module")
def echo(tmp_path_factory: pytest.TempPathFactory, registry: HandlerRegistry) -> Iterator[tuple[Handler, int]]:
    folder = tmp_path_factory.mktemp("forward-threads")
    provider = SwitchableProvider("local", {"state_dir": str(folder), "grace_period": 1})
    with echo_pod(provider, folder, registry) as served:
        yield served


@pytest.fixture(scope="module")
def capped(registry: HandlerRegistry) -> Iterator[Listeners]:
    """A kubelet listener allowing 4 forwarded connections in the process, 2 of them threaded."""
    running = Listeners(
        registry,
        kubelet=ListenerConfig("127.0.0.1", 0),
        node_ip="127.0.0.1",
        bounds=Limits(forwards_total=4, forwards_threaded=2),
    )
    running.start()
    yield running
    running.stop()


def echoes(client: SpdyClient, data: int, payload: bytes) -> None:
    before = len(client.received(data))
    client.send(data, payload)
    client.wait_for(lambda: client.received(data)[before:] == payload, f"the echo on stream {data}")


def close_all(client: SpdyClient, pairs: list[tuple[int, int]]) -> None:
    for _, data in pairs:
        client.finish(data)
    client.wait_closed([stream for pair in pairs for stream in pair], 120)


def test_I7_eight_sessions_of_128_forwarded_connections_use_no_thread_per_connection(
    server: Listeners, echo: tuple[Handler, int]
) -> None:
    _, port = echo
    with connect(server, protocols=PROTOCOLS) as warm:  # the listener's own pools start with its first session
        pair = open_pair(warm, port, 0)
        echoes(warm, pair[1], b"warm\n")
        close_all(warm, [pair])
    wait_for(lambda: server.streams.forwards.open == 0, 60, what="the first place given back")
    portforward_socket.DIALS.stop()  # its threads count from the next dial on
    baseline = threading.active_count()
    names = {thread.name for thread in threading.enumerate()}
    peak = baseline
    clients: list[SpdyClient] = []
    try:
        sessions: list[list[tuple[int, int]]] = []
        for s in range(SESSIONS):  # each session connects when it starts (an idle one times out in 30 s)
            client = connect(server, protocols=PROTOCOLS, timeout=120)
            clients.append(client)
            pairs = open_pairs(client, port, portforward.MAX_PAIRS)
            sessions.append(pairs)
            echo_all(client, pairs, lambda n, s=s: f"session {s} connection {n}\n".encode())  # type: ignore[misc]
            peak = max(peak, threading.active_count())
        assert server.streams.forwards.open == SESSIONS * portforward.MAX_PAIRS
        assert server.streams.threaded_forwards.open == 0
        for s, (client, pairs) in enumerate(zip(clients, sessions, strict=True)):
            echo_all(client, pairs, lambda n, s=s: f"again {s}/{n}\n".encode())  # type: ignore[misc]
        peak = max(peak, threading.active_count())
        assert peak <= baseline + SLACK, f"{peak} threads with 1,024 connections open, {baseline} before"
        for client, pairs in zip(clients, sessions, strict=True):
            close_all(client, pairs)
    finally:
        for client in clients:
            client.close()
    wait_for(lambda: server.streams.forwards.open == 0, 60, what="every place given back")
    portforward_socket.DIALS.stop()
    try:
        wait_for(lambda: threading.active_count() <= baseline, 60, what="the thread count back to its baseline")
    except AssertionError:
        left = sorted(thread.name for thread in threading.enumerate() if thread.name not in names)
        raise AssertionError(f"threads left after every session closed: {left}") from None


def test_I7_past_forwards_total_a_connection_is_refused_alone_and_a_place_freed_is_taken_again(
    capped: Listeners, echo: tuple[Handler, int]
) -> None:
    _, port = echo
    with connect(capped, protocols=PROTOCOLS) as first, connect(capped, protocols=PROTOCOLS) as second:
        pairs = [open_pair(first, port, n) for n in range(3)] + [open_pair(second, port, 0)]
        for n, (_, data) in enumerate(pairs):
            echoes(first if n < 3 else second, data, b"in %d\n" % n)
        error, data = open_pair(second, port, 1)
        second.wait_closed([error, data])
        text = second.received(error).decode()
        assert text.startswith(f"error forwarding port {port} to pod default/echo")
        assert "4 forwarded connections open" in text and "LISTENER_LIMITS['forwards_total']" in text
        assert second.received(data) == b"" and capped.streams.forwards.refused >= 1
        for n, (_, data) in enumerate(pairs):  # the others and both sessions live on
            echoes(first if n < 3 else second, data, b"still %d\n" % n)
        close_all(first, pairs[:1])
        wait_for(lambda: capped.streams.forwards.open == 3, 30, what="the closed connection's place")
        again = open_pair(second, port, 2)
        echoes(second, again[1], b"a freed place\n")
        close_all(first, pairs[1:3])
        close_all(second, [pairs[3], again])
    wait_for(lambda: capped.streams.forwards.open == 0, 30, what="every place given back")


def test_I7_a_connection_that_cannot_be_detached_is_pumped_by_threads_under_forwards_threaded(
    capped: Listeners, echo: tuple[Handler, int]
) -> None:
    handler, port = echo
    provider = handler.provider
    assert isinstance(provider, SwitchableProvider)
    provider.detachable = False
    try:
        with connect(capped, protocols=PROTOCOLS) as client:
            before = threading.active_count()
            pairs = [open_pair(client, port, n) for n in range(2)]
            for n, (_, data) in enumerate(pairs):
                echoes(client, data, b"threaded %d\n" % n)
            assert capped.streams.threaded_forwards.open == 2 and capped.streams.forwards.open == 2
            assert threading.active_count() >= before + 4  # two threads each: the path a provider without detach takes
            error, data = open_pair(client, port, 2)
            client.wait_closed([error, data])
            text = client.received(error).decode()
            assert "2 forwarded connections pumped by threads open" in text
            assert "LISTENER_LIMITS['forwards_threaded']" in text
            wait_for(lambda: capped.streams.forwards.open == 2, 30, what="the refused connection's place")
            echoes(client, pairs[0][1], b"still here\n")
            close_all(client, pairs[:1])
            wait_for(lambda: capped.streams.threaded_forwards.open == 1, 30, what="the threads to end")
            again = open_pair(client, port, 3)
            echoes(client, again[1], b"threads again\n")
            close_all(client, [pairs[1], again])
    finally:
        provider.detachable = True
    wait_for(lambda: capped.streams.forwards.open == 0, 30, what="every place given back")
    wait_for(lambda: capped.streams.threaded_forwards.open == 0, 30, what="every threaded place given back")


def test_I7_places_are_given_back_on_every_path(capped: Listeners, echo: tuple[Handler, int]) -> None:
    """A dial error, a client reset, a dropped session, a problem on a started pair: each
    gives its place back (the cap of 4 would refuse the fifth otherwise)."""
    handler, port = echo
    closed = echoserver.free_port()
    with connect(capped, protocols=PROTOCOLS) as client:
        for n in range(6):  # dial errors
            error, data = open_pair(client, closed, n)
            client.wait_closed([error, data])
            assert "connection refused" in client.received(error).decode()
        for n in range(6, 12):  # client resets
            error, data = open_pair(client, port, n)
            echoes(client, data, b"reset %d\n" % n)
            client.reset(data)
            client.reset(error)
        for n in range(12, 18):  # a third stream for a started pair: the pair ends with the problem
            error, data = open_pair(client, port, n)
            echoes(client, data, b"problem %d\n" % n)
            client.open("data", headers=[("port", str(port)), ("requestID", str(n))], wait=False)
            client.wait_closed([error, data])
            assert "data stream already assigned" in client.received(error).decode()
        wait_for(lambda: capped.streams.forwards.open == 0, 30, what="the places of ended pairs")
    dropped = connect(capped, protocols=PROTOCOLS)
    for n in range(4):
        echoes(dropped, open_pair(dropped, port, n)[1], b"dropped %d\n" % n)
    dropped.close()  # no FIN, no RST_STREAM
    wait_for(lambda: capped.streams.forwards.open == 0, 30, what="a dropped session's places")
    assert b"eof after" in logs(handler)


class SocketEnd:
    """One end of a socket pair as a `DetachablePortConnection` (the test holds the other)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def read(self, max_bytes: int = 65536) -> bytes:
        raise AssertionError("a detachable connection is never read by the kubelet")

    def write(self, data: bytes) -> None:
        raise AssertionError("a detachable connection is never written by the kubelet")

    def close_write(self) -> None:
        raise AssertionError("a detachable connection is never half-closed by the kubelet")

    def close(self) -> None:
        self._sock.close()

    def detach(self) -> socket.socket:
        return self._sock


def test_I7_a_full_session_transport_stops_reading_the_provider_socket_until_it_drains() -> None:
    """Output back-pressure on the reactor path: while the session's transport is full
    (`pauseProducing`, a slow client) the pump's socket is not read (not among the reactor's
    readers); once it drains, what the provider sent meanwhile reaches the data stream."""
    loop.ensure_running()
    near, far = socket.socketpair()
    caps = StreamCaps.from_limits(Limits())
    dial = lambda port: SocketEnd(near)  # noqa: E731
    protocol = portforward.SpdyPortForwardProtocol(dial=dial, pod="default/p", name="p", caps=caps)
    transport = StringTransport()
    client = spdy.ClientSession()
    headers = [("port", "80"), ("requestID", "0")]
    error, wire = client.open([("streamtype", "error"), *headers], fin=True)
    data, more = client.open([("streamtype", "data"), *headers])
    loop.on_reactor(protocol.makeConnection, transport)
    loop.on_reactor(protocol.dataReceived, wire + more)
    pumps = wait_for(lambda: loop.on_reactor(lambda: list(protocol._pumps)), 30, what="the pump on the reactor")
    received = bytearray()

    def reading() -> bool:
        return loop.on_reactor(lambda: pumps[0].transport in loop.reactor.getReaders())

    def output() -> bytes:
        wire = loop.on_reactor(lambda: (transport.value(), transport.clear())[0])
        for event in client.receive(wire):
            if isinstance(event, spdy.DataReceived) and event.stream_id == data:
                received.extend(event.data)
        return bytes(received)

    try:
        assert reading()
        loop.on_reactor(protocol.pauseProducing)
        assert not reading()
        far.sendall(b"sent while full")
        loop.on_reactor(protocol.resumeProducing)
        assert reading()
        wait_for(lambda: output() == b"sent while full", 30, what="what the provider sent, after the drain")
    finally:
        loop.on_reactor(protocol.connectionLost)
        far.close()
    wait_for(lambda: caps.forwards.open == 0, 30, what="the place given back")


def test_I7_slow_dials_hold_only_their_own_threads_and_idle_ones_end() -> None:
    """Eight dials to an unreachable instance (each holding its thread) do not hold back a
    dial to a live one; the pool never passes its size, and idle threads end after the linger."""
    pool = portforward_socket.DialPool(size=12, linger=0.5)
    release, fast = threading.Event(), threading.Event()
    try:
        for _ in range(8):
            pool.submit(lambda: release.wait(30))
        pool.submit(fast.set)
        assert fast.wait(10), "a fast dial waited behind slow ones"
        for _ in range(20):
            pool.submit(lambda: release.wait(30))
        assert pool.threads() == 12  # at most its size; the rest wait their turn
    finally:
        release.set()
    wait_for(lambda: pool.threads() == 0, 30, 0.05, what="idle dial threads ended")


def test_a_connection_the_pod_resets_says_so_on_the_error_stream_and_a_clean_end_does_not(
    capped: Listeners, echo: tuple[Handler, int]
) -> None:
    """As the upstream kubelet writes the copy's error: a reset from the Pod's side is text on
    the error stream; a clean close is FIN alone (the reactor pump, as the threaded one)."""
    listener = socket.create_server(("127.0.0.1", 0))
    resetting = listener.getsockname()[1]

    def serve() -> None:
        for _ in range(2):
            peer, _ = listener.accept()
            if peer.recv(64) == b"reset\n":
                peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            peer.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        with connect(capped, protocols=PROTOCOLS) as client:
            error, data = open_pair(client, resetting, 1)
            client.send(data, b"reset\n")
            client.wait_closed([error, data])
            said = client.received(error).decode()
            assert said.startswith(f"error forwarding port {resetting} to pod default/echo, uid : "), said
            error, data = open_pair(client, resetting, 2)
            client.send(data, b"bye\n")
            client.wait_closed([error, data])
            assert client.received(error) == b""
        wait_for(lambda: capped.streams.forwards.open == 0, 30, what="the places given back")
    finally:
        listener.close()
