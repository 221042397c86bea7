"""System checks for the NEBULA settings (`manage.py check`), with stable ids.

nebula.E001 unknown provider alias      nebula.E005 malformed provider entry
nebula.E002 unimportable backend        nebula.E006 malformed NEBULA_* override
nebula.E003 bad listen address / IP     nebula.E007 bad LOG_FORMAT
nebula.E004 bad POLL_INTERVAL           nebula.E008 bad OUTAGE_TOLERATION_SECONDS
nebula.E009 bad CLUSTER_NAME            nebula.E010 bad RESTART_BACKOFF_*
nebula.E011 bad NODE_DNS_NAME           nebula.E012 bad PROBE_WORKERS
nebula.E017 bad LISTENER_LIMITS          nebula.E018 bad PROVIDER_OPERATIONS (or a provider's OPERATIONS)
nebula.E019 SHARE_PROVIDERS not a boolean   nebula.E020 bad SPEND_INTERVAL
nebula.E021 bad EPHEMERAL_OUTPUT_BUDGET
Under nebula_site.production (its NEBULA_PRODUCTION marker), always, not only with --deploy:
nebula.E013 the public development SECRET_KEY   nebula.E014 a weak SECRET_KEY (or fallback)
nebula.E015 '*' in ALLOWED_HOSTS
nebula.E016 bad KUBELET_AUTHORIZATION_MODE (or KUBELET_*_AUTH not a boolean)
Tests: tests/nebula_site/test_settings_checks.py.
"""

# mypy: disallow-untyped-decorators=False

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register

from nebula_site.config import DEV_SECRET_KEY, operation_limits, parse_address, validate_dns_name
from providers import registry
from providers.owner import Owner
from vnode.ephemeral.budget import DEFAULT_LIMIT, check_limit
from vnode.kubelet.limits import Limits


@register("nebula")
def check_nebula_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    conf: Mapping[str, Any] = getattr(settings, "NEBULA", {})
    errors: list[CheckMessage] = []
    for message in conf.get("_ERRORS", []):
        errors.append(Error(message, hint="Fix the NEBULA_* environment variable.", id="nebula.E006"))
    providers = conf.get("PROVIDERS", {})
    errors += _check_providers(providers)
    for alias in conf.get("ENABLED_PROVIDERS", []):
        if alias not in providers:
            errors.append(
                Error(
                    f"ENABLED_PROVIDERS names {alias!r}, which is not in NEBULA['PROVIDERS']",
                    hint=f"Known aliases: {', '.join(sorted(providers)) or 'none'}.",
                    id="nebula.E001",
                )
            )
    for key in ("KUBELET_ADDR", "CONSOLE_ADDR", "METRICS_ADDR"):
        if key == "METRICS_ADDR" and conf.get(key) == "":
            continue  # no metrics listener
        try:
            parse_address(conf.get(key, ""))
        except ValueError as exc:
            errors.append(Error(f"NEBULA['{key}']: {exc}", hint="Use host:port, e.g. :10250.", id="nebula.E003"))
    node_ip = conf.get("NODE_IP", "")
    if node_ip:
        try:
            ipaddress.ip_address(node_ip)
        except ValueError:
            errors.append(Error(f"NEBULA['NODE_IP']={node_ip!r} is not an IP address", id="nebula.E003"))
    dns_name = conf.get("NODE_DNS_NAME", "")
    if dns_name:
        try:
            validate_dns_name(dns_name)
        except ValueError as exc:
            errors.append(Error(f"NEBULA['NODE_DNS_NAME']: {exc}", id="nebula.E011"))
    interval = conf.get("POLL_INTERVAL")
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval <= 0:
        message = f"NEBULA['POLL_INTERVAL']={interval!r} must be a positive number of seconds"
        errors.append(Error(message, id="nebula.E004"))
    if conf.get("LOG_FORMAT") not in ("text", "json"):
        message = f"NEBULA['LOG_FORMAT']={conf.get('LOG_FORMAT')!r} must be 'text' or 'json'"
        errors.append(Error(message, id="nebula.E007"))
    outage = conf.get("OUTAGE_TOLERATION_SECONDS")
    if outage is not None and (isinstance(outage, bool) or not isinstance(outage, int) or outage < 0):
        message = f"NEBULA['OUTAGE_TOLERATION_SECONDS']={outage!r} must be None or whole seconds >= 0"
        errors.append(Error(message, id="nebula.E008"))
    cluster = conf.get("CLUSTER_NAME", "")
    if cluster:
        try:
            Owner(str(cluster), "check")
        except ValueError as exc:
            errors.append(Error(f"NEBULA['CLUSTER_NAME']: {exc}", id="nebula.E009"))
    backoff = [conf.get(f"RESTART_BACKOFF_{k}") for k in ("INITIAL", "MAX", "RESET")]
    seconds = [float(v) for v in backoff if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0]
    if len(seconds) != 3 or seconds[0] > seconds[1]:
        message = f"NEBULA['RESTART_BACKOFF_INITIAL', '_MAX', '_RESET']={backoff!r}: positive seconds, INITIAL <= MAX"
        errors.append(Error(message, id="nebula.E010"))
    workers = conf.get("PROBE_WORKERS")
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 1024:
        message = f"NEBULA['PROBE_WORKERS']={workers!r} must be a whole number from 1 to 1024"
        errors.append(Error(message, id="nebula.E012"))
    spend = conf.get("SPEND_INTERVAL", 60.0)
    if isinstance(spend, bool) or not isinstance(spend, (int, float)) or not 1 <= spend <= 3600:
        message = f"NEBULA['SPEND_INTERVAL']={spend!r} must be seconds from 1 to 3600"
        errors.append(Error(message, id="nebula.E020"))
    try:
        check_limit(conf.get("EPHEMERAL_OUTPUT_BUDGET", DEFAULT_LIMIT))
    except ValueError as exc:
        errors.append(Error(f"NEBULA['EPHEMERAL_OUTPUT_BUDGET']: {exc}", id="nebula.E021"))
    share = conf.get("SHARE_PROVIDERS", False)
    if not isinstance(share, bool):
        errors.append(Error(f"NEBULA['SHARE_PROVIDERS']={share!r} must be true or false", id="nebula.E019"))
    limits = conf.get("LISTENER_LIMITS")
    try:
        if not isinstance(limits, Mapping):
            raise ValueError("must map limit names to numbers")
        Limits.from_mapping(limits)
    except (ValueError, TypeError) as exc:
        errors.append(Error(f"NEBULA['LISTENER_LIMITS']: {exc}", id="nebula.E017"))
    try:
        operation_limits(conf, providers if isinstance(providers, Mapping) else [])
    except ValueError as exc:
        errors.append(Error(str(exc), hint="Keys: concurrency, rate, burst (docs/settings.md).", id="nebula.E018"))
    errors.extend(_check_kubelet_auth(conf))
    return errors


