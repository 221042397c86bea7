"""nebula_site.production, as the production overlay selects it: Django's deploy checks pass
with the environment the manifests set, and it refuses to start without its secrets."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

from tests.support.deploy_manifests import ROOT, find, render


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    settings = find(render("production"), "ConfigMap", "nebula-settings")["data"]
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "NEBULA_"))}
    environ.update(settings, NEBULA_DB_PATH=os.devnull, **env)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120
    )


def test_the_overlay_selects_the_production_settings() -> None:
    for overlay in ("dev", "production"):
        settings = find(render(overlay), "ConfigMap", "nebula-settings")["data"]
        assert settings["DJANGO_SETTINGS_MODULE"] == "nebula_site.production"


def test_the_deploy_checks_pass_with_a_real_key_and_key_fallbacks() -> None:
    key, old = secrets.token_urlsafe(50), secrets.token_urlsafe(50)
    result = manage(
        "check", "--deploy", "--fail-level", "WARNING", DJANGO_SECRET_KEY=key, DJANGO_SECRET_KEY_FALLBACKS=old
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_a_weak_key_fails_the_deploy_checks() -> None:
    result = manage("check", "--deploy", "--fail-level", "WARNING", DJANGO_SECRET_KEY="short")
    assert result.returncode != 0
    assert "security.W009" in result.stderr


def test_without_a_secret_key_it_refuses_to_start_and_names_the_variable() -> None:
    result = manage("check")
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in result.stderr
