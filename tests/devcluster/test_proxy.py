"""The kubelet proxy: URL rewriting like kube-apiserver, and forwarding over real TLS on 127.0.0.1.

The upstream is a real TLS server with a self-signed certificate; the front end plays the
HTTP layer's part (reads the request head from a buffered reader, then calls `forward`).
"""

from __future__ import annotations

import http.client
import io
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devcluster import proxy
from tests.support.servers.tls import read_head, self_signed_server_context

WAIT = 20.0


@pytest.mark.parametrize(
    ("subresource", "container", "query", "expected"),
    [
        ("log", "main", [], "/containerLogs/default/p1/main"),
        ("log", None, [("container", "main")], "/containerLogs/default/p1/main"),
        (
            "log",
            "main",
            [("container", "main"), ("tailLines", "2"), ("timestamps", "true")],
            "/containerLogs/default/p1/main?tailLines=2&timestamps=true",
        ),
        (
            "log",
            "main",
            [("container", "main"), ("follow", "true"), ("limitBytes", "200"), ("sinceSeconds", "10")],
            "/containerLogs/default/p1/main?follow=true&limitBytes=200&sinceSeconds=10",
        ),
        (
            "log",
            "main",
            [("previous", "true"), ("sinceTime", "2024-01-02T03:04:05Z"), ("follow", "false")],
            "/containerLogs/default/p1/main?previous=true&sinceTime=2024-01-02T03%3A04%3A05Z",
        ),
        (
            "log",
            "main",
            [("sinceTime", "2024-01-02T04:04:05.25+01:00"), ("insecureSkipTLSVerifyBackend", "true")],
            "/containerLogs/default/p1/main?sinceTime=2024-01-02T03%3A04%3A05Z",
        ),
        (
            "exec",
            "main",
            [("command", "echo"), ("command", "hi"), ("container", "main"), ("stderr", "true"), ("stdout", "true")],
            "/exec/default/p1/main?command=echo&command=hi&error=1&output=1",
        ),
        (
            "exec",
            None,
            [("command", "sh"), ("command", "-c"), ("command", "echo hi; exit 3"), ("container", "c")]
            + [("stdin", "true"), ("stdout", "true"), ("tty", "false")],
            "/exec/default/p1/c?command=sh&command=-c&command=echo+hi%3B+exit+3&input=1&output=1",
        ),
        (
            "attach",
            "main",
            [("stdin", "1"), ("stdout", "true"), ("stderr", "TRUE"), ("tty", "true")],
            "/attach/default/p1/main?error=1&input=1&output=1&tty=1",
        ),
        ("portforward", None, [("ports", "8080"), ("ports", "9090")], "/portForward/default/p1?port=8080%2C9090"),
        ("portforward", None, [], "/portForward/default/p1"),
    ],
)
def test_kubelet_location_rewrites_like_the_api_server(
    subresource: str, container: str | None, query: list[tuple[str, str]], expected: str
) -> None:
    assert proxy.kubelet_location(subresource, "default", "p1", container, query) == expected


@pytest.mark.parametrize(
    ("subresource", "container", "query"),
    [
        ("log", None, []),
        ("log", "main", [("tailLines", "x")]),
        ("log", "main", [("sinceTime", "yesterday")]),
        ("exec", "main", [("command", "ls")]),
        ("exec", "main", [("stdout", "true")]),
        ("attach", "main", [("stdout", "false"), ("stderr", "0")]),
        ("portforward", None, [("ports", "99999")]),
        ("status", "main", []),
    ],
)
def test_kubelet_location_refuses_what_the_api_server_refuses(
    subresource: str, container: str | None, query: list[tuple[str, str]]
) -> None:
    with pytest.raises(proxy.LocationError):
        proxy.kubelet_location(subresource, "default", "p1", container, query)


# --- forwarding over TLS -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server_context(tmp_path_factory: pytest.TempPathFactory) -> ssl.SSLContext:
    """A server context with a fresh self-signed certificate for 127.0.0.1."""
    return self_signed_server_context(tmp_path_factory.mktemp("kubelet-tls"), "kubelet")


