"""The HTTP request hook: tells the listeners apart and takes SPDY upgrades off Daphne.

`ListenerFactory` is Daphne's HTTP factory with a listener name; `KubeletRequest.process`
tags each request (and each websocket) with it, so the server can route the kubelet
listener to the kubelet app and the console listener to Django (I5). Every kubelet request
is authorised first (`auth.admit`). A SPDY upgrade on the kubelet listener is validated,
answered 101 and handed to `SpdyExecProtocol` (the recipe of dependencies.md §2: Daphne
only upgrades websockets); a portForward upgrade is handed to
`portforward.SpdyPortForwardProtocol`. An exec or attach takes a place of the process-wide
session cap (`server.streams.sessions`) before its 101 and gives it back once its threads are
done; past the cap it is a 503 with Retry-After and the cap's text. This touches Daphne and Twisted internals;
tests/vnode/kubelet/test_spdy_wire.py guards the hand-off (tests/vnode/kubelet/test_port_forward.py
the port-forward one).
"""

from __future__ import annotations

import logging
from typing import Any

from daphne.http_protocol import HTTPFactory, WebRequest
from twisted.protocols.policies import ProtocolWrapper

from vnode.kubelet import auth, execparams, limits, portforward, resolve, routes
from vnode.kubelet.portforward import SpdyPortForwardProtocol
from vnode.kubelet.problems import Problem
from vnode.kubelet.spdyexec import SpdyExecProtocol
from vnode.kubelet.streamtimers import watch_websocket

logger = logging.getLogger(__name__)

KUBELET = "kubelet"
CONSOLE = "console"
RETRY_AFTER = 5.0  # seconds a client refused by a process-wide stream cap is told to wait


class ListenerFactory(HTTPFactory):  # type: ignore[misc]
    """Daphne's HTTP factory for one listener; requests are `KubeletRequest`s."""

    def __init__(self, server: Any, listener: str, bounds: limits.Limits | None = None) -> None:
        super().__init__(server)
        self.timeOut = None  # Twisted's own 60 s idle timer is off: `limits` owns every deadline (I7)
        self.listener = listener
        self.limits = bounds or limits.Limits()
        self.budget = limits.BodyBudget(self.limits.bodies_in_flight)

    def buildProtocol(self, addr: Any) -> Any:
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = KubeletRequest
        limits.arm(protocol._channel, self.limits, self.listener, self.budget)  # I7: head, body, deadlines
        return protocol


