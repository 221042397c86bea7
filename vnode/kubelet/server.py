"""`Listeners`: the process's one Daphne server, serving both the kubelet API and the console.

Started by the process wiring (`nebula_site.manager.listeners.start_listeners`), tests and the bench.
The kubelet listener is TLS with a serving certificate made in memory (SAN: the node IP)
or read from files and reloaded on change (`certfiles`; the CSR source swaps `kubelet_tls`),
every request authenticated and authorised first (`auth`, as a kubelet: client certificate
verified by the client CA, bearer token, anonymous if configured); it serves only the kubelet routes. The console
listener serves only the Django app, over plain HTTP or TLS. Invariant I5: a request on
the wrong listener is a 404; see tests/vnode/kubelet/test_listeners.py::test_I5_*.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from daphne.server import Server
from daphne.ws_protocol import WebSocketFactory
from twisted.internet import defer, endpoints

from vnode.kubelet import auth, certfiles, certs, conncaps, limits, loop
from vnode.kubelet.app import KubeletApp, refuse_websocket
from vnode.kubelet.flow import ResponseFlow
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.spdyconn import SpdyConnection
from vnode.kubelet.streamcaps import StreamCaps
from vnode.kubelet.upgrade import CONSOLE, KUBELET, ListenerFactory

logger = logging.getLogger(__name__)

OPEN_PORT_WARNING = (
    "the kubelet API on %s:%d accepts any client: with anonymous auth and AlwaysAllow, anyone who can "
    "reach this port can read logs and run commands in these Pods (deploy/ closes it with a NetworkPolicy)"
)


@dataclass(frozen=True)
class ListenerConfig:
    host: str  # "" means every interface
    port: int  # 0 means any free port


class Listeners(Server):  # type: ignore[misc]
    """The kubelet listener and the console listener, on one Daphne server.

    Construct, `start()` (binds; raises OSError or ValueError), `stop()`.

    `kubelet_port` and `console_port` are the bound ports once started.
    """

    def __init__(
        self,
        registry: HandlerRegistry,
        *,
        kubelet: ListenerConfig,
        node_ip: str | None = None,
        client_ca: str | None = None,
        kubelet_auth: auth.KubeletAuth = auth.OPEN,
        console: ListenerConfig | None = None,
        console_app: Callable[..., Any] | None = None,
        console_tls: bool = False,
        console_ca_path: str | None = None,
        console_cert: tuple[str, str] | None = None,
        console_optional: bool = False,
        kubelet_cert: tuple[str, str] | None = None,
        kubelet_cert_interval: float = certfiles.DEFAULT_INTERVAL,
        bounds: limits.Limits | None = None,
    ) -> None:
        super().__init__(
            application=None,
            endpoints=["configured-in-code"],  # Daphne exits without any; ours are built in start()
            signal_handlers=False,
            http_timeout=None,  # `logs -f` may stream for days
            websocket_timeout=-1,  # an exec session has no deadline
            application_close_timeout=5,
        )
        self.registry = registry
        self.limits = bounds or limits.Limits()  # I7: bodies, heads, deadlines, connection caps
        self.streams = StreamCaps.from_limits(self.limits)  # I7: process-wide stream caps
        self.kubelet_config = kubelet
        self.console_config = console
        self.node_ip = node_ip
        self.client_ca = client_ca
        # auth.OPEN (anonymous, AlwaysAllow) is a default for tests and benches only: the process
        # wiring always passes the configured KubeletAuth, which refuses anonymous requests.
        self.kubelet_gate = auth.Gate(kubelet_auth, registry)
        self.console_tls = console_tls
        self.console_ca_path = console_ca_path
        self.console_cert = console_cert  # (cert, key) PEM files; else an in-memory certificate
        self.console_optional = console_optional  # a default address in use: warn, serve no console
        self._apps: dict[str, Any] = {KUBELET: KubeletApp(registry, self.streams), CONSOLE: console_app}
        self._ports: dict[str, Any] = {}
        self._upgraded: set[SpdyConnection] = set()
        self._running = False
        self.kubelet_ca: certs.KeyPair | None = None
        self.console_ca: certs.KeyPair | None = None
        self.console_cert_pem: bytes | None = None  # the certificate the console serves, once started (TLS)
        # (cert, key) PEM files, reloaded on change; else an in-memory certificate.
        self._cert_files = (
            certfiles.CertificateFiles(*kubelet_cert, interval=kubelet_cert_interval) if kubelet_cert else None
        )
        self.kubelet_tls: certs.ServerTLS | None = None  # once started; `replace` swaps the serving pair

    # -- life -------------------------------------------------------------------------------
    def start(self) -> None:
        """Make the certificates, start the reactor if needed, bind both listeners."""
        if self.client_ca:
            certs.load_ca_bundle(self.client_ca)  # a bad bundle fails here, at start-up
        if self._cert_files is not None:
            serving = self._cert_files.load()  # a bad or mismatched pair fails here, at start-up
        else:
            self.kubelet_ca = certs.make_ca("nebula-kubelet-ca")
            hosts = certs.serving_hosts(self.kubelet_config.host, self.node_ip)
            serving = certs.issue(self.kubelet_ca, "nebula-kubelet", hosts=hosts)
        kubelet_tls = self.kubelet_tls = certs.ServerTLS(serving, client_ca_path=self.client_ca)
        console_tls = None
        console_pair: certs.KeyPair | None = None
        if self.console_config is not None and self.console_cert is not None:
            console_pair = certs.load_pair(*self.console_cert)
        elif self.console_config is not None and self.console_tls:
            self.console_ca = certs.make_ca("nebula-console-ca")
            hosts = certs.serving_hosts(self.console_config.host, self.node_ip)
            console_pair = certs.issue(self.console_ca, "nebula-console", hosts=hosts)
            if self.console_ca_path:
                path = Path(self.console_ca_path)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(self.console_ca.cert_pem)
        if console_pair is not None:
            console_tls = certs.ServerTLS(console_pair)
            self.console_cert_pem = console_pair.cert_pem
        loop.ensure_running()
        loop.on_reactor(self._setup)
        try:
            self._ports[KUBELET] = loop.on_reactor(self._listen, KUBELET, self.kubelet_config, kubelet_tls)
            if self.console_config is not None:
                self._listen_console(console_tls)
        except BaseException:
            self.stop()
            raise
        if self._cert_files is not None:
            self._cert_files.watch(kubelet_tls)
        if self.kubelet_gate.config.open:
            logger.warning(OPEN_PORT_WARNING, self.kubelet_config.host or "*", self.kubelet_port)

    def _listen_console(self, tls: certs.ServerTLS | None) -> None:
        assert self.console_config is not None
        try:
            self._ports[CONSOLE] = loop.on_reactor(self._listen, CONSOLE, self.console_config, tls)
        except Exception as exc:
            if not self.console_optional:
                raise
            logger.warning("no console: cannot listen on port %d: %s", self.console_config.port, exc)

    def _setup(self) -> None:
        self.connections: dict[Any, dict[str, Any]] = {}
        self.ws_factory = WebSocketFactory(self, server=self.server_name)
        self.ws_factory.setProtocolOptions(
            autoPingTimeout=self.ping_timeout,
            allowNullOrigin=True,
            openHandshakeTimeout=self.limits.stream_creation_timeout,  # I7
            maxMessagePayloadSize=self.websocket_max_message_size,
            maxFramePayloadSize=self.websocket_max_frame_size,
        )
        self._running = True
        loop.reactor.callLater(1, self.application_checker)
        loop.reactor.callLater(2, self.timeout_checker)

    def _listen(self, name: str, config: ListenerConfig, tls: certs.ServerTLS | None) -> Any:
        interface = config.host or ("::" if self.node_ip and ":" in self.node_ip else "0.0.0.0")
        capped = conncaps.outermost(
            ListenerFactory(self, name, self.limits), tls=tls, bounds=self.limits, name=name
        )  # I7
        endpoint = endpoints.TCP4ServerEndpoint(  # type: ignore[no-untyped-call]
            loop.reactor, config.port, interface=interface
        )
        return endpoint.listen(capped)  # type: ignore[no-untyped-call]

    def stop(self, timeout: float = 10.0) -> None:
        """Stop listening and end every open connection (their commands are killed); waits
        at most `timeout` seconds for the ports to close."""
        if self._cert_files is not None:
            self._cert_files.stop()
        self.kubelet_gate.close()
        if self._ports or self._running:
            try:
                loop.on_reactor(self._shutdown, timeout=timeout)
            except TimeoutError as exc:
                logger.warning("kubelet and console listeners: %s; exiting anyway", exc)

    def _shutdown(self) -> Any:
        self._running = False
        ports, self._ports = list(self._ports.values()), {}
        for upgraded in list(self._upgraded):
            if upgraded.transport is not None:
                upgraded.transport.abortConnection()
        for protocol, details in list(getattr(self, "connections", {}).items()):
            channel = getattr(protocol, "channel", None)
            transport = getattr(protocol, "transport", None) or getattr(channel, "transport", None)
            if transport is not None and "disconnected" not in details:
                try:
                    transport.abortConnection()
                except Exception:  # already closing: nothing left to end
                    logger.debug("aborting a connection at shutdown failed", exc_info=True)
        self.kill_all_applications()
        return defer.gatherResults([defer.maybeDeferred(p.stopListening) for p in ports])

    @property
    def kubelet_port(self) -> int:
        return int(self._ports[KUBELET].getHost().port)

    @property
    def console_port(self) -> int | None:
        """None when the console is not served (not configured, or optional and not bound)."""
        port = self._ports.get(CONSOLE)
        return None if port is None else int(port.getHost().port)

    @property
    def console_fingerprint(self) -> str | None:
        """The SHA-256 (lower-case hex, of the DER) of the console's certificate; None over plain HTTP."""
        if self.console_cert_pem is None:
            return None
        return x509.load_pem_x509_certificate(self.console_cert_pem).fingerprint(hashes.SHA256()).hex()

    def track_upgraded(self, protocol: SpdyConnection) -> None:
        """Called on the reactor by the request hook: an open SPDY session, ended by `stop`."""
        self._upgraded.add(protocol)
        protocol.on_closed = partial(self._upgraded.discard, protocol)

    # -- Daphne's hooks -----------------------------------------------------------------------
    def create_application(self, protocol: Any, scope: dict[str, Any]) -> Any:
        """Daphne's, with the application chosen by the listener the request came in on."""
        listener = getattr(protocol, "nebula_listener", CONSOLE)
        app = self._apps.get(listener)
        if listener == CONSOLE and scope["type"] == "websocket" or app is None:
            app = refuse_websocket if scope["type"] == "websocket" else _not_found
        if protocol not in self.connections:
            return None
        queue: asyncio.Queue[Any] = asyncio.Queue()
        scope.setdefault("asgi", {"version": "3.0"})
        send: Any = partial(self.handle_reply, protocol)
        if scope["type"] == "http":
            send = ResponseFlow(protocol, send).send  # a slow reader slows the response down
        instance = app(scope=scope, receive=queue.get, send=send)
        self.connections[protocol]["application_instance"] = asyncio.ensure_future(instance, loop=loop.event_loop())
        return queue

    def application_checker(self) -> None:
        if self._running:
            super().application_checker()  # reschedules itself

    def timeout_checker(self) -> None:
        if self._running:
            super().timeout_checker()

    def kill_all_applications(self) -> Any:
        # Daphne's version indexes "application_instance" unconditionally (KeyError after a websocket).
        for details in getattr(self, "connections", {}).values():
            instance = details.get("application_instance")
            if instance is not None and not instance.done():
                instance.cancel()


async def _not_found(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"404 request not found"})
