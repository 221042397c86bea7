"""A small RBAC evaluator over rendered manifests, for the proof that deploy/ grants what the
manager's recorded API calls need and nothing more.

Used by tests/deploy/test_rbac_proof.py and unit-tested by test_rbac_eval.py. Implements the
rule matching of Kubernetes' RBAC authorizer for resource requests (apiGroups, resources with
`resource/subresource`, verbs, resourceNames) and the scoping of Roles versus ClusterRoles
bound by RoleBindings or ClusterRoleBindings. It never talks to a cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Obj = Mapping[str, Any]

# Paths every authenticated identity may GET through the default `system:discovery` and
# `system:public-info-viewer` ClusterRoles, so a role never needs to grant them.
DISCOVERY_PATHS = ("/api", "/apis", "/version", "/healthz", "/livez", "/readyz", "/openapi")


@dataclass(frozen=True)
class ApiCall:
    """The attributes the RBAC authorizer sees for one resource request."""

    verb: str
    group: str
    resource: str
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def full_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        named = f" {self.name}" if self.name else ""
        return f"{self.verb} {self.group or 'core'}/{self.full_resource}{named}{where}"


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


@dataclass(frozen=True)
class Rule:
    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    resource_names: tuple[str, ...] = ()

    @classmethod
    def parse(cls, raw: Obj) -> Rule:
        return cls(
            tuple(raw.get("apiGroups") or ()),
            tuple(raw.get("resources") or ()),
            tuple(raw.get("verbs") or ()),
            tuple(raw.get("resourceNames") or ()),
        )

    def matches(self, call: ApiCall) -> bool:
        return (
            _has(self.api_groups, call.group)
            and _resource_matches(self.resources, call)
            and _has(self.verbs, call.verb)
            and (not self.resource_names or call.name in self.resource_names)
        )

    def atoms(self) -> list[tuple[str, str, str]]:
        """(apiGroup, resource, verb) triples this rule grants."""
        return [(g, r, v) for g in self.api_groups for r in self.resources for v in self.verbs]


def _has(values: Sequence[str], wanted: str) -> bool:
    return "*" in values or wanted in values


def _resource_matches(resources: Sequence[str], call: ApiCall) -> bool:
    if "*" in resources or call.full_resource in resources:
        return True
    # `*/scale` grants that subresource of every resource.
    return bool(call.subresource) and f"*/{call.subresource}" in resources


@dataclass(frozen=True)
class Grant:
    """A role's rules as bound to a subject: `namespace` empty means cluster-wide."""

    role: str  # "ClusterRole/name" or "Role/namespace/name"
    namespace: str
    rules: tuple[Rule, ...]

    def allows(self, call: ApiCall) -> bool:
        if self.namespace and call.namespace != self.namespace:
            return False
        return any(rule.matches(call) for rule in self.rules)


def grants_for(objects: Iterable[Obj], *, service_account: str, namespace: str) -> list[Grant]:
    """Every Grant the ServiceAccount `namespace/service_account` holds through the bindings in
    `objects`. A binding to a role missing from `objects` raises KeyError: nothing is assumed."""
    objects = list(objects)
    cluster_roles = {o["metadata"]["name"]: o for o in objects if o.get("kind") == "ClusterRole"}
    roles = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects if o.get("kind") == "Role"}
    result: list[Grant] = []
    for binding in objects:
        kind = binding.get("kind")
        if kind not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if not any(_is_subject(s, service_account, namespace, binding) for s in binding.get("subjects") or []):
            continue
        ref = binding["roleRef"]
        bound_in = binding["metadata"].get("namespace", "") if kind == "RoleBinding" else ""
        if ref["kind"] == "ClusterRole":
            role = cluster_roles[ref["name"]]
            label = f"ClusterRole/{ref['name']}"
        else:
            role = roles[(bound_in, ref["name"])]
            label = f"Role/{bound_in}/{ref['name']}"
        rules = tuple(Rule.parse(r) for r in role.get("rules") or [])
        result.append(Grant(label, bound_in, rules))
    return result


def _is_subject(subject: Obj, name: str, namespace: str, binding: Obj) -> bool:
    if subject.get("kind") != "ServiceAccount" or subject.get("name") != name:
        return False
    # A RoleBinding's ServiceAccount subject without a namespace means the binding's own.
    return bool((subject.get("namespace") or binding["metadata"].get("namespace")) == namespace)


def allowed(call: ApiCall, grants: Sequence[Grant]) -> bool:
    return any(grant.allows(call) for grant in grants)


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
