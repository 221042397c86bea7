"""The Modal provider's options (the `OPTIONS` of its settings entry), parsed and checked.

Called by `ModalProvider.__init__`: parsing only, no I/O (the credential files are read on
first use, by `providers.modal.sdk`). Unknown keys are errors so typos surface at start-up.
The token is never an option: it comes from `credentials_dir` (a mounted Secret) or from
the environment variables MODAL_TOKEN_ID / MODAL_TOKEN_SECRET.
Tests: tests/providers/modal/test_modal_provider_options.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_SERVER_URL = "https://api.modal.com"
DEFAULT_APP = "nebula"
MAX_LIFETIME = 86400  # seconds: Modal's longest sandbox timeout (24 h)
MAX_CREATE_WAIT = 300.0  # seconds: provision must return well within the vnode's provisioningTimeout
KNOWN_KEYS = frozenset(
    {
        "app",
        "environment",
        "server_url",
        "credentials_dir",
        "poll_interval",
        "regions",
        "max_lifetime",
        "log_poll_interval",
        "connect_timeout",
        "create_wait",
    }
)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class ModalOptions:
    app: str = DEFAULT_APP
    environment: str | None = None
    server_url: str = DEFAULT_SERVER_URL
    credentials_dir: str | None = None
    poll_interval: float = 10.0
    regions: tuple[str, ...] = ()  # empty: Modal places sandboxes anywhere
    max_lifetime: int = MAX_LIFETIME  # the longest sandbox timeout; a Pod's activeDeadlineSeconds may shorten it
    log_poll_interval: float = 1.0  # seconds between log fetches while following
    connect_timeout: float = 10.0  # seconds for the first connection to the API
    create_wait: float = 15.0  # seconds provision waits for Modal to schedule before it reports a queued sandbox


def _positive(options: Mapping[str, Any], key: str, default: float) -> float:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"modal option {key!r} must be a positive number")
    return float(value)


def _optional_text(options: Mapping[str, Any], key: str) -> str | None:
    value = options.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"modal option {key!r} must be a non-empty string")
    return value.strip()


def parse_options(options: Mapping[str, Any]) -> ModalOptions:
    """Validate `options`; ValueError names the option that is wrong."""
    unknown = sorted(set(options) - KNOWN_KEYS)
    if unknown:
        raise ValueError(f"unknown option(s) for the modal provider: {', '.join(unknown)}")
    app = options.get("app", DEFAULT_APP)
    if not isinstance(app, str) or not _NAME.match(app):
        raise ValueError("modal option 'app' must be an app name (letters, digits, '.', '_', '-')")
    environment = _optional_text(options, "environment")
    if environment is not None and not _NAME.match(environment):
        raise ValueError("modal option 'environment' must be an environment name")
    server_url = _optional_text(options, "server_url") or DEFAULT_SERVER_URL
    if not server_url.startswith(("http://", "https://")):
        raise ValueError("modal option 'server_url' must be an http:// or https:// URL")
    regions = options.get("regions", ())
    if isinstance(regions, str) or not isinstance(regions, Sequence):
        raise ValueError("modal option 'regions' must be a list such as ['us-east']")
    if not all(isinstance(region, str) and region.strip() for region in regions):
        raise ValueError("modal option 'regions' must list non-empty region names")
    lifetime = _positive(options, "max_lifetime", MAX_LIFETIME)
    if lifetime != int(lifetime) or lifetime > MAX_LIFETIME:
        raise ValueError(f"modal option 'max_lifetime' must be whole seconds, at most {MAX_LIFETIME}")
    return ModalOptions(
        app=app,
        environment=environment,
        server_url=server_url.rstrip("/"),
        credentials_dir=_optional_text(options, "credentials_dir"),
        poll_interval=_positive(options, "poll_interval", 10.0),
        regions=tuple(dict.fromkeys(region.strip().lower() for region in regions)),
        max_lifetime=int(lifetime),
        log_poll_interval=_positive(options, "log_poll_interval", 1.0),
        connect_timeout=_positive(options, "connect_timeout", 10.0),
        create_wait=_create_wait(options),
    )


def _create_wait(options: Mapping[str, Any]) -> float:
    value = _positive(options, "create_wait", 15.0)
    if value > MAX_CREATE_WAIT:
        raise ValueError(f"modal option 'create_wait' must be at most {MAX_CREATE_WAIT:g} seconds")
    return value
