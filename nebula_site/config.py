"""The `NEBULA` settings dict: its defaults and its `NEBULA_*` environment overrides.

Read by `settings.py` once at import; validated by `checks.py`. Never imports Django, so
the defaults can be read (and tested) without a configured project.
Tests: tests/nebula_site/test_settings_checks.py.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from kube.operations import OperationLimits

DEFAULT_STATE_DIR = ".nebula/state"

# The secret key of a developer's machine when DJANGO_SECRET_KEY is unset. It is public (it
# is in this file), so production refuses it (nebula.E013) and runvnode warns when it is used.
DEV_SECRET_KEY = "nebula-dev-only-insecure-key"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

# Providers that exist out of the box, named by alias with an import path (the shape of
# Django's CACHES). `NEBULA_PROVIDERS` (JSON) or a providers file adds or replaces aliases.
BUILTIN_PROVIDERS: dict[str, dict[str, Any]] = {
    "local": {"BACKEND": "providers.local.LocalProvider", "OPTIONS": {}},
    "fake": {"BACKEND": "providers.fake.FakeProvider", "OPTIONS": {}},
}

DEFAULTS: dict[str, Any] = {
    # Where the local provider keeps its instances' folders, logs and exit codes.
    "STATE_DIR": DEFAULT_STATE_DIR,
    # alias -> {"BACKEND": "dotted.path.Class", "OPTIONS": {...}}
    "PROVIDERS": BUILTIN_PROVIDERS,
    # Aliases `runvnode` starts when no --provider is given.
    "ENABLED_PROVIDERS": ["local"],
    # host:port; an empty host means every interface.
    "KUBELET_ADDR": ":10250",
    "CONSOLE_ADDR": "127.0.0.1:8000",
    # The kubelet listener's serving certificate: "memory" (made at every start), "files"
    # (KUBELET_CERT and KUBELET_KEY, PEM, reloaded on change) or "csr" (the CSR API, signer
    # kubernetes.io/kubelet-serving; someone must approve). KUBELET_CERT set means "files".
    "KUBELET_CERT_SOURCE": "memory",
    "KUBELET_CERT": "",
    "KUBELET_KEY": "",
    # Who may use the kubelet API (docs/kubelet-api.md#authentication): requests without a client
    # certificate or token are refused unless anonymous auth is on; bearer tokens are checked
    # with TokenReview; "Webhook" authorises with SubjectAccessReview, "AlwaysAllow" lets in
    # everyone authenticated.
    "KUBELET_ANONYMOUS_AUTH": False,
    "KUBELET_TOKEN_AUTH": True,
    "KUBELET_AUTHORIZATION_MODE": "Webhook",
    # The metrics listener (`/metrics`, plain HTTP unless --metrics-cert); empty: none. Loopback
    # by default; the Deployment passes --metrics-addr=:9090.
    "METRICS_ADDR": "127.0.0.1:9090",
    # The address the virtual nodes publish; empty means $POD_IP, else logs/exec unsupported.
    "NODE_IP": "",
    # A DNS name that resolves to the kubelet listener (e.g. a Service's name the API server can
    # resolve), published as the nodes' InternalDNS address; empty: none.
    "NODE_DNS_NAME": "",
    # Who owns this manager's instances (a DNS label); empty: the kube-system Namespace's UID.
    "CLUSTER_NAME": "",
    # A crashed container's restart back-off, as the kubelet's: the first restart is at once,
    # then INITIAL seconds, doubling to MAX; reset once a run lasted RESET seconds.
    "RESTART_BACKOFF_INITIAL": 10.0,
    "RESTART_BACKOFF_MAX": 300.0,
    "RESTART_BACKOFF_RESET": 600.0,
    # Probes run by the manager at once, per provider (a bound: probing thousands of Pods
    # never starves the poll loop; more due probes wait their turn).
    "PROBE_WORKERS": 16,
    # I7: bytes of ephemeral containers' output (`kubectl logs -c <debug container>`) kept by
    # the whole process; past it the output of the one that ended first is dropped, with an Event.
    "EPHEMERAL_OUTPUT_BUDGET": 64 * 1024 * 1024,
    # Seconds between publications of the NodePools' moving spend figures (docs/cost.md).
    "SPEND_INTERVAL": 60.0,
    # Seconds between provider.list() calls when the provider does not say otherwise.
    "POLL_INTERVAL": 15.0,
    # "text" or "json".
    "LOG_FORMAT": "text",
    # How long opted-in Pods stay on a node that is NotReady (its provider's API does not
    # answer) or unreachable, before the cluster evicts them and their instances are
    # terminated. None: for as long as the outage lasts (the instances usually run on).
    "OUTAGE_TOLERATION_SECONDS": None,
    # I7 bounds of the kubelet and console listeners, over vnode.kubelet.limits.Limits'
    # defaults: field name -> number (docs/settings.md#listener-limits).
    "LISTENER_LIMITS": {},
    # Slow provider calls (provision, terminate, a restart or replacement), per provider: how
    # many run at once and how fast they may start, as a cloud's API quota is published
    # (docs/settings.md#provider-operations). Keys: concurrency, rate (per second), burst.
    # A provider's own entry may override them with an "OPERATIONS" mapping.
    "PROVIDER_OPERATIONS": {},
    # Share the providers out across the replicas, one node Lease each (docs/operations.md
    # "Sharing providers across replicas"); off: the leader runs every provider.
    "SHARE_PROVIDERS": False,
}


def _coerce(key: str, raw: str, default: Any) -> Any:
    """Parse one environment override into the type of its default.

    Raises ValueError naming the variable; the raw value is quoted only for scalars, never
    for JSON (`NEBULA_PROVIDERS` may carry a provider's credentials in its OPTIONS).
    """
    name = f"NEBULA_{key}"
    if default is None:  # an optional number of seconds: "none" (or nothing) for none
        if raw.strip().lower() in {"", "none"}:
            return None
        return _number(name, raw, int, "whole seconds or 'none'")
    if isinstance(default, bool):
        lowered = raw.strip().lower()
        if lowered in {"1", "true", "yes", "on"}:
            return True
        if lowered in {"0", "false", "no", "off", ""}:
            return False
        raise ValueError(f"{name}={raw!r} is not a boolean")
    if isinstance(default, float):
        return _number(name, raw, float, "a number")
    if isinstance(default, int):
        return _number(name, raw, int, "a whole number")
    if isinstance(default, (dict, list)):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{name} is not valid JSON (line {exc.lineno}, column {exc.colno})") from None
        if not isinstance(value, type(default)):
            raise ValueError(f"{name} must be a JSON {'object' if isinstance(default, dict) else 'array'}")
        return value
    return raw


def _number(name: str, raw: str, kind: type[int] | type[float], what: str) -> int | float:
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not {what}") from None


def load(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Return the NEBULA dict: defaults, then `NEBULA_<KEY>` environment overrides.

    A malformed override is kept as the raw string under its key and reported by the
    system check `nebula.E006`, so `manage.py check` names it instead of a traceback.
    """
    env = os.environ if environ is None else environ
    result = copy.deepcopy(DEFAULTS)
    for key, default in DEFAULTS.items():
        raw = env.get(f"NEBULA_{key}")
        if raw is None:
            continue
        try:
            value = _coerce(key, raw, default)
        except ValueError as exc:
            result.setdefault("_ERRORS", []).append(f"{exc}")
            continue
        if key == "PROVIDERS":
            merged = dict(BUILTIN_PROVIDERS)
            merged.update(value)
            value = merged
        result[key] = value
    return result


def operation_limits(conf: Mapping[str, Any], aliases: Iterable[str]) -> dict[str, OperationLimits]:
    """Each alias's limits: its PROVIDERS entry's OPERATIONS over PROVIDER_OPERATIONS over the
    defaults. ValueError names the setting (and the alias) at fault."""
    shared = conf.get("PROVIDER_OPERATIONS", {})
    if not isinstance(shared, Mapping):
        raise ValueError("NEBULA['PROVIDER_OPERATIONS'] must map concurrency, rate and burst to numbers")
    try:
        base = OperationLimits.from_mapping(shared)
    except ValueError as exc:
        raise ValueError(f"NEBULA['PROVIDER_OPERATIONS']: {exc}") from None
    result: dict[str, OperationLimits] = {}
    providers = conf.get("PROVIDERS", {})
    for alias in aliases:
        entry = providers.get(alias) if isinstance(providers, Mapping) else None
        own = entry.get("OPERATIONS", {}) if isinstance(entry, Mapping) else {}
        if not isinstance(own, Mapping):
            raise ValueError(f"NEBULA['PROVIDERS'][{alias!r}]['OPERATIONS'] must map concurrency, rate and burst")
        try:
            result[alias] = OperationLimits.from_mapping(own, base)
        except ValueError as exc:
            raise ValueError(f"NEBULA['PROVIDERS'][{alias!r}]['OPERATIONS']: {exc}") from None
    return result


def log_level(raw: str, errors: list[str]) -> str:
    """`NEBULA_LOG_LEVEL` as a level name; INFO (and a message in `errors`) when it is none."""
    level = raw.strip().upper()
    if level in LOG_LEVELS:
        return level
    errors.append(f"NEBULA_LOG_LEVEL={raw!r} is not one of {', '.join(LOG_LEVELS)}")
    return "INFO"


def parse_address(text: str) -> tuple[str, int]:
    """Split `host:port` (`:port` and `[v6]:port` too) and check both halves.

    Raises ValueError with a message a person can act on.
    """
    import ipaddress

    if not isinstance(text, str) or ":" not in text:
        raise ValueError(f"{text!r} is not host:port")
    host, _, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{text!r}: {host!r} in brackets is not an IPv6 address") from None
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{text!r}: port must be a number from 0 to 65535")
    if host and not _is_ip_or_hostname(host):
        raise ValueError(f"{text!r}: {host!r} is neither an IP address nor a host name")
    return host, int(port_text)


def _is_ip_or_hostname(host: str) -> bool:
    import ipaddress
    import re

    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    label = r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)"
    return re.fullmatch(rf"{label}(\.{label})*", host) is not None


def validate_dns_name(text: str) -> None:
    """Raise ValueError unless `text` is a DNS name as Kubernetes writes one (an RFC 1123
    subdomain: lower-case labels of letters, digits and `-`, dot-separated, 253 characters
    at most), and not an IP address."""
    import ipaddress
    import re

    if not isinstance(text, str) or not text:
        raise ValueError(f"{text!r} is not a DNS name")
    try:
        ipaddress.ip_address(text)
    except ValueError:
        pass
    else:
        raise ValueError(f"{text!r} is an IP address, not a DNS name (use --node-ip / NODE_IP)")
    label = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
    if len(text) > 253 or re.fullmatch(rf"{label}(\.{label})*", text) is None:
        raise ValueError(
            f"{text!r} is not a DNS name: lower-case letters, digits, '-' and '.', "
            "each label 1-63 characters starting and ending with a letter or digit, 253 in all"
        )
