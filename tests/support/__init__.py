"""What the tests share: fixtures (registered once by `tests/conftest.py`), object factories,
the one `wait_for`, TLS and SPDY clients, and the rigs of each area's end-to-end tests.

Imported by tests only (`from tests.support import factories`); nothing here is a test, and
nothing here imports a test module or a conftest. Product code never imports it.
"""
