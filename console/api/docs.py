"""The API's browsable docs (/api/docs/, Swagger UI) for a person: a browser without a session
is sent to the login page and back (`?next=/api/docs/`), as the dashboard does; an API client
(no `text/html` in its Accept) still gets 401, as every endpoint answers it.

Mounted by `console.api.urls`. Decides only where an unauthenticated request goes; the
permission itself is drf-spectacular's SERVE_PERMISSIONS.
Tests: tests/console/api/test_api_docs_login.py::test_a_browser_without_a_session_is_sent_to_the_login.
"""

# mypy: disallow-subclassing-any=False

from __future__ import annotations

from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.urls import reverse
from drf_spectacular.views import SpectacularSwaggerView
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response


def wants_html(request: Request) -> bool:
    """A browser's navigation asks for text/html; API clients ask for JSON or anything."""
    return "text/html" in request.headers.get("Accept", "")


class SwaggerDocsView(SpectacularSwaggerView):
    def handle_exception(self, exc: Exception) -> Any:
        if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed) and wants_html(self.request):
            return redirect_to_login(self.request.get_full_path(), login_url=reverse("admin:login"))
        response: Response = super().handle_exception(exc)
        return response
