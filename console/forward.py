"""The standby's forwarder: an ASGI wrapper that sends console requests to the leader's console.

Wraps the Django app in `nebula_site.asgi`. While `console.runtime.forwards()` (a locator is
installed and this process does not lead), every HTTP request except this replica's own
(`LOCAL_PATHS`: health, readiness, metrics, the admission webhook; static files never reach
it) is relayed to the leader named on the Lease: method, path, query, body and headers as
they came (Host, cookies, Authorization and CSRF headers included), plus X-Forwarded-For,
X-Forwarded-Proto and the loop guard `FORWARDED_HEADER`. Over TLS the leader's certificate
must match the published fingerprint before one byte of the request is sent. No leader, an
unreachable one, or a forwarded request reaching a replica that does not lead: 503 with a
one-line reason and Retry-After. Never changes a request's meaning or logs its contents.
Tests: tests/console/test_forward.py.
"""

from __future__ import annotations

import asyncio
import hmac
import http.client
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from console import runtime
from console.leaderpeer import HeldHere, NoLeader, Peer, fingerprint_of

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

LOCAL_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/webhooks/pods"})
FORWARDED_HEADER = b"x-nebula-forwarded"
MAX_BODY = 2_621_440  # bytes: Django's DATA_UPLOAD_MAX_MEMORY_SIZE; the console's forms are far smaller
CONNECT_TIMEOUT = 3.0  # seconds to reach the leader and finish the TLS handshake
READ_TIMEOUT = 30.0  # seconds the leader may stay silent while answering
PEER_TTL = 2.0  # seconds a Lease read is reused; a failed forward reads it again
RETRY_AFTER = 2  # seconds, in the 503's Retry-After
CHUNK = 65_536
# Per connection, never relayed (RFC 9110 §7.6.1); Content-Length is recomputed from the body.
HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding", b"upgrade"}
)


class ForwardError(Exception):
    """The leader could not be reached, or its certificate is not the published one."""


class PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS whose server must present the certificate with `fingerprint` (SHA-256 of its
    DER); names and CAs are not checked, the pin alone decides. A mismatch closes the
    socket after the handshake, before any request byte is written."""

    def __init__(self, host: str, port: int, *, fingerprint: str, timeout: float) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the pin below replaces chain and name checks
        super().__init__(host, port, timeout=timeout, context=context)
        self._fingerprint = fingerprint

    def connect(self) -> None:
        super().connect()
        der = self.sock.getpeercert(binary_form=True) if isinstance(self.sock, ssl.SSLSocket) else None
        if der is None or not hmac.compare_digest(fingerprint_of(der), self._fingerprint):
            self.sock.close()
            raise ForwardError(f"the certificate at {self.host}:{self.port} is not the one the leader Lease names")


def request_headers(scope: Scope) -> list[tuple[bytes, bytes]]:
    """Pure: the headers to send the leader: the client's (hop-by-hop and Content-Length
    dropped), X-Forwarded-For extended with the client's address, X-Forwarded-Proto set,
    and the loop guard."""
    headers: list[tuple[bytes, bytes]] = []
    forwarded_for = b""
    for name, value in scope.get("headers") or []:
        name = name.lower()
        if name == b"x-forwarded-for":
            forwarded_for = value
        elif name not in HOP_BY_HOP and name not in (b"content-length", b"x-forwarded-proto", FORWARDED_HEADER):
            headers.append((name, value))
    client = (scope.get("client") or ("", 0))[0]
    if client:
        forwarded_for = forwarded_for + b", " + client.encode() if forwarded_for else client.encode()
    if forwarded_for:
        headers.append((b"x-forwarded-for", forwarded_for))
    headers.append((b"x-forwarded-proto", str(scope.get("scheme") or "http").encode()))
    headers.append((FORWARDED_HEADER, b"1"))
    return headers


def response_headers(raw: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    """Pure: the leader's response headers, hop-by-hop ones dropped (Set-Cookie kept, each)."""
    return [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in raw
        if name.lower().encode("latin-1") not in HOP_BY_HOP
    ]


def target(scope: Scope) -> str:
    """The request target as the client sent it: the raw path and the query string."""
    path = scope.get("raw_path") or str(scope.get("path") or "/").encode()
    query = scope.get("query_string") or b""
    return (path + (b"?" + query if query else b"")).decode("latin-1")


