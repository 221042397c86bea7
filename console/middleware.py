"""Counts console API requests by verb and status code for `/metrics`.

In settings.MIDDLEWARE; sees every request on the console listener and counts those under
`/api/`. Labels are the HTTP method and the status code only: never a path, a query or a body.
Tests: tests/console/test_console_admin.py.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from console import metrics

API_PREFIX = "/api/"
VERBS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class ApiRequestMetrics:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if request.path.startswith(API_PREFIX):
            verb = request.method if request.method in VERBS else "OTHER"
            metrics.API_REQUESTS.labels(verb=verb, code=str(response.status_code)).inc()
        return response