class KubeletRequest(limits.BoundedRequest, WebRequest):  # type: ignore[misc]
    """Daphne's request, its body and deadlines bounded (I7, `limits.BoundedRequest`)."""

    nebula_listener = CONSOLE
    nebula_admitted = False  # set by `auth.admit` once the request is authorised
    _accepted: tuple[str, ...] = execparams.SPDY_PROTOCOLS  # for a 403's X-Accepted-Stream-Protocol-Versions

    def process(self) -> Any:
        self.nebula_listener = self.channel.factory.listener
        if self.nebula_listener == KUBELET and not self.nebula_admitted:
            auth.admit(self, self.server.kubelet_gate, self.process)  # before anything else; then again
            return None
        upgrade = (self.requestHeaders.getRawHeaders(b"upgrade") or [b""])[0].strip().lower()
        if upgrade == b"spdy/3.1" and self.nebula_listener == KUBELET:
            try:
                self._upgrade_spdy()
            except Exception:
                logger.exception("SPDY upgrade failed")
                self._answer(Problem(500, "internal error during the SPDY upgrade"))
            return None
        if upgrade == b"websocket":
            if not self._serves_websocket():
                self._not_found()  # I5: a request on the wrong listener is a 404, an upgrade too
                return None
            self._upgrade_websocket()
            return None
        return super().process()

    def _serves_websocket(self) -> bool:
        """Only the kubelet listener serves websockets, and only on its streaming routes
        (exec, attach, portForward); the console serves none."""
        if self.nebula_listener != KUBELET:
            return False
        try:
            route = routes.resolve(self.method.decode("latin-1"), self.uri.split(b"?", 1)[0].decode("latin-1"))
        except routes.MethodNotAllowed:
            return True  # the consumer answers it, as for any other refusal of a known route
        return route is not None and (route.kind in routes.STREAMING or route.kind is routes.Kind.PORT_FORWARD)

    def _not_found(self) -> None:
        body = b"404 request not found"  # what the kubelet routes answer for any other path (views.serve_http)
        self.setResponseCode(404)
        self.setHeader(b"content-type", b"text/plain; charset=utf-8")
        self.setHeader(b"content-length", str(len(body)).encode())
        self.setHeader(b"connection", b"close")
        self.channel.persistent = False
        self.write(body)
        self.finish()

    # -- websocket: Daphne's own hand-off, plus the listener tag -----------------------------
    def _upgrade_websocket(self) -> None:
        self.query_string = self.uri.split(b"?", 1)[1] if b"?" in self.uri else b""
        transport: Any = self.channel.transport
        protocol = self.server.ws_factory.buildProtocol(transport.getPeer())
        protocol.nebula_listener = self.nebula_listener
        protocol._raw_query_string = self.query_string
        if self.nebula_listener == KUBELET:
            watch_websocket(protocol, idle_timeout=self.channel.factory.limits.stream_idle_timeout)
        setattr(self, "transport", None)  # noqa: B010  (the request no longer owns it)
        _swap_protocol(transport, protocol)
        protocol.makeConnection(transport)
        data = self.method + b" " + self.uri + b" HTTP/1.1\r\n"
        for name, values in self.requestHeaders.getAllRawHeaders():
            data += name + b": " + b",".join(values) + b"\r\n"
        protocol.dataReceived(data + b"\r\n" + self.content.read())
        limits.release_body(self, self.channel)
        self.server.protocol_disconnected(self)
        self.channel._networkProducer.resumeProducing()

    # -- SPDY ------------------------------------------------------------------------------
    def _upgrade_spdy(self) -> None:
        try:
            protocol, spdy = self._spdy_protocol()
        except routes.MethodNotAllowed as exc:
            self._answer(Problem(405, str(exc)))
            return
        except Problem as problem:
            self._answer(problem)
            return
        try:
            self._hand_over(protocol, spdy)
        except BaseException:
            if isinstance(spdy, SpdyExecProtocol):
                spdy.abandon()  # its place of the session cap goes back
            raise

    def _spdy_protocol(self) -> tuple[str, SpdyExecProtocol | SpdyPortForwardProtocol]:
        forward = resolve.forward_route(self.method.decode("latin-1"), self.path.decode("latin-1"))
        if forward is not None:
            self._accepted = (portforward.PROTOCOL,)
            return self._port_forward(forward)
        query = self.uri.split(b"?", 1)[1].decode("latin-1") if b"?" in self.uri else ""
        route, request = resolve.stream_route(self.method.decode("latin-1"), self.path.decode("latin-1"), query)
        attach = route.kind is routes.Kind.ATTACH
        connection = b",".join(self.requestHeaders.getRawHeaders(b"connection") or []).lower()
        if b"upgrade" not in connection:
            raise Problem(400, "unable to upgrade: missing upgrade headers in request")
        versions = [v.decode("latin-1") for v in self.requestHeaders.getRawHeaders(b"x-stream-protocol-version") or []]
        protocol = execparams.negotiate_spdy(versions)
        start = self.server.registry.starter(route, request)
        name = f"spdy-{route.kind.value}-{route.namespace}-{route.pod}"
        bounds = self.channel.factory.limits
        places = self.server.streams.sessions  # I7: the process-wide cap, taken last (nothing raises after)
        if not places.take():
            logger.info("SPDY %s refused: %s", route.kind.value, places.refusal())
            raise Problem(503, places.refusal(), retry_after=RETRY_AFTER)
        try:
            session = SpdyExecProtocol(
                protocol=protocol,
                request=request,
                start_process=start,
                attach=attach,
                name=name,
                creation_timeout=bounds.stream_creation_timeout,
                idle_timeout=bounds.stream_idle_timeout,
                on_end=places.give,
            )
        except BaseException:
            places.give()
            raise
        return protocol, session

    def _port_forward(self, route: routes.Route) -> tuple[str, SpdyPortForwardProtocol]:
        connection = b",".join(self.requestHeaders.getRawHeaders(b"connection") or []).lower()
        if b"upgrade" not in connection:
            raise Problem(400, "unable to upgrade: missing upgrade headers in request")
        dial = self.server.registry.dialer(route.namespace, route.pod)
        versions = [v.decode("latin-1") for v in self.requestHeaders.getRawHeaders(b"x-stream-protocol-version") or []]
        protocol = portforward.negotiate(versions)
        name = f"spdy-portforward-{route.namespace}-{route.pod}"
        bounds = self.channel.factory.limits
        session = SpdyPortForwardProtocol(
            dial=dial,
            pod=f"{route.namespace}/{route.pod}",
            name=name,
            creation_timeout=bounds.stream_creation_timeout,
            idle_timeout=bounds.stream_idle_timeout,
            caps=self.server.streams,
        )
        return protocol, session

    def _hand_over(self, protocol: str, spdy: SpdyExecProtocol | SpdyPortForwardProtocol) -> None:
        """101, then the connection belongs to `spdy`, with every byte already read."""
        channel: Any = self.channel
        transport: Any = channel.transport
        setattr(self, "transport", None)  # noqa: B010
        transport.write(
            b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
            b"X-Stream-Protocol-Version: " + protocol.encode("latin-1") + b"\r\n\r\n"
        )
        channel.setTimeout(None)
        limits.release(channel)
        limits.release_body(self, channel)
        buffered = b"".join(channel._dataBuffer)
        channel._dataBuffer = []
        channel.rawDataReceived = spdy.dataReceived  # the rest of the chunk being parsed now
        transport.unregisterProducer()
        _swap_protocol(transport, spdy)
        spdy.makeConnection(transport)  # type: ignore[no-untyped-call]
        self.server.connections.pop(self, None)
        self.server.track_upgraded(spdy)
        if buffered:
            spdy.dataReceived(buffered)
        transport.resumeProducing()

    def _answer(self, problem: Problem) -> None:
        self.setResponseCode(problem.code)
        for name, value in problem.headers():
            self.setHeader(name, value)
        if problem.code == 403:
            for version in self._accepted:
                self.responseHeaders.addRawHeader(b"x-accepted-stream-protocol-versions", version.encode())
        body = problem.body()
        self.setHeader(b"content-length", str(len(body)).encode())
        self.setHeader(b"connection", b"close")  # an upgrade that did not happen ends the connection
        self.channel.persistent = False
        self.write(body)
        self.finish()


def _swap_protocol(transport: Any, protocol: Any) -> None:
    """Point the connection at a new protocol: under TLS the wrapper's inner protocol,
    on plain TCP the transport's own (as Daphne does for websockets)."""
    if isinstance(transport, ProtocolWrapper):
        transport.wrappedProtocol = protocol
    else:
        transport.protocol = protocol
