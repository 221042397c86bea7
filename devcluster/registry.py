"""The resource registry: which kinds the server serves, at which URLs, with which traits.

Built-in kinds are fixed here; CustomResourceDefinitions add and remove entries at run time
(`register_crd`). Routing, discovery and resource behaviour read it; it stores no objects.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from devcluster.errors import ApiError, Cause, FieldError, invalid, invalid_value, not_supported, required
from devcluster.printcolumns import PrinterColumn, columns_of

VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class ResourceType:
    """One served resource (a group/version/plural) and the traits that change its behaviour."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    status_subresource: bool = False
    extra_subresources: tuple[str, ...] = ()
    builtin: bool = True
    printer_columns: tuple[PrinterColumn, ...] = ()  # a CRD version's, for its Tables
    verbs: tuple[str, ...] = ()  # empty: every verb of VERBS (the review kinds are create-only)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage_key(self) -> str:
        """Objects are stored per group and plural, shared by every served version."""
        return f"{self.group}/{self.plural}"

    @property
    def qualified(self) -> str:
        """The name used in error messages: `pods`, `leases.coordination.k8s.io`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def subresources(self) -> tuple[str, ...]:
        return (("status",) if self.status_subresource else ()) + self.extra_subresources


_POD_SUBRESOURCES = ("log", "exec", "attach", "portforward", "binding", "ephemeralcontainers")
_SCALE = ("scale",)

BUILTINS: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "namespaces", "Namespace", False, "namespace", ("ns",), (), True),
    ResourceType("", "v1", "pods", "Pod", True, "pod", ("po",), ("all",), True, _POD_SUBRESOURCES),
    ResourceType("", "v1", "nodes", "Node", False, "node", ("no",), (), True),
    ResourceType("", "v1", "secrets", "Secret", True, "secret"),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, "configmap", ("cm",)),
    ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True, "serviceaccount", ("sa",), (), False, ("token",)),
    ResourceType("", "v1", "events", "Event", True, "event", ("ev",)),
    ResourceType("", "v1", "services", "Service", True, "service", ("svc",), ("all",), True),
    ResourceType("", "v1", "endpoints", "Endpoints", True, "endpoints", ("ep",)),
    ResourceType("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True, "endpointslice"),
    ResourceType("events.k8s.io", "v1", "events", "Event", True, "event", ("ev",)),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True, "lease"),
    ResourceType("apps", "v1", "deployments", "Deployment", True, "deployment", ("deploy",), ("all",), True, _SCALE),
    ResourceType("apps", "v1", "replicasets", "ReplicaSet", True, "replicaset", ("rs",), ("all",), True, _SCALE),
    ResourceType("batch", "v1", "jobs", "Job", True, "job", (), ("all",), True),
    ResourceType(
        "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
        False, "customresourcedefinition", ("crd", "crds"), (), True,
    ),
    ResourceType(
        "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration", False, "mutatingwebhookconfiguration",
    ),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, "clusterrole"),
    ResourceType(
        "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False, "clusterrolebinding",
    ),
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", True, "role"),
    ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, "rolebinding"),
    ResourceType(
        "certificates.k8s.io", "v1", "certificatesigningrequests", "CertificateSigningRequest",
        False, "certificatesigningrequest", ("csr",), (), True, ("approval",),
    ),
    ResourceType("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", False, "tokenreview", verbs=("create",)),
    ResourceType(
        "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview",
        False, "subjectaccessreview", verbs=("create",),
    ),
    ResourceType(
        "authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview",
        False, "selfsubjectaccessreview", verbs=("create",),
    ),
)  # fmt: skip


@dataclass
class Registry:
    """Thread-safe map of served resources, keyed by (group, version, plural)."""

    _types: dict[tuple[str, str, str], ResourceType] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        for rt in BUILTINS:
            self._types[(rt.group, rt.version, rt.plural)] = rt

    def check_crd(self, crd: Mapping[str, Any]) -> None:
        """Raise 422 for a CustomResourceDefinition the API server would refuse: a bad
        schema or names, a name other than plural.group, a built-in resource's name."""
        name = crd["metadata"]["name"]
        try:
            types = crd_resource_types(crd)
        except FieldError as err:
            raise _crd_invalid(name, err.cause) from None
        spec = crd["spec"]
        expected = f"{spec['names']['plural']}.{spec['group']}"
        if name != expected:
            raise _crd_invalid(name, invalid_value("metadata.name", name, 'must be spec.names.plural+"."+spec.group'))
        for rt in types:
            existing = self.lookup(rt.group, rt.version, rt.plural)
            if existing is not None and existing.builtin:
                raise _crd_invalid(name, invalid_value("metadata.name", name, f"{rt.qualified} is a built-in resource"))

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        with self._lock:
            return self._types.get((group, version, plural))

    def all(self) -> list[ResourceType]:
        with self._lock:
            return list(self._types.values())

    def group_versions(self) -> dict[str, list[str]]:
        """Named groups (core excluded) and their versions, in registration order."""
        groups: dict[str, list[str]] = {}
        for rt in self.all():
            if rt.group and rt.version not in groups.setdefault(rt.group, []):
                groups[rt.group].append(rt.version)
        return groups

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [rt for rt in self.all() if rt.group == group and rt.version == version]

    def by_storage_key(self, storage_key: str) -> ResourceType | None:
        for rt in self.all():
            if rt.storage_key == storage_key:
                return rt
        return None

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        for rt in self.all():
            if rt.api_version == api_version and rt.kind == kind:
                return rt
        return None

    def serve(self, rt: ResourceType) -> None:
        """Serve a built-in kind that lives outside the store (the metrics API's)."""
        with self._lock:
            self._types[(rt.group, rt.version, rt.plural)] = rt

    def register_crd(self, crd: Mapping[str, Any]) -> list[ResourceType]:
        """Serve every `served` version of a CRD; returns the entries added."""
        added = crd_resource_types(crd)
        with self._lock:
            for rt in added:
                self._types[(rt.group, rt.version, rt.plural)] = rt
        return added

    def unregister_crd(self, crd: Mapping[str, Any]) -> list[ResourceType]:
        removed = crd_resource_types(crd)
        with self._lock:
            for rt in removed:
                self._types.pop((rt.group, rt.version, rt.plural), None)
        return removed


