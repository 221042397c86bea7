"""App config for the project package: registers the NEBULA system checks.

Tests: tests/nebula_site/test_settings_checks.py.
"""

from __future__ import annotations

from django.apps import AppConfig


class NebulaSiteConfig(AppConfig):
    name = "nebula_site"
    verbose_name = "Nebula"

    def ready(self) -> None:
        from nebula_site import checks  # noqa: F401  (registers the checks)
