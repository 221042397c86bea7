"""nebula_site.production, as the production overlay selects it: Django's deploy checks pass
with the environment the manifests set, and it refuses to start without its secrets."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

import pytest

from tests.support.deploy.manifests import ROOT, find, render


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    settings = find(render("production"), "ConfigMap", "nebula-settings")["data"]
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "NEBULA_"))}
    environ.update(settings, NEBULA_DB_PATH=os.devnull, **env)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("overlay", ["dev", "production"])
def test_the_overlay_selects_the_production_settings(overlay: str) -> None:
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


def test_the_public_development_key_is_an_error_for_every_command_not_only_check_deploy() -> None:
    result = manage("check", DJANGO_SECRET_KEY="nebula-dev-only-insecure-key")
    assert result.returncode != 0
    assert "nebula.E013" in result.stderr and "SECRET_KEY is the public development key" in result.stderr


@pytest.mark.parametrize(
    "env",
    [
        {"DJANGO_SECRET_KEY": "k3y-too-short"},
        {"DJANGO_SECRET_KEY": "ab" * 40},
        {"DJANGO_SECRET_KEY": secrets.token_urlsafe(50), "DJANGO_SECRET_KEY_FALLBACKS": "old-short-key"},
    ],
    ids=["short", "repetitive", "short-fallback"],
)
def test_a_short_or_repetitive_key_or_fallback_is_an_error_naming_the_setting_not_the_key(env: dict[str, str]) -> None:
    result = manage("check", **env)
    assert result.returncode != 0, env
    assert "nebula.E014" in result.stderr
    for value in env.values():
        assert value not in result.stdout + result.stderr


def test_allowed_hosts_star_is_an_error() -> None:
    result = manage("check", DJANGO_SECRET_KEY=secrets.token_urlsafe(50), DJANGO_ALLOWED_HOSTS="nebula-console,*")
    assert result.returncode != 0
    assert "nebula.E015" in result.stderr


def test_a_malformed_hsts_seconds_is_a_check_message_not_a_value_error() -> None:
    result = manage("check", DJANGO_SECRET_KEY=secrets.token_urlsafe(50), DJANGO_HSTS_SECONDS="a year")
    assert result.returncode != 0
    assert "nebula.E006" in result.stderr and "DJANGO_HSTS_SECONDS='a year'" in result.stderr
    assert "Traceback" not in result.stderr


def test_runvnode_refuses_to_start_with_the_development_key_before_listening() -> None:
    result = manage("runvnode", "--console-addr", "127.0.0.1:0", DJANGO_SECRET_KEY="nebula-dev-only-insecure-key")
    assert result.returncode != 0
    assert "nebula.E013" in result.stderr and "Traceback" not in result.stderr
    assert "kubelet API on port" not in result.stdout
