"""`DATABASE_URL` (postgres://user:password@host:port/name) to a Django DATABASES entry.

Read by `nebula_site.settings` at start-up; the embedded default (SQLite in WAL mode) applies
when the variable is unset. Never logs or echoes the URL: it carries a password.
Tests: tests/console/test_console_units.py.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

SCHEMES = {"postgres": "django.db.backends.postgresql", "postgresql": "django.db.backends.postgresql"}


def database_from_url(url: str) -> dict[str, Any]:
    """A DATABASES["default"] dict; ValueError (without the URL in it) for what it cannot use."""
    parts = urlsplit(url)
    engine = SCHEMES.get(parts.scheme)
    if engine is None:
        raise ValueError(f"DATABASE_URL: scheme {parts.scheme!r} is not supported (use postgres://)")
    name = unquote(parts.path.lstrip("/"))
    if not name:
        raise ValueError("DATABASE_URL: no database name after the host")
    return {
        "ENGINE": engine,
        "NAME": name,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        "OPTIONS": dict(parse_qsl(parts.query)),
        "CONN_MAX_AGE": 60,
    }
