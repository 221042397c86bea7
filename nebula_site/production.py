"""Production settings: the base settings with the console locked down, for the deploy/ manifests.

Selected by `DJANGO_SETTINGS_MODULE=nebula_site.production` (the `nebula-settings` ConfigMap in
deploy/base). Reads the secret key and allowed hosts from the environment the Deployment sets
and refuses to start without them; never carries a default secret. `manage.py check --deploy`
passes with it (tests/deploy/test_production_settings.py).
"""

from __future__ import annotations

import os
import re

from django.core.exceptions import ImproperlyConfigured

from nebula_site.settings import *  # noqa: F403 - these settings extend the base ones
from nebula_site.settings import NEBULA

# Turns on the checks that make a weak or public key and ALLOWED_HOSTS='*' errors
# (nebula.E013-E015 in nebula_site.checks): `runvnode` refuses to start with them.
NEBULA_PRODUCTION = True


def _required(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        # Names the variable, never a value: this message reaches the Pod's log.
        raise ImproperlyConfigured(f"{name} must be set for nebula_site.production (docs/deploy.md)")
    return value


def _words(text: str) -> list[str]:
    """Comma- or whitespace-separated values (Django's generated keys contain neither)."""
    return [word for word in re.split(r"[,\s]+", text) if word]


def _seconds(name: str, default: int) -> int:
    """A whole number of seconds from the environment; a bad value is reported by nebula.E006."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        NEBULA.setdefault("_ERRORS", []).append(f"{name}={raw!r} is not a whole number of seconds")
        return default


DEBUG = False
SECRET_KEY = _required("DJANGO_SECRET_KEY")
# Keys that still verify old sessions and signed values during a rotation (docs/deploy.md).
SECRET_KEY_FALLBACKS = _words(os.environ.get("DJANGO_SECRET_KEY_FALLBACKS", ""))
ALLOWED_HOSTS = _words(_required("DJANGO_ALLOWED_HOSTS"))

# The console is served over TLS (runvnode --console-tls), so every request is already HTTPS
# and the redirect never fires for the webhook or the probes (their scheme is HTTPS).
SECURE_SSL_REDIRECT = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_HSTS_SECONDS = _seconds("DJANGO_HSTS_SECONDS", 365 * 24 * 3600)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

# security.W021 asks for HSTS preloading: that is a commitment the owner of the console's
# domain makes by submitting it to browser vendors, which no manifest can make for them.
SILENCED_SYSTEM_CHECKS = ["security.W021"]
