"""URLs of the REST API, mounted at /api/ by nebula_site.urls: the viewsets, the OpenAPI
schema (/api/schema/) and its browsable docs (/api/docs/, a browser without a session goes to the login).
Tests: tests/console/api/test_api.py.
"""

from __future__ import annotations

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from console.api import docs, spend, views

router = DefaultRouter()
router.trailing_slash = "/?"  # both /api/blocklist/b1 and /api/blocklist/b1/: no redirect for a DELETE
router.register("blocklist", views.BlocklistViewSet, basename="blocklist")
router.register("pods", views.PodViewSet, basename="pod")
router.register("claims", views.ClaimViewSet, basename="claim")
router.register("nodes", views.NodeViewSet, basename="node")
router.register("pools", views.PoolViewSet, basename="pool")

urlpatterns = [
    path("schema/", docs.SchemaView.as_view(), name="schema"),
    path("docs/", docs.SwaggerDocsView.as_view(url_name="schema"), name="api-docs"),
    path("spend/", spend.SpendView.as_view(), name="spend"),
    path("", include(router.urls)),
]