def _check_kubelet_auth(conf: Mapping[str, Any]) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    mode = conf.get("KUBELET_AUTHORIZATION_MODE")
    if mode not in ("Webhook", "AlwaysAllow"):
        errors.append(Error(f"NEBULA['KUBELET_AUTHORIZATION_MODE']={mode!r}: Webhook or AlwaysAllow", id="nebula.E016"))
    for key in ("KUBELET_ANONYMOUS_AUTH", "KUBELET_TOKEN_AUTH"):
        if not isinstance(conf.get(key), bool):
            errors.append(Error(f"NEBULA['{key}']={conf.get(key)!r} must be true or false", id="nebula.E016"))
    return errors


def _check_providers(providers: Any) -> list[CheckMessage]:
    if not isinstance(providers, Mapping):
        return [Error("NEBULA['PROVIDERS'] must map aliases to {'BACKEND': ..., 'OPTIONS': {...}}", id="nebula.E005")]
    errors: list[CheckMessage] = []
    for alias, entry in providers.items():
        try:
            registry.validate_entry(alias, entry)
        except registry.MissingSdkError as exc:  # the message names the extra to install
            errors.append(Error(str(exc), hint="Install the extra it names, or remove the provider.", id="nebula.E002"))
        except registry.BackendImportError as exc:
            hint = "Check the dotted path and that its package is installed."
            errors.append(Error(str(exc), hint=hint, id="nebula.E002"))
        except registry.ConfigurationError as exc:
            errors.append(Error(str(exc), id="nebula.E005"))
    return errors


# Django's own criteria for a weak key (security.W009), which production makes an error.
SECRET_KEY_MIN_LENGTH = 50
SECRET_KEY_MIN_UNIQUE_CHARACTERS = 5


@register("nebula", "security")
def check_production_secrets(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Errors, so `runvnode` refuses to start, not warnings that `check --deploy` alone shows.
    Messages name the setting, never its value."""
    if not getattr(settings, "NEBULA_PRODUCTION", False):
        return []
    errors: list[CheckMessage] = []
    keys = [("SECRET_KEY", settings.SECRET_KEY)]
    keys += [(f"SECRET_KEY_FALLBACKS[{i}]", k) for i, k in enumerate(getattr(settings, "SECRET_KEY_FALLBACKS", []))]
    for name, key in keys:
        hint = "Set DJANGO_SECRET_KEY from python3 -c 'import secrets; print(secrets.token_urlsafe(50))'."
        if key == DEV_SECRET_KEY:
            errors.append(Error(f"{name} is the public development key", hint=hint, id="nebula.E013"))
        elif weak_secret_key(str(key)):
            message = (
                f"{name} is weak: fewer than {SECRET_KEY_MIN_LENGTH} characters or "
                f"{SECRET_KEY_MIN_UNIQUE_CHARACTERS} different ones, or a Django 'django-insecure-' key"
            )
            errors.append(Error(message, hint=hint, id="nebula.E014"))
    if "*" in settings.ALLOWED_HOSTS:
        hint = "List the console's host names in DJANGO_ALLOWED_HOSTS (docs/deploy.md)."
        errors.append(Error("ALLOWED_HOSTS admits every host ('*')", hint=hint, id="nebula.E015"))
    return errors


def weak_secret_key(key: str) -> bool:
    return (
        len(key) < SECRET_KEY_MIN_LENGTH
        or len(set(key)) < SECRET_KEY_MIN_UNIQUE_CHARACTERS
        or key.startswith("django-insecure-")
    )
