"""The standby's forwarder (`console.forward`) in front of a real leader over real TLS: the
request reaches the leader as the client sent it (method, path, query, body, Host, cookies,
Authorization, CSRF headers) plus X-Forwarded-*; the leader's certificate must match the
published fingerprint before one byte is sent; a forwarded request reaching a standby, a
body over the limit, no leader or an unreachable one are refused with one line; this
replica's own paths are never forwarded. And how a Lease's annotations name the leader."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from console import leaderpeer
from console.forward import FORWARDED_HEADER, Forwarder
from console.leaderpeer import HeldHere, NoLeader, Peer
from kube import names
from tests.support.polling import wait_for
from tests.support.servers import rawlisteners as tlsserver
from tests.support.servers.tls import read_head, self_signed_server_context

Headers = list[tuple[bytes, bytes]]


class Leader(tlsserver.Listener):
    """A leader's console stand-in on 127.0.0.1: TLS (or plain) on a free port; records every
    connection's bytes and answers each request with its own head and body as JSON, and two
    cookies."""

    join_timeout = 5.0

    def __init__(self, directory: Path, *, tls: bool = True) -> None:
        super().__init__(per_connection=True)
        self.context = self_signed_server_context(directory, "leader") if tls else None
        self.cert_der = ssl.PEM_cert_to_DER_cert((directory / "cert.pem").read_text()) if tls else b""
        self.connections: list[bytes] = []  # what each connection sent, once it closed
        self._lock = threading.Lock()
        self.start()

    def peer(self, fingerprint: str | None = None) -> Peer:
        if self.context is None:
            return Peer(f"http://127.0.0.1:{self.port}")
        return Peer(f"https://127.0.0.1:{self.port}", fingerprint or leaderpeer.fingerprint_of(self.cert_der))

    def handle(self, raw: socket.socket) -> None:
        received = b""
        try:
            conn = self.context.wrap_socket(raw, server_side=True) if self.context else raw
            with conn:
                message = read_head(conn)
                if message is not None:
                    head, rest = message
                    received = head + b"\r\n\r\n" + rest
                    lengths = [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
                    length = int(lengths[0].split(b":", 1)[1]) if lengths else 0
                    while len(rest) < length:
                        rest += conn.recv(65536)
                    received = head + b"\r\n\r\n" + rest
                    echo = json.dumps({"head": head.decode(), "body": rest.decode()}).encode()
                    conn.sendall(
                        b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nConnection: close\r\n"
                        b"Set-Cookie: a=1; Path=/\r\nSet-Cookie: b=2; Path=/\r\n"
                        + f"Content-Length: {len(echo)}\r\n\r\n".encode()
                        + echo
                    )
                else:
                    received = b""
        except (OSError, ssl.SSLError):
            pass  # the forwarder hung up after the handshake: what it sent is what counts
        with self._lock:
            self.connections.append(received)


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[Leader]:
    running = Leader(tmp_path)
    yield running
    running.close()


async def _local(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The Django app stand-in: answers 200 "local" (this replica served it)."""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"local"})


def http_scope(
    method: str = "GET", path: str = "/api/pods", *, query: bytes = b"", headers: Headers | None = None
) -> dict[str, Any]:
    return {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "scheme": "https",
        "client": ["127.0.0.5", 50000],
        "headers": [(b"host", b"console.example:8443"), *(headers or [])],
    }


