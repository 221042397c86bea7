"""The metrics listener's app: `/metrics` of `console.metrics.REGISTRY`, on a port of its own
apart from the console, so Prometheus scrapes every replica (a standby too).

Optional token auth as kube-rbac-proxy and controller-runtime do it: a bearer token is
authenticated by TokenReview and authorised by a SubjectAccessReview for the non-resource URL
`/metrics`, verb `get` (401 without a token or with one the API server does not know, 403 when
RBAC says no). A WSGI app: `nebula_site.manager.listeners.MetricsListener` serves it (plain HTTP
or TLS) on the kubelet and console listeners' bounded machinery (`vnode.kubelet.wsgilistener`,
I7); its reviews block, so it runs on that listener's small pool, never on the reactor. Never
logs a token. Tests: tests/console/test_metrics_listener.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

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
