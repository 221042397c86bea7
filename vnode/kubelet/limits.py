"""I7 at the HTTP layer of every listener (kubelet, console, metrics): heads, bodies, deadlines, caps.

`Limits` is the configuration (`Listeners(bounds=...)`, `MetricsListener(bounds=...)`, from
runvnode flags and NEBULA settings); `conncaps` enforces its connection caps and `streamcaps`
its process-wide stream caps. `arm` bounds one HTTP channel (head size and count, a deadline for the head and then
the body, counted from the accept or the end of the previous response, never reset by a
trickle); `BoundedRequest` (the base of `upgrade.KubeletRequest` and
`wsgilistener.BoundedWsgiRequest`) calls `admit_length`, `admit_chunk`, `request_received`, `request_finished` and
`release_body`. A refusal is a status with a text message, then the connection closes; nothing
here reads a body it will refuse. Tests: tests/vnode/kubelet/test_listener_limits.py,
tests/console/test_metrics_listener.py.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from twisted.web import http

from vnode.kubelet.loop import reactor

logger = logging.getLogger(__name__)

KIB, MIB = 1024, 1024 * 1024
LINGER = 2.0  # seconds of quiet after which a refused connection closes (its input is dropped meanwhile)
LINGER_MAX = 10.0  # seconds a refused connection may keep sending before it is closed anyway
LOG_EVERY = 10.0  # seconds between two log lines about refused connections


@dataclass(frozen=True)
class Limits:
    """Bounds for both listeners; the defaults fit a 1 GiB container (docs/kubelet-api.md)."""

    kubelet_body: int = 16 * KIB  # the kubelet API takes no request bodies worth more
    console_body: int = 4 * MIB  # an AdmissionReview of a large Pod; kube-apiserver caps at 3 MiB
    head_bytes: int = 32 * KIB  # request line plus every header line
    head_count: int = 100  # header lines
    head_timeout: float = 30.0  # seconds from accept (or a kept-alive connection's next byte) to a complete head
    body_timeout: float = 60.0  # seconds from the same start to the whole body
    keepalive_timeout: float = 120.0  # an idle kept-alive connection; over Go's 90 s, so clients close first
    per_client: int = 512  # open connections per client address (kubectl through the API server: one address)
    authenticated_total: int = 12288  # connections whose client certificate the client CA verified, per listener
    total: int = 2048  # open connections per listener
    stream_creation_timeout: float = 30.0  # the kubelet's: upgrade to every stream set up
    stream_idle_timeout: float = 4 * 3600.0  # the kubelet's --streaming-connection-idle-timeout
    bodies_in_flight: int = 64 * MIB  # request bodies held at once per listener (503 past it)
    # Process-wide stream caps (`streamcaps.StreamCaps`), across every connection and session:
    forwards_total: int = 1024  # forwarded connections of all port-forward sessions (8 x 128)
    forwards_threaded: int = 128  # those pumped by two threads each (a provider without `detach`)
    sessions_total: int = 256  # exec and attach sessions (a few threads each)
    followers_total: int = 10240  # containerLogs streams: every Pod of a 10,000-Pod node followed at once

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"listener limit {name} must be a number greater than 0, got {value!r}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> Limits:
        """The defaults with `values` (field name -> number) over them; ValueError names a bad key."""
        known = {field.name for field in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown listener limit(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**values)

    def body_limit(self, listener: str) -> int:
        """The console's large limit; the kubelet's small one for every other listener (metrics)."""
        return self.console_body if listener == "console" else self.kubelet_body


# -- refusing ------------------------------------------------------------------------------
_REASONS = {
    400: b"Bad Request",
    408: b"Request Timeout",
    413: b"Content Too Large",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}


class BodyBudget:
    """The bytes of request body one listener holds right now, against `Limits.bodies_in_flight`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0


