"""Django settings for Nebula. Operational settings live in the single `NEBULA` dict.

`NEBULA` comes from `nebula_site.config` (defaults plus `NEBULA_*` environment variables)
and is validated by the system checks in `nebula_site.checks` (`manage.py check`).
Tests: tests/nebula_site/test_settings_checks.py.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from nebula_site import config
from nebula_site.dburl import database_from_url
from nebula_site.logconfig import logging_config

BASE_DIR = Path(__file__).resolve().parent.parent

# The embedded default is for a developer's machine; production sets DJANGO_SECRET_KEY.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", config.DEV_SECRET_KEY)
DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
ALLOWED_HOSTS = [h for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1").split(",") if h]

NEBULA = config.load()

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's JavaScript and CSS, served by the console itself
    "channels",
    "nebula_site.apps.NebulaSiteConfig",
    "console.apps.ConsoleConfig",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "console.kubelogin.KubeSessionCheck",  # a token login's RBAC, re-asked per page
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "console.middleware.ApiRequestMetrics",
]

ROOT_URLCONF = "nebula_site.urls"
# I7: the console listener bounds every body first (NEBULA LISTENER_LIMITS console_body, 4 MiB);
# an AdmissionReview may carry a Pod up to kube-apiserver's 3 MiB request limit.
DATA_UPLOAD_MAX_MEMORY_SIZE = 4 * 1024 * 1024
ASGI_APPLICATION = "nebula_site.asgi.application"

# The templates (admin pages, the dashboard) live at the top of the checkout and of the image,
# in templates/. An installed package carries them as nebula_site/templates, which in the
# checkout is a symbolic link to ../templates that the build copies (pyproject.toml;
# tests/nebula_site/test_install.py); there is no manage.py beside an installed package.
TEMPLATES_DIR = (
    BASE_DIR / "templates" if (BASE_DIR / "manage.py").is_file() else Path(__file__).resolve().parent / "templates"
)
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [TEMPLATES_DIR],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# In the working folder, like the kubeconfig and state `runvnode` writes: an installed package's
# BASE_DIR is site-packages, no place for a database.
_DB_PATH = Path(os.environ.get("NEBULA_DB_PATH", Path(".nebula", "console.sqlite3").absolute()))
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": _DB_PATH,
        "OPTIONS": {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 5,
        },
        # WAL needs a file: the default in-memory test database would ignore it. One file per
        # test process, so test runs side by side never share one.
        "TEST": {"NAME": str(Path(tempfile.gettempdir()) / f"nebula-test-{os.getpid()}.sqlite3")},
    }
}
# DATABASE_URL (postgres://...) selects PostgreSQL for a console shared by several readers.
if os.environ.get("DATABASE_URL"):
    DATABASES["default"] = database_from_url(os.environ["DATABASE_URL"])
LOGIN_URL = "admin:login"
# Django users (passwords), and Kubernetes tokens at the admin login (docs/console.md).
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "console.kubelogin.KubeTokenBackend",
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# One time format everywhere in the console, 24-hour with seconds, UTC (2026-12-05 07:04:12 UTC):
# Django would otherwise use the locale's (en: "Dec. 5, 2026, 7:04 a.m.").
FORMAT_MODULE_PATH = ["console.formats"]
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Text lines by default, JSON with NEBULA_LOG_FORMAT=json; secrets redacted (nebula_site.logconfig).
# A bad NEBULA_LOG_LEVEL logs at INFO and is reported by nebula.E006, not raised at start-up.
_level_errors: list[str] = []
_LOG_LEVEL = config.log_level(os.environ.get("NEBULA_LOG_LEVEL", "INFO"), _level_errors)
if _level_errors:
    NEBULA.setdefault("_ERRORS", []).extend(_level_errors)
LOGGING = logging_config(os.environ.get("NEBULA_LOG_FORMAT", "text"), _LOG_LEVEL)

# The REST API (/api/...): no anonymous access; token or session; paginated lists (design §7).
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "console.kubeauth.BearerTokenAuthentication",  # `Bearer <token>` from kubectl create token
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "console.api.pagination.BoundedLimitOffsetPagination",
    "PAGE_SIZE": 100,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Nebula API",
    "DESCRIPTION": "Read-only views of the manager's memory (pods, claims, nodes, pools, blocklist); "
    "the one write is DELETE of a blocklist entry, for staff.",
    "VERSION": "v1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "COMPONENT_SPLIT_REQUEST": True,
    # /api/docs/ loads Swagger UI from the console's own static files, never a CDN: it works
    # offline and runs no script from outside the console's origin.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}
