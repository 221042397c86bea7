"""The Pod's `imagePullSecrets`, resolved into registry credentials for the provider, as a
kubelet resolves them.

Called by `vnode.phases.provision.Provisioner._request`. Each named Secret in the Pod's namespace
gives the registries of its `.dockerconfigjson` (type `kubernetes.io/dockerconfigjson`, an
`auths` map) or `.dockercfg` (type `kubernetes.io/dockercfg`, the map itself); an entry's
`auth` (base64 `user:password`) or `username` + `password` is its credential, and the first
Secret listed that names a registry wins. A Secret that is missing, of another type or
malformed does not stop the Pod: its name is returned in `missing` for one Warning Event
(`FailedToRetrieveImagePullSecret`, the kubelet's words), and the image pull may fail.
Credentials reach only `ProvisionRequest.registry_auth` (I4): never an Event or a log.
Tests: tests/vnode/test_pullsecrets.py.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from providers.pullauth import RegistryAuth, normalise_host
from vnode.sources.env import PodFields

ReadSecretBytes = Callable[[str, str], Mapping[str, bytes] | None]
CONFIG_KEYS = (".dockerconfigjson", ".dockercfg")


@dataclass
class PullAuth:
    auths: dict[str, RegistryAuth] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)  # Secrets named but not usable

    def warning(self) -> str | None:
        """The kubelet's Warning message for the Secrets it could not use, or None."""
        if not self.missing:
            return None
        names = ", ".join(self.missing)
        return f"Unable to retrieve some image pull secrets ({names}); attempting to pull the image may not succeed."


def resolve_pull_auth(pod: PodFields, read_secret_bytes: ReadSecretBytes) -> PullAuth:
    """The credentials of every registry the Pod's imagePullSecrets name (module doc)."""
    result = PullAuth()
    for name in pod.pull_secrets:
        if not name:
            continue
        data = read_secret_bytes(pod.source_namespace, name)
        entries = _entries(data) if data is not None else None
        if entries is None:
            result.missing.append(name)
            continue
        for host, auth in entries.items():
            result.auths.setdefault(host, auth)
    return result


def _entries(data: Mapping[str, bytes]) -> dict[str, RegistryAuth] | None:
    """The registries of one Secret's docker config; None if it holds none readable."""
    for key in CONFIG_KEYS:
        if key not in data:
            continue
        try:
            config = json.loads(data[key])
        except ValueError:
            return None
        if not isinstance(config, dict):
            return None
        registries = config.get("auths") if key == ".dockerconfigjson" else config
        if not isinstance(registries, dict):
            return None
        found = {}
        for host, entry in registries.items():
            auth = _credential(entry)
            if auth is not None and isinstance(host, str) and host.strip():
                found[normalise_host(host)] = auth
        return found or None
    return None


def _credential(entry: Any) -> RegistryAuth | None:
    if not isinstance(entry, dict):
        return None
    encoded = entry.get("auth")
    if isinstance(encoded, str) and encoded:
        try:
            user, colon, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return RegistryAuth(user, password) if colon and user else None
    name, secret = entry.get("username"), entry.get("password")
    if isinstance(name, str) and name and isinstance(secret, str):
        return RegistryAuth(name, secret)
    return None