def _crd_invalid(name: str, cause: Cause) -> ApiError:
    return invalid("CustomResourceDefinition", name, [cause], group="apiextensions.k8s.io")


def crd_resource_types(crd: Mapping[str, Any]) -> list[ResourceType]:
    """The resource types a CustomResourceDefinition declares (pure; FieldError when malformed)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group, plural, kind = spec.get("group"), names.get("plural"), names.get("kind")
    for path, value in (("spec.group", group), ("spec.names.plural", plural), ("spec.names.kind", kind)):
        if not (isinstance(value, str) and value):
            raise FieldError(required(path))
    assert isinstance(group, str) and isinstance(plural, str) and isinstance(kind, str)
    scope = spec.get("scope", "Namespaced")
    if scope not in ("Namespaced", "Cluster"):
        raise FieldError(not_supported("spec.scope", str(scope), ("Cluster", "Namespaced")))
    versions = spec.get("versions") or []
    if not isinstance(versions, list) or not versions:
        raise FieldError(required("spec.versions", "must have exactly one version marked as storage version"))
    result = []
    for i, version in enumerate(versions):
        if not isinstance(version, dict) or not version.get("name") or not version.get("served", True):
            continue
        columns = columns_of(version, f"spec.versions[{i}]")
        subresources = version.get("subresources") or {}
        result.append(
            ResourceType(
                group=group,
                version=str(version["name"]),
                plural=plural,
                kind=kind,
                namespaced=scope == "Namespaced",
                singular=str(names.get("singular") or kind.lower()),
                short_names=tuple(str(s) for s in names.get("shortNames") or ()),
                categories=tuple(str(c) for c in names.get("categories") or ()),
                status_subresource="status" in subresources,
                builtin=False,
                printer_columns=columns,
            )
        )
    return result