def refuse(channel: Any, code: int, message: str) -> None:
    """Answer `code` with `message` (text), then drop whatever else arrives and close once the
    client has been quiet for LINGER seconds (LINGER_MAX at most). Reading on, rather than
    closing on unread input, lets the client read the answer instead of a reset; nothing of
    the input is kept."""
    if getattr(channel, "_nebula_refused", False) or channel.transport is None:
        return
    channel._nebula_refused = True
    _cancel(channel)
    body = message.encode("utf-8", "replace") + b"\n"
    channel.transport.write(
        b"HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n"
        b"Connection: close\r\n\r\n%s" % (code, _REASONS.get(code, b"Error"), len(body), body)
    )
    channel.persistent = False
    quiet = {"since": time.monotonic()}
    ends = quiet["since"] + LINGER_MAX

    def drop(*_args: Any) -> None:
        quiet["since"] = time.monotonic()

    def check() -> None:
        now = time.monotonic()
        if now >= ends or now - quiet["since"] >= LINGER:
            _close(transport)
        else:
            channel._nebula_timer = reactor.callLater(LINGER - (now - quiet["since"]), check)

    channel.dataReceived = channel.lineReceived = channel.rawDataReceived = drop
    if channel.requests:
        channel.requests[-1].requestHeaders.removeHeader(b"expect")  # no 100 Continue after this
    transport = channel.transport
    channel._nebula_timer = reactor.callLater(LINGER, check)


def _close(transport: Any) -> None:
    """A clean close (TLS close_notify, FIN: the answer stays readable), forced after LINGER."""
    try:
        transport.unregisterProducer()  # TLS holds a close while a producer is registered
        transport.loseConnection()
    except Exception:  # already gone
        logger.debug("closing a refused connection failed", exc_info=True)
    reactor.callLater(LINGER, _abort, transport)


def _abort(transport: Any) -> None:
    try:
        transport.abortConnection()
    except Exception:  # already gone
        logger.debug("closing a refused connection failed", exc_info=True)


# -- one channel ---------------------------------------------------------------------------
def arm(channel: Any, limits: Limits, listener: str, budget: BodyBudget) -> None:
    """Bound one HTTPChannel (called as the connection is accepted)."""
    channel._nebula_limits = limits
    channel._nebula_budget = budget
    channel._nebula_listener = listener
    channel.maxHeaders = limits.head_count
    channel.totalHeadersSize = limits.head_bytes
    channel.MAX_LENGTH = limits.head_bytes
    channel._respondToBadRequestAndDisconnect = lambda: _bad_request(channel)
    channel.lineLengthExceeded = lambda _line: refuse(
        channel, 431, f"a request line or header line is longer than {limits.head_bytes} bytes"
    )
    lost = channel.connectionLost

    def connection_lost(reason: Any = None) -> None:
        _cancel(channel)  # a pending deadline would keep the channel in memory
        lost(reason)

    channel.connectionLost = connection_lost
    received = channel.dataReceived

    def data_received(data: bytes) -> None:
        if channel._nebula_idle:  # the next request's first byte: its deadlines start now
            channel._nebula_idle = False
            _start_head(channel)
        received(data)

    channel.dataReceived = data_received
    channel._nebula_idle = False
    _start_head(channel)


def _bad_request(channel: Any) -> None:
    """Twisted's parse failures, with a status that says which and a message."""
    limits: Limits = channel._nebula_limits
    if channel._receivedHeaderSize > channel.totalHeadersSize:
        refuse(channel, 431, f"the request head is larger than {limits.head_bytes} bytes")
    elif channel._receivedHeaderCount > channel.maxHeaders:
        refuse(channel, 431, f"the request has more than {limits.head_count} header lines")
    else:
        refuse(channel, 400, "malformed HTTP request (request line, header, Content-Length or chunk)")


def _start_head(channel: Any) -> None:
    limits: Limits = channel._nebula_limits
    _cancel(channel)
    channel._nebula_start = time.monotonic()
    channel._nebula_timer = reactor.callLater(limits.head_timeout, _timed_out, channel, "head")


def _timed_out(channel: Any, part: str) -> None:
    channel._nebula_timer = None
    limits: Limits = channel._nebula_limits
    seconds = limits.head_timeout if part == "head" else limits.body_timeout
    if part == "idle" or part == "head" and not channel.requests and not channel._buffer:
        _close(channel.transport)  # nothing was asked: an idle connection just closes
        return
    refuse(channel, 408, f"the request {part} did not arrive within {seconds:g} s")


