"""RBAC analysis over rendered manifests, for the proof that deploy/ grants what the
manager's recorded API calls need and nothing more.

Used by tests/deploy/test_rbac_proof.py and unit-tested by test_rbac_eval.py. The rule matching
and the scoping of Roles versus ClusterRoles are the devcluster's authorizer (`devcluster.rbac`,
re-exported here), so the proof and the devcluster's SubjectAccessReviews agree; this module
adds what only the proof needs: request attributes from recorded paths, unused grants and
wildcards. It never talks to a cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from devcluster import rbac
from devcluster.rbac import ApiCall, Grant, Rule, allowed

__all__ = [
    "ApiCall", "Grant", "Rule", "allowed", "call_from_path", "grants_for", "is_discovery", "unused_atoms", "wildcards",
]  # fmt: skip

Obj = Mapping[str, Any]

# Paths every authenticated identity may GET through the default `system:discovery` and
# `system:public-info-viewer` ClusterRoles, so a role never needs to grant them.
DISCOVERY_PATHS = ("/api", "/apis", "/version", "/healthz", "/livez", "/readyz", "/openapi")


def call_from_path(verb: str, path: str) -> ApiCall | None:
    """The request attributes of `verb` on a REST `path`; None for a non-resource path.

    As the API server does: a POST to a collection carries no name (so `resourceNames` never
    admits a create), and the name of a list or watch is empty."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return None
    namespace = ""
    if rest[:1] == ["namespaces"] and len(rest) >= 2:
        # As the API server's RequestInfoFactory: `namespaces/x/status` is the Namespace's own
        # subresource; `namespaces/x/pods/...` is a resource in namespace x; a Namespace is
        # authorized as living in itself.
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in ("status", "finalize"):
            rest = rest[2:]
    if not rest:
        return None
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    return ApiCall(verb, group, resource, subresource, namespace, name)


def is_discovery(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in DISCOVERY_PATHS)


def grants_for(objects: Iterable[Obj], *, service_account: str, namespace: str) -> list[Grant]:
    """Every Grant the ServiceAccount `namespace/service_account` holds through the bindings in
    `objects` (by name only, no groups). A binding to a role missing from `objects` raises
    KeyError: nothing is assumed."""
    return rbac.grants_for(objects, user=f"system:serviceaccount:{namespace}:{service_account}", strict=True)


def unused_atoms(grants: Sequence[Grant], calls: Sequence[ApiCall]) -> list[tuple[str, str, str, str]]:
    """(role, apiGroup, resource, verb) granted but matched by none of `calls` (within the
    grant's namespace and resourceNames)."""
    unused = []
    for grant in grants:
        for rule in grant.rules:
            for group, resource, verb in rule.atoms():
                narrow = Grant(
                    grant.role, grant.namespace, (Rule((group,), (resource,), (verb,), rule.resource_names),)
                )
                if not any(narrow.allows(call) for call in calls):
                    unused.append((grant.role, group, resource, verb))
    return unused


def wildcards(objects: Iterable[Obj]) -> list[str]:
    """Rules of any Role or ClusterRole that use `*` in apiGroups, resources or verbs."""
    found = []
    for obj in objects:
        if obj.get("kind") not in ("Role", "ClusterRole"):
            continue
        for rule in obj.get("rules") or []:
            for key in ("apiGroups", "resources", "verbs"):
                if any("*" in str(value) for value in rule.get(key) or []):
                    found.append(f"{obj['kind']}/{obj['metadata']['name']}: {key} {rule.get(key)}")
            if rule.get("nonResourceURLs"):
                found.append(f"{obj['kind']}/{obj['metadata']['name']}: nonResourceURLs {rule['nonResourceURLs']}")
    return found
