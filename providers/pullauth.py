"""Registry credentials at the seam: the Pod's `imagePullSecrets`, resolved by the vnode
(`vnode.sources.pullsecrets`) into one `RegistryAuth` per registry host, travel in
`ProvisionRequest.registry_auth`; a provider that pulls images picks the one for its image
with `auth_for`.

Hosts are normalised as the container runtimes do: the scheme and any path are dropped, and
Docker Hub's names (`index.docker.io`, `registry-1.docker.io`, `docker.io`) are one host,
`docker.io`, which is also the registry of an image that names none (`busybox:1.36`).
The password never reaches a repr, a log line or an error (I4).
Tests: tests/providers/test_pullauth.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

DOCKER_HUB = "docker.io"
_HUB_NAMES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"})


@dataclass(frozen=True, repr=False)
class RegistryAuth:
    """A username and password (or token) for one registry; repr names the user only."""

    username: str
    password: str

    def __repr__(self) -> str:
        return f"RegistryAuth(username={self.username!r}, password=<redacted>)"


def normalise_host(key: str) -> str:
    """The registry host of a docker config `auths` key (`https://ghcr.io/v2/` -> `ghcr.io`)."""
    host = key.strip().lower()
    for scheme in ("https://", "http://"):
        if host.startswith(scheme):
            host = host[len(scheme) :]
    host = host.split("/", 1)[0]
    return DOCKER_HUB if host in _HUB_NAMES else host


def registry_of(image: str) -> str:
    """The registry host an image reference pulls from (Docker Hub when it names none): the
    first path component counts as a host only with a `.` or `:` in it, or as `localhost`."""
    first, slash, _ = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return normalise_host(first)
    return DOCKER_HUB


def auth_for(image: str, auths: Mapping[str, RegistryAuth]) -> RegistryAuth | None:
    """The credentials for `image`'s registry among `auths` (keyed by normalised host)."""
    return auths.get(registry_of(image)) if image else None