def call(app: Forwarder, scope: dict[str, Any], body: bytes = b"") -> tuple[int, dict[bytes, list[bytes]], bytes]:
    """Drive the ASGI app once; the status, headers (every value per name) and body."""
    sent: list[dict[str, Any]] = []

    async def run() -> None:
        messages = [{"type": "http.request", "body": body[:5], "more_body": True},
                    {"type": "http.request", "body": body[5:], "more_body": False}]  # fmt: skip

        async def receive() -> dict[str, Any]:
            return messages.pop(0) if messages else {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app(scope, receive, send)

    asyncio.run(run())
    start = sent[0]
    headers: dict[bytes, list[bytes]] = {}
    for name, value in start["headers"]:
        headers.setdefault(name, []).append(value)
    return int(start["status"]), headers, b"".join(m.get("body", b"") for m in sent[1:])


def forwarder(peer: Peer | None, *, forwards: bool = True, **options: Any) -> tuple[Forwarder, list[int]]:
    """A Forwarder to `peer` (None: no leader), and the count of Lease reads it made."""
    reads: list[int] = []

    def locate() -> Peer:
        reads.append(1)
        if peer is None:
            raise NoLeader("no replica holds the leader Lease")
        return peer

    return Forwarder(_local, forwards=lambda: forwards, locate=locate, **options), reads


def test_a_forwarded_request_reaches_the_leader_as_sent_plus_forwarding_headers(leader: Leader) -> None:
    app, _ = forwarder(leader.peer())
    sent = [(b"cookie", b"sessionid=s1; csrftoken=c1"), (b"authorization", b"Token t0k3n"),
            (b"x-csrftoken", b"c1"), (b"origin", b"https://console.example:8443"),
            (b"x-forwarded-for", b"10.0.0.9"), (b"connection", b"keep-alive")]  # fmt: skip
    status, headers, body = call(
        app, http_scope("DELETE", "/api/blocklist/b12", query=b"x=1&y=%20", headers=sent), b"confirm=yes"
    )
    assert status == 201
    assert headers[b"set-cookie"] == [b"a=1; Path=/", b"b=2; Path=/"]
    echo = json.loads(body)
    request_line, *lines = echo["head"].split("\r\n")
    assert request_line == "DELETE /api/blocklist/b12?x=1&y=%20 HTTP/1.1"
    got = [tuple(line.split(": ", 1)) for line in lines]
    for name, value in sent[:4]:
        assert (name.decode(), value.decode()) in got
    assert ("host", "console.example:8443") in got
    assert ("x-forwarded-for", "10.0.0.9, 127.0.0.5") in got
    assert ("x-forwarded-proto", "https") in got
    assert (FORWARDED_HEADER.decode(), "1") in got
    assert ("connection", "keep-alive") not in got
    assert echo["body"] == "confirm=yes"


def test_a_certificate_other_than_the_published_one_gets_503_and_not_one_byte(leader: Leader) -> None:
    app, _ = forwarder(leader.peer(fingerprint="0" * 64))
    status, headers, body = call(app, http_scope("POST", "/api/x", headers=[(b"authorization", b"Token secret")]), b"x")
    assert status == 503 and headers[b"retry-after"] == [b"2"]
    assert b"is not the one the leader Lease names" in body and b"secret" not in body
    assert body.count(b"\n") == 1
    wait_for(lambda: leader.connections, what="the leader saw the connection close")
    assert leader.connections == [b""]  # the handshake happened; no request byte followed


def test_a_forwarded_request_reaching_a_standby_is_refused_without_forwarding(leader: Leader) -> None:
    app, reads = forwarder(leader.peer())
    status, headers, body = call(app, http_scope(headers=[(FORWARDED_HEADER, b"1")]))
    assert status == 503 and b"reached a replica that does not lead" in body
    assert headers[b"retry-after"] == [b"2"]
    assert reads == [] and leader.connections == []


def test_a_body_over_the_limit_is_413_and_goes_nowhere(leader: Leader) -> None:
    app, reads = forwarder(leader.peer(), max_body=10)
    status, _, body = call(app, http_scope("POST"), b"x" * 11)
    assert status == 413 and body == b"the request body is over 10 bytes\n"
    assert reads == [] and leader.connections == []
    status, _, _ = call(app, http_scope("POST"), b"x" * 10)
    assert status == 201


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/webhooks/pods"])
def test_this_replicas_own_paths_are_served_here(leader: Leader, path: str) -> None:
    app, reads = forwarder(leader.peer())
    assert call(app, http_scope("POST", path)) == (200, {b"content-type": [b"text/plain"]}, b"local")
    assert reads == [] and leader.connections == []


def test_the_leader_serves_everything_itself(leader: Leader) -> None:
    app, reads = forwarder(leader.peer(), forwards=False)
    assert call(app, http_scope(headers=[(FORWARDED_HEADER, b"1")]))[2] == b"local"
    assert reads == []


def test_the_lease_holder_serves_itself_while_its_controllers_start() -> None:
    """Between taking the Lease and running its controllers the holder answers its own requests
    (a login page, say) with the body it was sent, instead of a 503 from itself."""
    received: list[bytes] = []

    async def echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
        received.append((await receive())["body"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"here"})

    def held() -> Peer:
        raise HeldHere()

    app = Forwarder(echo, forwards=lambda: True, locate=held)
    status, _, body = call(app, http_scope("POST", "/admin/login/"), b"username=dev")
    assert (status, body, received) == (200, b"here", [b"username=dev"])


def test_no_leader_is_503_with_the_reason() -> None:
    app, _ = forwarder(None)
    status, headers, body = call(app, http_scope())
    assert (status, body) == (503, b"no leader to answer: no replica holds the leader Lease\n")
    assert headers[b"retry-after"] == [b"2"]


def test_an_unreachable_leader_is_503_and_the_lease_is_read_again() -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]  # closed on leaving: nobody listens there any more
    app, reads = forwarder(Peer(f"http://127.0.0.1:{port}"))
    status, _, body = call(app, http_scope())
    assert status == 503 and body.startswith(f"the leader at http://127.0.0.1:{port} does not answer".encode())
    call(app, http_scope())
    assert len(reads) == 2  # the failure dropped the cached address


