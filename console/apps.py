"""App config for the console: the mirror's models, the admin, the dashboard and metrics.

Tests: tests/console/test_console_admin.py.
"""

# mypy: disallow-subclassing-any=False

from __future__ import annotations

from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Nebula mirror"
    default_auto_field = "django.db.models.BigAutoField"
