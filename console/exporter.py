"""The metrics listener: `/metrics` of `console.metrics.REGISTRY` on its own port, apart from
the console, so Prometheus scrapes every replica (a standby too) in plain HTTP by default.

Optional TLS (a PEM certificate and key) and optional token auth as kube-rbac-proxy and
controller-runtime do it: a bearer token is authenticated by TokenReview and authorised by a
SubjectAccessReview for the non-resource URL `/metrics`, verb `get` (401 without a token or
with one the API server does not know, 403 when RBAC says no). A WSGI server in a thread of
its own: light, and independent of the Twisted reactor the kubelet and console share.
Started by `nebula_site.manager.listeners.start_metrics_listener`. Never logs a token.
Tests: tests/console/test_metrics_listener.py.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

from console import gauges as _gauges  # noqa: F401  (registers the memory gauges)
from console import metrics
from console import spendgauges as _spendgauges  # noqa: F401  (registers the spend families)
from kube.client import KubeError
from kube.reviews import Access, Reviewer

logger = logging.getLogger(__name__)

PATH = "/metrics"
SCRAPE = Access(verb="get", path=PATH)
StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def token_of(environ: dict[str, Any]) -> str | None:
    """The bearer token of the request's Authorization header, None if there is none."""
    scheme, _, token = str(environ.get("HTTP_AUTHORIZATION") or "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


class TokenGate:
    """WSGI middleware: only a token RBAC allows `get` on `/metrics` reaches `app`."""

    def __init__(self, app: WsgiApp, reviewer: Reviewer, *, access: Access = SCRAPE) -> None:
        self._app = app
        self._reviewer = reviewer
        self._access = access

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        token = token_of(environ)
        if token is None:
            return _refuse(start_response, "401 Unauthorized", "a bearer token is required")
        try:
            user = self._reviewer.user(token)
            if user is None:
                return _refuse(start_response, "401 Unauthorized", "the token is not authenticated")
            if not self._reviewer.allows(user, self._access):
                return _refuse(start_response, "403 Forbidden", f"{user.name} may not get {self._access.path}")
        except KubeError as exc:  # the review itself failed: say so, never guess
            logger.warning("metrics: cannot review a scraper's token: %s", exc)
            return _refuse(start_response, "503 Service Unavailable", "cannot review the token now")
        return self._app(environ, start_response)


def _refuse(start_response: StartResponse, status: str, message: str) -> list[bytes]:
    headers = [("Content-Type", "text/plain; charset=utf-8")]
    if status.startswith("401"):
        headers.append(("WWW-Authenticate", 'Bearer realm="nebula-metrics"'))
    start_response(status, headers)
    return [message.encode() + b"\n"]


def routes(app: WsgiApp) -> WsgiApp:
    """`/metrics` to `app`, anything else 404 (no other page to find here)."""

    def route(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") in (PATH, PATH + "/"):
            return app(environ, start_response)
        return _refuse(start_response, "404 Not Found", f"only {PATH} is served here")

    return route


def application(*, reviewer: Reviewer | None = None) -> WsgiApp:
    """The listener's WSGI app: the registry's exposition, behind the token gate if given."""
    app: WsgiApp = make_wsgi_app(metrics.REGISTRY)
    return routes(TokenGate(app, reviewer) if reviewer is not None else app)


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up or fails the TLS handshake: its problem, not a traceback here.
        logger.debug("metrics: a request from %s failed", client_address, exc_info=True)


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # one line per scrape is noise
        pass


class MetricsListener:
    """`/metrics` on `host:port` (empty host: every interface; port 0: any free one)."""

    def __init__(
        self, host: str, port: int, *, cert: tuple[str, str] | None = None, reviewer: Reviewer | None = None
    ) -> None:
        self.host, self.requested_port = host, port
        self.cert = cert
        self.reviewer = reviewer
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.cert is not None else "http"

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the metrics listener is not started")
        return int(self._server.server_address[1])

    def start(self) -> None:
        """Bind and serve in a thread. Raises OSError (address in use) or ssl.SSLError and
        OSError for a certificate that does not load."""
        context = None
        if self.cert is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self.cert)
        family = _Server6 if ":" in self.host else _Server
        server = make_server(self.host, self.requested_port, application(reviewer=self.reviewer), family, _QuietHandler)
        if context is not None:
            # The handshake happens on the first read, in the request's own thread: a client
            # that connects and says nothing never holds up the accept loop.
            server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="metrics-listener", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout)
