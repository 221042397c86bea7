"""The RBAC authorizer: whether a user (name and groups) may do a request, by stored Roles,
ClusterRoles, RoleBindings and ClusterRoleBindings, with Kubernetes' rule matching.

Pure functions over plain dicts. `reviews.py` calls `authorize` for SubjectAccessReviews;
tests/support/deploy/rbac.py builds the RBAC proof on `Rule`, `Grant` and `grants_for`, so the
proof and the devcluster share one evaluator. Role aggregation is not implemented.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Obj = Mapping[str, Any]

PRIVILEGED_GROUP = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"


@dataclass(frozen=True)
class ApiCall:
    """The attributes the RBAC authorizer sees for one request: a resource request, or with
    `path` a non-resource URL (`/metrics`)."""

    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""

    @property
    def full_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    def __str__(self) -> str:
        if self.path:
            return f"{self.verb} {self.path}"
        where = f" in {self.namespace}" if self.namespace else ""
        named = f" {self.name}" if self.name else ""
        return f"{self.verb} {self.group or 'core'}/{self.full_resource}{named}{where}"


@dataclass(frozen=True)
class Rule:
    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    @classmethod
    def parse(cls, raw: Obj) -> Rule:
        return cls(
            tuple(str(v) for v in raw.get("apiGroups") or ()),
            tuple(str(v) for v in raw.get("resources") or ()),
            tuple(str(v) for v in raw.get("verbs") or ()),
            tuple(str(v) for v in raw.get("resourceNames") or ()),
            tuple(str(v) for v in raw.get("nonResourceURLs") or ()),
        )

    def matches(self, call: ApiCall) -> bool:
        if call.path:
            return _has(self.verbs, call.verb) and any(_url_matches(url, call.path) for url in self.non_resource_urls)
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


def _url_matches(rule: str, path: str) -> bool:
    """`*` matches every path, `/apis/*` every path under /apis/, anything else exactly."""
    if rule == "*" or rule == path:
        return True
    return rule.endswith("*") and path.startswith(rule[:-1])


@dataclass(frozen=True)
class Grant:
    """A role's rules as bound to a subject: `namespace` empty means cluster-wide."""

    role: str  # "ClusterRole/name" or "Role/namespace/name"
    namespace: str
    rules: tuple[Rule, ...]
    binding: str = ""  # 'ClusterRoleBinding "name"' or 'RoleBinding "namespace/name"'

    def allows(self, call: ApiCall) -> bool:
        if self.namespace and (call.path or call.namespace != self.namespace):
            return False
        return any(rule.matches(call) for rule in self.rules)


def subject_matches(subject: Obj, *, user: str, groups: Sequence[str], binding_namespace: str) -> bool:
    """Whether a binding's subject names this user: by User name, Group, or ServiceAccount
    (`system:serviceaccount:<ns>:<name>`; a subject without a namespace means the binding's)."""
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(name) and name == user
    if kind == "Group":
        return bool(name) and name in groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return bool(name and namespace) and user == f"system:serviceaccount:{namespace}:{name}"
    return False


def grants_for(objects: Iterable[Obj], *, user: str, groups: Sequence[str] = (), strict: bool = False) -> list[Grant]:
    """Every Grant `user` (with `groups`) holds through the bindings in `objects`. A binding to
    a role missing from `objects` grants nothing, as in the API server; with `strict` it
    raises KeyError instead (the RBAC proof assumes nothing)."""
    objects = list(objects)
    cluster_roles = {o["metadata"]["name"]: o for o in objects if o.get("kind") == "ClusterRole"}
    roles = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects if o.get("kind") == "Role"}
    result: list[Grant] = []
    for binding in objects:
        kind = binding.get("kind")
        if kind not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        meta = binding.get("metadata") or {}
        bound_in = str(meta.get("namespace") or "") if kind == "RoleBinding" else ""
        subjects = [s for s in binding.get("subjects") or [] if isinstance(s, Mapping)]
        if not any(subject_matches(s, user=user, groups=groups, binding_namespace=bound_in) for s in subjects):
            continue
        ref = binding.get("roleRef") or {}
        if ref.get("kind") == "ClusterRole":
            role, label = cluster_roles.get(ref.get("name")), f"ClusterRole/{ref.get('name')}"
        elif ref.get("kind") == "Role" and bound_in:
            role, label = roles.get((bound_in, ref.get("name"))), f"Role/{bound_in}/{ref.get('name')}"
        else:
            role, label = None, f"{ref.get('kind')}/{ref.get('name')}"
        if role is None:
            if strict:
                raise KeyError(label)
            continue
        rules = tuple(Rule.parse(r) for r in role.get("rules") or [] if isinstance(r, Mapping))
        named = f"{bound_in}/{meta.get('name')}" if bound_in else str(meta.get("name"))
        result.append(Grant(label, bound_in, rules, binding=f'{kind} "{named}"'))
    return result


def allowed(call: ApiCall, grants: Sequence[Grant]) -> bool:
    return any(grant.allows(call) for grant in grants)


# The default ClusterRoles every cluster bootstraps (system:discovery, system:basic-user,
# system:public-info-viewer), bound to system:authenticated / system:unauthenticated. They are
# part of the authorizer here, not stored objects, so `kubectl get clusterroles` lists only yours.
_DISCOVERY_URLS = ("/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*", "/version", "/version/")
_PUBLIC_URLS = ("/healthz", "/livez", "/readyz", "/version", "/version/")
_SELF_REVIEWS = ("selfsubjectaccessreviews", "selfsubjectrulesreviews")
BOOTSTRAP = {
    AUTHENTICATED: (
        Grant(
            "ClusterRole/system:discovery",
            "",
            (Rule((), (), ("get",), (), _DISCOVERY_URLS + _PUBLIC_URLS),),
            'ClusterRoleBinding "system:discovery"',
        ),
        Grant(
            "ClusterRole/system:basic-user",
            "",
            (Rule(("authorization.k8s.io",), _SELF_REVIEWS, ("create",)),),
            'ClusterRoleBinding "system:basic-user"',
        ),
    ),
    UNAUTHENTICATED: (
        Grant(
            "ClusterRole/system:public-info-viewer",
            "",
            (Rule((), (), ("get",), (), _PUBLIC_URLS),),
            'ClusterRoleBinding "system:public-info-viewer"',
        ),
    ),
}


def authorize(objects: Iterable[Obj], *, user: str, groups: Sequence[str], call: ApiCall) -> tuple[bool, str]:
    """(allowed, reason) as the API server's authorizer chain answers: members of system:masters
    may do anything; otherwise the bootstrap roles and the stored RBAC objects decide."""
    if PRIVILEGED_GROUP in groups:
        return True, ""
    grants = [g for group in groups for g in BOOTSTRAP.get(group, ())]
    grants += grants_for(objects, user=user, groups=groups)
    for grant in grants:
        if grant.allows(call):
            return True, f"RBAC: allowed by {grant.binding} of {grant.role.split('/', 1)[0]} " + (
                f'"{grant.role.rsplit("/", 1)[-1]}" to {user_label(user)}'
            )
    return False, ""


def user_label(user: str) -> str:
    """How RBAC's reasons name a subject: `ServiceAccount "ns/name"` or `User "name"`."""
    parts = user.split(":")
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
        return f'ServiceAccount "{parts[2]}/{parts[3]}"'
    return f'User "{user}"'