class Upstream:
    """A one-connection TLS server running `handler(conn, request_head)` in a thread."""

    def __init__(self, context: ssl.SSLContext, handler: Callable[[ssl.SSLSocket, bytes], None]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.context = context
        self.handler = handler
        self.request_head = b""
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        try:
            self.listener.settimeout(WAIT)
            raw, _ = self.listener.accept()
            with self.context.wrap_socket(raw, server_side=True) as conn:
                conn.settimeout(WAIT)
                got = read_head(conn)
                if got is None:
                    return
                head, rest = got
                self.request_head = head
                self.handler(conn, rest)
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc

    def __enter__(self) -> Upstream:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.thread.join(WAIT)
        self.listener.close()
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error


@pytest.fixture
def front() -> Iterator[Callable[..., tuple[socket.socket, threading.Thread, dict[str, Any]]]]:
    """Accepts one client, reads its head from a buffered reader and calls proxy.forward."""
    resources: list[Any] = []

    def start(
        port: int, target: str, tls: ssl.SSLContext | None = None
    ) -> tuple[socket.socket, threading.Thread, dict[str, Any]]:
        listener = socket.create_server(("127.0.0.1", 0))
        resources.append(listener)
        outcome: dict[str, Any] = {}

        def serve() -> None:
            conn, _ = listener.accept()
            if tls is not None:
                conn = tls.wrap_socket(conn, server_side=True)
            with conn, conn.makefile("rb") as rfile, conn.makefile("wb", buffering=0) as wfile:
                method = rfile.readline().split(b" ")[0].decode()
                headers = []
                while (line := rfile.readline()) not in (b"\r\n", b""):
                    name, _, value = line.decode().partition(":")
                    headers.append((name.strip(), value.strip()))
                client = proxy.ClientConnection(rfile=rfile, wfile=wfile, sock=conn)
                try:
                    proxy.forward(
                        client, host="127.0.0.1", port=port, method=method, target=target, headers=headers, body=b""
                    )
                except proxy.ProxyError as exc:
                    outcome["error"] = exc

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        client = socket.create_connection(listener.getsockname(), timeout=WAIT)
        if tls is not None:
            client = _client_context().wrap_socket(client)
        resources.append(client)
        return client, thread, outcome

    yield start
    for resource in resources:
        resource.close()


def _client_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _get(client: socket.socket, path: str) -> http.client.HTTPResponse:
    """One GET of `path` over `client`, the connection to the proxy's front end."""
    connection = http.client.HTTPConnection("127.0.0.1")
    connection.sock = client
    connection.request("GET", path)
    return connection.getresponse()


def _recv_until(sock: socket.socket, predicate: Callable[[bytes], bool]) -> bytes:
    data = b""
    while not predicate(data):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


_ALL_BYTES = bytes(range(256)) * 64
_UPGRADE_ANSWER = (
    b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
    b"X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n"
)


def test_upgrade_is_forwarded_byte_for_byte_both_ways_with_pipelined_bytes(
    server_context: ssl.SSLContext, front: Callable[..., Any]
) -> None:
    """Bytes pipelined after the request head, the 101 with early data, both directions and
    the half-close all pass through unchanged; Authorization is not forwarded."""
    received = bytearray()

    def kubelet(conn: ssl.SSLSocket, early: bytes) -> None:
        received.extend(early)
        conn.sendall(_UPGRADE_ANSWER + b"EARLY")
        while data := conn.recv(65536):
            received.extend(data)
        conn.sendall(b"after-half-close" + _ALL_BYTES)

    with Upstream(server_context, kubelet) as upstream:
        client, thread, outcome = front(upstream.port, "/exec/default/p1/main?command=cat&input=1&output=1")
        client.sendall(
            b"POST /api/v1/namespaces/default/pods/p1/exec?command=cat&stdin=true&stdout=true HTTP/1.1\r\n"
            b"Host: devcluster\r\nAuthorization: Bearer secret\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
            b"X-Stream-Protocol-Version: v4.channel.k8s.io\r\nX-Stream-Protocol-Version: channel.k8s.io\r\n"
            b"Keep-Alive: timeout=5\r\nContent-Length: 0\r\n\r\nPIPELINED\x00\xff"
        )
        head = _recv_until(client, lambda d: d.endswith(b"EARLY"))
        assert head == _UPGRADE_ANSWER + b"EARLY"
        client.sendall(_ALL_BYTES)
        client.shutdown(socket.SHUT_WR)
        rest = _recv_until(client, lambda d: False)
        thread.join(WAIT)
        assert not thread.is_alive() and outcome == {}
    assert bytes(received) == b"PIPELINED\x00\xff" + _ALL_BYTES
    assert rest == b"after-half-close" + _ALL_BYTES
    lines = upstream.request_head.decode().split("\r\n")
    assert lines[0] == "POST /exec/default/p1/main?command=cat&input=1&output=1 HTTP/1.1"
    assert f"Host: 127.0.0.1:{upstream.port}" in lines
    assert "Connection: Upgrade" in lines and "Upgrade: SPDY/3.1" in lines
    assert [line for line in lines if line.startswith("X-Stream-Protocol-Version")] == [
        "X-Stream-Protocol-Version: v4.channel.k8s.io",
        "X-Stream-Protocol-Version: channel.k8s.io",
    ]
    assert "X-Forwarded-For: 127.0.0.1" in lines
    assert not any(line.lower().startswith(("authorization", "keep-alive")) for line in lines)


def test_chunked_response_is_streamed_not_buffered(server_context: ssl.SSLContext, front: Callable[..., Any]) -> None:
    """The client reads the first chunk while the kubelet still holds back the second."""
    first_seen = threading.Event()

    def kubelet(conn: ssl.SSLSocket, early: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n6\r\nfirst\n\r\n")
        assert first_seen.wait(WAIT), "the proxy held the first chunk back"
        conn.sendall(b"7\r\nsecond\n\r\n0\r\n\r\n")

    with Upstream(server_context, kubelet) as upstream:
        client, thread, outcome = front(upstream.port, "/containerLogs/default/p1/main?follow=true")
        response = _get(client, "/api/v1/namespaces/default/pods/p1/log?follow=true")
        assert response.status == 200
        assert response.getheader("Transfer-Encoding") == "chunked"
        assert response.getheader("Connection") is None
        assert response.read(6) == b"first\n"
        first_seen.set()
        assert response.read() == b"second\n"
        thread.join(WAIT)
        assert outcome == {}
    assert upstream.request_head.startswith(b"GET /containerLogs/default/p1/main?follow=true HTTP/1.1\r\n")
    assert b"Connection: close" in upstream.request_head


@pytest.mark.parametrize(
    ("answer", "body"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello", b"hello"),
        (b"HTTP/1.1 200 OK\r\n\r\nuntil-eof", b"until-eof"),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", b"ok"),
        (b'HTTP/1.1 404 Not Found\r\nContent-Length: 19\r\n\r\npod "x" does not ex', b'pod "x" does not ex'),
    ],
)
def test_plain_responses_are_relayed_with_their_status_and_body(
    server_context: ssl.SSLContext, front: Callable[..., Any], answer: bytes, body: bytes
) -> None:
    def kubelet(conn: ssl.SSLSocket, early: bytes) -> None:
        conn.sendall(answer)

    with Upstream(server_context, kubelet) as upstream:
        client, thread, _ = front(upstream.port, "/containerLogs/default/p1/main")
        response = _get(client, "/api/v1/namespaces/default/pods/p1/log")
        assert response.status == int(answer.rsplit(b"HTTP/1.1 ", 1)[1][:3])
        assert response.read() == body
        thread.join(WAIT)


def _forward_to(port: int, **overrides: Any) -> io.BytesIO:
    written = io.BytesIO()
    with socket.socket() as sock:
        client = proxy.ClientConnection(rfile=io.BytesIO(), wfile=written, sock=sock)
        arguments: dict[str, Any] = {"host": "127.0.0.1", "port": port, "method": "GET", "target": "/x"}
        arguments.update(headers=[], body=b"", timeout=WAIT)
        arguments.update(overrides)
        proxy.forward(client, **arguments)
    return written


def test_unreachable_kubelet_raises_proxy_error_before_writing() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
    written = io.BytesIO()
    refused = f"dial tcp 127.0.0.1:{port}: connect: connection refused"
    with pytest.raises(proxy.ProxyError, match=refused), socket.socket() as sock:
        client = proxy.ClientConnection(rfile=io.BytesIO(), wfile=written, sock=sock)
        proxy.forward(client, host="127.0.0.1", port=port, method="GET", target="/x", headers=[], body=b"")
    assert written.getvalue() == b""


def test_a_kubelet_name_that_resolves_nowhere_is_a_lookup_error_in_gos_words() -> None:
    with pytest.raises(proxy.ProxyError) as raised, socket.socket() as sock:
        client = proxy.ClientConnection(rfile=io.BytesIO(), wfile=io.BytesIO(), sock=sock)
        proxy.forward(client, host="n1.invalid", port=10250, method="GET", target="/x", headers=[], body=b"")
    assert str(raised.value) == "dial tcp: lookup n1.invalid: no such host"


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        (b"", "closed before a complete response head"),
        (b"HTTP/1.1 200 OK\r\n" + b"X-Big: " + b"a" * 70_000 + b"\r\n\r\n", "larger than"),
        (b"SSH-2.0-OpenSSH\r\n\r\n", "malformed status line"),
        (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "switched protocols"),
    ],
)
def test_bad_kubelet_answers_raise_proxy_error_before_writing(
    server_context: ssl.SSLContext, answer: bytes, match: str
) -> None:
    def kubelet(conn: ssl.SSLSocket, early: bytes) -> None:
        conn.sendall(answer)

    with Upstream(server_context, kubelet) as upstream, pytest.raises(proxy.ProxyError, match=match):
        _forward_to(upstream.port)


