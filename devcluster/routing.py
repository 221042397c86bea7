"""URL routing: turn a request path into the resource, namespace, name and subresource it names.

Pure; the HTTP layer calls `resolve` for every path under /api and /apis. It knows the
Kubernetes URL shapes (cluster-scoped, namespaced, all-namespaces lists) and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from devcluster.errors import ApiError
from devcluster.registry import Registry, ResourceType


@dataclass(frozen=True)
class Discovery:
    """A discovery document: `/api`, `/apis`, `/apis/<group>` or a group-version."""

    group: str | None
    version: str | None
    legacy: bool


@dataclass(frozen=True)
class ResourceRoute:
    rt: ResourceType
    namespace: str | None  # None: all namespaces (a namespaced list without /namespaces/<ns>)
    name: str
    subresource: str


class _RouteNotFound(ApiError):
    def status(self) -> dict[str, Any]:
        # kube-apiserver's not-found handler sends an empty `details`; kubectl debug reads
        # details.name to tell a missing subresource from a missing Pod (and panics without it).
        return {**super().status(), "details": {}}


def not_found() -> ApiError:
    return _RouteNotFound(404, "the server could not find the requested resource", reason="NotFound")


def resolve(registry: Registry, path: str) -> Discovery | ResourceRoute:
    parts = [unquote(p) for p in path.strip("/").split("/")]
    if parts[0] == "api":
        if len(parts) == 1:
            return Discovery(None, None, legacy=True)
        group, version, rest = "", parts[1], parts[2:]
    elif parts[0] == "apis":
        if len(parts) <= 2:
            return Discovery(parts[1] if len(parts) == 2 else None, None, legacy=False)
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise not_found()
    if not rest:
        return Discovery(group, version, legacy=not group)
    if any(not p for p in rest):
        raise not_found()
    return _resource(registry, group, version, rest)


def _resource(registry: Registry, group: str, version: str, rest: list[str]) -> ResourceRoute:
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3 and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
        namespace, rest = rest[1], rest[2:]
    if len(rest) > 3:
        raise not_found()
    rt = registry.lookup(group, version, rest[0])
    if rt is None:
        raise not_found()
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if namespace is not None and not rt.namespaced:
        raise not_found()
    if rt.namespaced and namespace is None and name:
        raise not_found()
    if subresource and subresource not in rt.subresources:
        raise not_found()
    return ResourceRoute(rt, namespace if rt.namespaced else "", name, subresource)