def _cancel(channel: Any) -> None:
    timer = getattr(channel, "_nebula_timer", None)
    if timer is not None and timer.active():
        timer.cancel()
    channel._nebula_timer = None


def admit_length(request: Any, length: int | None) -> bool:
    """At the end of the head: False (and 413) when the declared body is too large."""
    channel = request.channel
    limits: Limits | None = getattr(channel, "_nebula_limits", None)
    request.content = io.BytesIO()  # bounded below: never a temporary file
    request._nebula_body = 0
    if limits is None:
        return True
    limit = limits.body_limit(channel._nebula_listener)
    if length is not None and length > limit:
        refuse(channel, 413, f"request body of {length} bytes is over this listener's limit of {limit} bytes")
        return False
    if channel._nebula_idle:  # a pipelined request, parsed from what was buffered
        channel._nebula_idle = False
        channel._nebula_start = time.monotonic()
    _cancel(channel)
    left = max(0.0, channel._nebula_start + limits.body_timeout - time.monotonic())
    channel._nebula_timer = reactor.callLater(left, _timed_out, channel, "body")
    return True


def admit_chunk(request: Any, data: bytes) -> bool:
    """For each piece of body: False (and 413) once the body runs past the limit."""
    channel = request.channel
    limits: Limits | None = getattr(channel, "_nebula_limits", None)
    if getattr(channel, "_nebula_refused", False):
        return False
    if limits is None:
        return True
    request._nebula_body = getattr(request, "_nebula_body", 0) + len(data)
    budget: BodyBudget = channel._nebula_budget
    budget.used += len(data)
    limit = limits.body_limit(channel._nebula_listener)
    if request._nebula_body > limit:
        refuse(channel, 413, f"request body is over this listener's limit of {limit} bytes")
        return False
    if budget.used > budget.limit:
        refuse(channel, 503, f"this listener holds {budget.limit} bytes of request bodies already; try again")
        return False
    return True


def release_body(request: Any, channel: Any = None) -> None:
    """The request's body is no longer held (answered, lost or handed over): once only."""
    channel = channel if channel is not None else getattr(request, "channel", None)
    held = getattr(request, "_nebula_body", 0)
    budget: BodyBudget | None = getattr(channel, "_nebula_budget", None)
    if held and budget is not None:
        budget.used -= held
    request._nebula_body = 0


def request_received(request: Any) -> None:
    """The whole request is in: no deadline while it is answered (`logs -f` may last days)."""
    _cancel(request.channel)


def request_finished(request: Any) -> None:
    """The answer is complete: a kept-alive connection waits keepalive_timeout for its next
    request, whose first byte starts the head deadline again (called before the channel
    parses what the client sent meanwhile)."""
    channel = request.channel
    release_body(request, channel)
    if (
        getattr(channel, "_nebula_limits", None) is not None
        and channel.persistent
        and not getattr(request, "_disconnected", False)
        and not getattr(channel, "_nebula_refused", False)
        and channel.transport is not None
    ):
        _cancel(channel)
        channel._nebula_idle = True
        channel._nebula_timer = reactor.callLater(channel._nebula_limits.keepalive_timeout, _timed_out, channel, "idle")


_Request: Any = http.Request  # untyped here, as Daphne's subclass of it is


class BoundedRequest(_Request):  # type: ignore[misc]
    """A request of an `arm`ed channel: its body is bounded while it arrives, no deadline runs
    while it is answered, and the keep-alive wait starts when it is finished. Mixed in before
    the server's own request class (Daphne's `WebRequest`, twisted.web's `Request`)."""

    def gotLength(self, length: int | None) -> None:
        admit_length(self, length)

    def handleContentChunk(self, data: bytes) -> None:
        if admit_chunk(self, data):
            self.content.write(data)

    def connectionLost(self, reason: Any) -> None:
        release_body(self)
        super().connectionLost(reason)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        request_received(self)
        super().requestReceived(command, path, version)

    def finish(self) -> Any:
        request_finished(self)  # before: finishing may start parsing the next request
        return super().finish()


def release(channel: Any) -> None:
    """The connection was upgraded: its stream protocol bounds it from now on."""
    _cancel(channel)
