"""Build providers from settings: alias -> {"BACKEND": "dotted.Class", "OPTIONS": {...}}.

Called by the management commands (which read `NEBULA['PROVIDERS']`) and by the system
checks. Knows no concrete provider: backends are imported by path, lazily; one whose cloud SDK
is missing is a `MissingSdkError` naming the pip extra (`providers.extras`).
Tests: tests/providers/test_registry.py.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from typing import Any, cast

from providers import base, extras
from providers.owner import Owner


class ConfigurationError(Exception):
    """A provider entry in the settings cannot be used as written."""


class BackendImportError(ConfigurationError):
    """The BACKEND path does not import."""


class MissingSdkError(BackendImportError):
    """The BACKEND's package needs a cloud SDK that is not installed; the message names the
    pip extra that installs it (`providers.extras`)."""


def import_backend(path: str) -> type:
    """The class at the dotted `path`, or BackendImportError saying why not."""
    module_name, _, class_name = path.rpartition(".")
    if not module_name:
        raise BackendImportError(f"BACKEND {path!r} is not a dotted path to a class")
    try:
        module = importlib.import_module(module_name)
    except extras.MissingExtraError as exc:
        raise MissingSdkError(f"BACKEND {path!r}: {exc}") from None  # the one line is the whole story
    except ImportError as exc:
        raise BackendImportError(f"BACKEND {path!r} cannot be imported: {exc}") from exc
    backend = getattr(module, class_name, None)
    if not isinstance(backend, type):
        raise BackendImportError(f"BACKEND {path!r}: {module_name} has no class {class_name!r}")
    return backend


def validate_entry(alias: str, entry: Any) -> type:
    """Check one settings entry; return its backend class."""
    if not isinstance(alias, str) or not alias or alias != alias.lower() or not alias.replace("-", "").isalnum():
        raise ConfigurationError(f"provider alias {alias!r} must be a lower-case name (letters, digits, '-')")
    if not isinstance(entry, Mapping) or "BACKEND" not in entry:
        raise ConfigurationError(f"provider {alias!r} needs a mapping with a 'BACKEND' dotted path")
    options = entry.get("OPTIONS", {})
    if not isinstance(options, Mapping):
        raise ConfigurationError(f"provider {alias!r}: OPTIONS must be a mapping")
    try:
        return import_backend(str(entry["BACKEND"]))
    except MissingSdkError as exc:
        raise MissingSdkError(f"provider {alias!r}: {exc}") from None


def build_provider(alias: str, entry: Mapping[str, Any], *, cluster: str) -> base.Provider:
    """One provider named `alias` (the node becomes `nebula-<alias>`), owning only the
    instances of `Owner(cluster, alias)`."""
    backend = validate_entry(alias, entry)
    try:
        owner = Owner(cluster, alias)
        return cast(base.Provider, backend(alias, dict(entry.get("OPTIONS", {})), owner=owner))
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"provider {alias!r}: {exc}") from exc


def build_providers(
    config: Mapping[str, Mapping[str, Any]], aliases: Iterable[str], *, cluster: str
) -> dict[str, base.Provider]:
    """The providers for `aliases`, in order, owned by `cluster`; ConfigurationError for an
    unknown alias."""
    result: dict[str, base.Provider] = {}
    for alias in aliases:
        if alias not in config:
            known = ", ".join(sorted(config)) or "none"
            raise ConfigurationError(f"unknown provider alias {alias!r} (known: {known})")
        result[alias] = build_provider(alias, config[alias], cluster=cluster)
    return result
