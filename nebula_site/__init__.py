"""The Django project: settings, URL map, ASGI application and the management commands.

Owns the wiring between Django and Nebula's packages. The management commands are the
only code that builds providers, controllers and the embedded cluster together.
Tests: tests/nebula_site/test_settings_checks.py.
"""
