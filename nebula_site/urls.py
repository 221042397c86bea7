"""The console listener's URL map. The kubelet listener has its own (design I5).

Tests: tests/vnode/kubelet/test_runvnode_listeners.py.
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import include, path

from nebula_site import webhooks


def healthz(request: HttpRequest) -> HttpResponse:
    """Process liveness: answers while the process serves HTTP."""
    return HttpResponse("ok", content_type="text/plain")


urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", healthz),
    path("webhooks/pods", webhooks.pods, name="webhook-pods"),
    path("api/", include("console.api.urls")),
    path("", include("console.urls")),  # the dashboard at /, /readyz
]