def test_a_plain_http_console_forwards_over_plain_http(tmp_path: Path) -> None:
    plain = Leader(tmp_path, tls=False)
    try:
        app, reads = forwarder(plain.peer())
        for _ in range(2):
            status, _, body = call(app, http_scope("GET", "/admin/"))
            assert status == 201 and json.loads(body)["head"].startswith("GET /admin/ HTTP/1.1")
        assert len(reads) == 1  # the Lease read is reused for PEER_TTL
    finally:
        plain.close()


@pytest.mark.parametrize(
    ("published", "expected"),
    [
        pytest.param({names.CONSOLE_URL_ANNOTATION: "http://10.0.0.7:8443"}, Peer("http://10.0.0.7:8443"), id="plain"),
        pytest.param(
            {names.CONSOLE_URL_ANNOTATION: "https://[fd00::7]:8443", names.CONSOLE_CERT_SHA256_ANNOTATION: "AB" * 32},
            Peer("https://[fd00::7]:8443", "ab" * 32),
            id="tls, pinned",
        ),
        pytest.param(
            {names.CONSOLE_URL_ANNOTATION: "https://10.0.0.7:8443"}, "names no certificate", id="tls unpinned"
        ),
        pytest.param(
            {names.CONSOLE_URL_ANNOTATION: "https://10.0.0.7:8443", names.CONSOLE_CERT_SHA256_ANNOTATION: "abc"},
            "names no certificate",
            id="a short fingerprint",
        ),
        pytest.param({}, "publishes no console address", id="nothing published"),
        pytest.param({names.CONSOLE_URL_ANNOTATION: "ftp://x"}, "publishes no console address", id="not http"),
    ],
)
def test_a_leases_annotations_name_a_pinned_console_or_no_leader(published: dict[str, str], expected: Any) -> None:
    if isinstance(expected, Peer):
        assert leaderpeer.peer_from(published) == expected
        assert leaderpeer.peer_from(leaderpeer.lease_annotations(expected)) == expected
    else:
        with pytest.raises(NoLeader, match=expected):
            leaderpeer.peer_from(published)


def test_the_console_url_brackets_an_ipv6_host() -> None:
    assert leaderpeer.console_url(tls=True, host="fd00::7", port=8443) == "https://[fd00::7]:8443"
    peer = Peer(leaderpeer.console_url(tls=False, host="10.1.2.3", port=80))
    assert (peer.host, peer.port, peer.tls) == ("10.1.2.3", 80, False)