def test_silent_kubelet_times_out_with_proxy_error(server_context: ssl.SSLContext) -> None:
    release = threading.Event()

    def kubelet(conn: ssl.SSLSocket, early: bytes) -> None:
        release.wait(WAIT)

    with Upstream(server_context, kubelet) as upstream:
        try:
            with pytest.raises(proxy.ProxyError, match="timed out"):
                _forward_to(upstream.port, timeout=0.5)
        finally:
            release.set()


def test_tls_is_required_of_the_kubelet() -> None:
    """A plain-HTTP listener fails the handshake: the proxy only dials HTTPS."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def answer_plain() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        thread = threading.Thread(target=answer_plain, daemon=True)
        thread.start()
        with pytest.raises(proxy.ProxyError, match="TLS handshake"):
            _forward_to(port)
        thread.join(WAIT)


def test_upgrade_through_a_tls_front_end_ends_when_the_kubelet_closes(
    server_context: ssl.SSLContext, front: Callable[..., Any]
) -> None:
    """As served by devcluster (client side on TLS too): bytes pass both ways, and the
    kubelet's close reaches the client as EOF after the last byte."""
    received = bytearray()

    def kubelet(conn: ssl.SSLSocket, early: bytes) -> None:
        received.extend(early)
        conn.sendall(_UPGRADE_ANSWER)
        while len(received) < len(early) + len(_ALL_BYTES):
            received.extend(conn.recv(65536))
        conn.sendall(_ALL_BYTES + b"bye")

    with Upstream(server_context, kubelet) as upstream:
        client, thread, outcome = front(upstream.port, "/attach/default/p1/main?input=1&output=1", server_context)
        client.sendall(
            b"GET /api/v1/namespaces/default/pods/p1/attach?stdin=1&stdout=1 HTTP/1.1\r\nHost: d\r\n"
            b"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\nX"
        )
        assert _recv_until(client, lambda d: d.endswith(b"\r\n\r\n")) == _UPGRADE_ANSWER
        client.sendall(_ALL_BYTES)
        assert _recv_until(client, lambda d: d.endswith(b"bye")) == _ALL_BYTES + b"bye"
        assert client.recv(1) == b""
        client.close()
        thread.join(WAIT)
        assert not thread.is_alive() and outcome == {}
    assert bytes(received) == b"X" + _ALL_BYTES
    lines = upstream.request_head.decode().split("\r\n")
    assert "Upgrade: websocket" in lines and "Sec-WebSocket-Protocol: v5.channel.k8s.io" in lines
    assert "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==" in lines and "Sec-WebSocket-Version: 13" in lines