async def refuse(send: Send, status: int, reason: str, *, retry: bool = True) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"cache-control", b"no-store")]
    if retry:
        headers.append((b"retry-after", str(RETRY_AFTER).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": reason.encode() + b"\n"})


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body; None once it passes `limit` bytes (or the client left)."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        if not message.get("more_body", False):
            return bytes(body)


def replay(body: bytes) -> Receive:
    """A `receive` that hands the app the body already read, then waits for the disconnect."""
    sent = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if not sent.is_set():
            sent.set()
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # never: the server cancels the app when the client leaves
        return {"type": "http.disconnect"}

    return receive


class Forwarder:
    """The ASGI wrapper. `forwards` and `locate` default to the process's role in `console.runtime`."""

    def __init__(
        self,
        app: App,
        *,
        forwards: Callable[[], bool] = runtime.forwards,
        locate: Callable[[], Peer] = runtime.locate_leader,
        max_body: int = MAX_BODY,
        connect_timeout: float = CONNECT_TIMEOUT,
        read_timeout: float = READ_TIMEOUT,
        peer_ttl: float = PEER_TTL,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self._forwards = forwards
        self._locate = locate
        self._max_body = max_body
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._peer_ttl = peer_ttl
        self._monotonic = monotonic
        self._peer: tuple[Peer, float] | None = None
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="console forward")
        self._last_reason = ""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in LOCAL_PATHS or not self._forwards():
            await self.app(scope, receive, send)
            return
        if any(name.lower() == FORWARDED_HEADER for name, _ in scope.get("headers") or []):
            await refuse(send, 503, "a forwarded request reached a replica that does not lead (the leader moved)")
            return
        body = await read_body(receive, self._max_body)
        if body is None:
            await refuse(send, 413, f"the request body is over {self._max_body} bytes", retry=False)
            return
        try:
            peer = await self._leader()
        except HeldHere:
            await self.app(scope, replay(body), send)
            return
        except NoLeader as exc:
            await self._unavailable(send, f"no leader to answer: {exc}")
            return
        try:
            connection, response = await self._run(self._open, peer, scope, body)
        except (ForwardError, OSError, http.client.HTTPException) as exc:
            self._peer = None  # read the Lease again next time: the leader may have moved
            await self._unavailable(send, f"the leader at {peer.url} does not answer: {exc}")
            return
        try:
            await self._relay(response, send)
        finally:
            response.close()
            connection.close()

    async def _leader(self) -> Peer:
        cached = self._peer
        if cached is not None and self._monotonic() - cached[1] < self._peer_ttl:
            return cached[0]
        peer: Peer = await self._run(self._locate)
        self._peer = (peer, self._monotonic())
        return peer

    async def _unavailable(self, send: Send, reason: str) -> None:
        if reason != self._last_reason:  # one line per change, not one per request
            logger.warning("console request not forwarded: %s", reason)
            self._last_reason = reason
        await refuse(send, 503, reason)

    async def _run(self, function: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, function, *args)

    def _open(
        self, peer: Peer, scope: Scope, body: bytes
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Connect (pinned over TLS), send the request, read the response's head."""
        connection: http.client.HTTPConnection
        if peer.tls:
            assert peer.fingerprint is not None  # peer_from never names an unpinned https peer
            connection = PinnedHTTPSConnection(
                peer.host, peer.port, fingerprint=peer.fingerprint, timeout=self._connect_timeout
            )
        else:
            connection = http.client.HTTPConnection(peer.host, peer.port, timeout=self._connect_timeout)
        try:
            connection.connect()
            if connection.sock is not None:
                connection.sock.settimeout(self._read_timeout)
            connection.putrequest(str(scope["method"]), target(scope), skip_host=True, skip_accept_encoding=True)
            for name, value in request_headers(scope):
                connection.putheader(name.decode("latin-1"), value)
            connection.putheader("Connection", "close")  # one request per connection: nothing pooled
            if body or scope["method"] not in ("GET", "HEAD", "OPTIONS"):
                connection.putheader("Content-Length", str(len(body)))
            connection.endheaders(body or None)
            response = connection.getresponse()
        except TimeoutError as exc:
            connection.close()
            raise ForwardError(f"no answer within {self._read_timeout:.0f}s") from exc
        except BaseException:
            connection.close()
            raise
        return connection, response

    async def _relay(self, response: http.client.HTTPResponse, send: Send) -> None:
        """The leader's answer as it comes; a failure mid-body ends the response short."""
        headers = response_headers(response.getheaders())
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        while True:
            try:
                chunk = await self._run(response.read1, CHUNK)
            except (OSError, http.client.HTTPException) as exc:
                logger.warning("the leader's answer broke off: %s", exc)
                chunk = b""
            await send({"type": "http.response.body", "body": chunk, "more_body": bool(chunk)})
            if not chunk:
                return
