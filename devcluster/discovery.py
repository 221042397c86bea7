"""Discovery, version and OpenAPI documents, in the legacy JSON shapes every kubectl accepts.

Built from the registry on each request so CRDs appear as soon as they are created. The
HTTP layer calls these; they are pure functions of the registry.
"""

from __future__ import annotations

from typing import Any

from devcluster.registry import VERBS, Registry, ResourceType

VERSION_INFO = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-devcluster",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.23",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_SUBRESOURCE_VERBS = {
    "status": ["get", "patch", "update"],
    "log": ["get"],
    "exec": ["create", "get"],
    "attach": ["create", "get"],
    "portforward": ["create", "get"],
    "binding": ["create"],
    "ephemeralcontainers": ["get", "patch", "update"],
    "token": ["create"],
    "scale": ["get", "patch", "update"],
}
_SUBRESOURCE_KINDS = {"binding": "Binding", "token": "TokenRequest", "scale": "Scale"}
# A subresource whose kind lives in another group-version says so, as kube-apiserver's does.
_SUBRESOURCE_GROUP_VERSIONS = {"scale": ("autoscaling", "v1")}


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def api_group_list(registry: Registry) -> dict[str, Any]:
    groups = [_group(name, versions) for name, versions in registry.group_versions().items()]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: Registry, name: str) -> dict[str, Any] | None:
    versions = registry.group_versions().get(name)
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}


def _entry(rt: ResourceType) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.singular or rt.kind.lower(),
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(rt.verbs or VERBS),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    return entry


def resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    """The APIResourceList of one group-version, subresources included (`pods/log`)."""
    types = registry.in_group_version(group, version)
    if not types:
        return None
    resources: list[dict[str, Any]] = []
    for rt in types:
        resources.append(_entry(rt))
        for sub in rt.subresources:
            entry = {"name": f"{rt.plural}/{sub}", "singularName": "", "namespaced": rt.namespaced}
            if sub in _SUBRESOURCE_GROUP_VERSIONS:
                entry["group"], entry["version"] = _SUBRESOURCE_GROUP_VERSIONS[sub]
            entry["kind"] = _SUBRESOURCE_KINDS.get(sub, rt.kind)
            entry["verbs"] = _SUBRESOURCE_VERBS.get(sub, ["get"])
            resources.append(entry)
    group_version = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}


def openapi_v2_json() -> dict[str, Any]:
    """An OpenAPI v2 document with no schemas: clients then skip client-side validation."""
    return {"swagger": "2.0", "info": {"title": "devcluster", "version": VERSION_INFO["gitVersion"]}, "paths": {}}
