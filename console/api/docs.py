"""The API's browsable docs (/api/docs/, Swagger UI) for a person: a browser without a session
is sent to the login page and back (`?next=/api/docs/`), as the dashboard does; an API client
(no `text/html` in its Accept) still gets 401, as every endpoint answers it.

The schema (/api/schema/) and the docs are read as the console is: any logged-in Django user,
or a Kubernetes identity RBAC lets `get` nebula.io/console (`nebula-console-viewer`), never
any authenticated identity. Mounted by `console.api.urls`.
Tests: tests/console/api/test_api_docs_login.py, tests/console/test_kube_logins.py.
"""

# mypy: disallow-subclassing-any=False

from __future__ import annotations

from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponse
from django.urls import reverse
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response

from console import kubeauth
from console.api.views import NebulaAccess
from kube.reviews import Access

CONSOLE_READ = kubeauth.read_access("console")


def wants_html(request: Request) -> bool:
    """A browser's navigation asks for text/html; API clients ask for JSON or anything."""
    return "text/html" in request.headers.get("Accept", "")


class SchemaView(SpectacularAPIView):
    """The OpenAPI schema, for those who may read the console."""

    permission_classes = [NebulaAccess]

    def access(self) -> Access:
        return CONSOLE_READ


class SwaggerDocsView(SpectacularSwaggerView):
    permission_classes = [NebulaAccess]

    def access(self) -> Access:
        return CONSOLE_READ

    def options(self, request: Request, *args: Any, **kwargs: Any) -> HttpResponse:
        """The methods allowed, and no body, as Django's own views answer OPTIONS: this view
        renders only an HTML template, and DRF's metadata has none (it was a 500)."""
        response = HttpResponse(status=200)
        response.headers["Allow"] = ", ".join(self.allowed_methods)
        response.headers["Content-Length"] = "0"
        return response

    def handle_exception(self, exc: Exception) -> Any:
        if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed) and wants_html(self.request):
            return redirect_to_login(self.request.get_full_path(), login_url=reverse("admin:login"))
        response: Response = super().handle_exception(exc)
        return response
