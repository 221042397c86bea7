"""The console's routes, included at the root of the console listener by nebula_site.urls.
`/metrics` is not one of them: it has its own listener (`console.exporter`).

Tests: tests/console/test_console_browser.py.
"""

from __future__ import annotations

from django.urls import path

from console import views

urlpatterns = [
    path("", views.index, name="console-dashboard"),
    path("dashboard/panels", views.panels, name="console-panels"),
    path("spend/", views.spend, name="console-spend"),
    path("readyz", views.readyz, name="console-readyz"),
]
