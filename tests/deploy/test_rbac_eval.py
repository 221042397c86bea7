"""The RBAC evaluator the proof relies on: request attributes from paths, rule matching, the
scoping of Roles and ClusterRoles, and the search for unused grants."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.deploy.rbac import ApiCall, Grant, Rule, allowed, call_from_path, grants_for, unused_atoms, wildcards


@pytest.mark.parametrize(
    ("verb", "path", "expected"),
    [
        ("list", "/api/v1/pods", ApiCall("list", "", "pods")),
        ("create", "/api/v1/namespaces/a/pods", ApiCall("create", "", "pods", namespace="a")),
        ("patch", "/api/v1/namespaces/a/pods/p/status", ApiCall("patch", "", "pods", "status", "a", "p")),
        ("get", "/api/v1/nodes/n", ApiCall("get", "", "nodes", name="n")),
        ("patch", "/api/v1/nodes/n/status", ApiCall("patch", "", "nodes", "status", name="n")),
        ("get", "/api/v1/namespaces/a", ApiCall("get", "", "namespaces", namespace="a", name="a")),
        ("update", "/api/v1/namespaces/a/status", ApiCall("update", "", "namespaces", "status", "a", "a")),
        ("list", "/api/v1/namespaces", ApiCall("list", "", "namespaces")),
        (
            "update",
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/x",
            ApiCall("update", "coordination.k8s.io", "leases", namespace="kube-node-lease", name="x"),
        ),
        (
            "patch",
            "/apis/nebula.io/v1alpha1/nodepools/p/status",
            ApiCall("patch", "nebula.io", "nodepools", "status", name="p"),
        ),
        ("get", "/version", None),
        ("get", "/apis", None),
    ],
)
def test_request_attributes_are_read_from_the_path_as_the_api_server_does(
    verb: str, path: str, expected: ApiCall | None
) -> None:
    assert call_from_path(verb, path) == expected


POD_RULES = (Rule(("",), ("pods",), ("list", "watch", "patch")),)


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (ApiCall("list", "", "pods"), True),
        (ApiCall("patch", "", "pods", namespace="a", name="p"), True),
        (ApiCall("patch", "", "pods", "status", "a", "p"), False),  # a subresource is its own resource
        (ApiCall("delete", "", "pods", namespace="a", name="p"), False),
        (ApiCall("list", "apps", "pods"), False),  # another group
        (ApiCall("list", "", "secrets"), False),
    ],
)
def test_a_rule_matches_group_resource_subresource_and_verb(call: ApiCall, expected: bool) -> None:
    assert allowed(call, [Grant("ClusterRole/x", "", POD_RULES)]) is expected


def test_resource_names_admit_only_named_requests_never_a_create() -> None:
    grant = Grant("Role/ns/x", "ns", (Rule(("g",), ("leases",), ("get", "create", "update"), ("mine",)),))
    assert allowed(ApiCall("get", "g", "leases", namespace="ns", name="mine"), [grant])
    assert not allowed(ApiCall("get", "g", "leases", namespace="ns", name="other"), [grant])
    assert not allowed(ApiCall("create", "g", "leases", namespace="ns"), [grant])


def test_a_role_grants_only_in_its_namespace_and_never_cluster_scoped_resources() -> None:
    grant = Grant("Role/ns/x", "ns", (Rule(("",), ("pods", "nodes"), ("get",)),))
    assert allowed(ApiCall("get", "", "pods", namespace="ns", name="p"), [grant])
    assert not allowed(ApiCall("get", "", "pods", namespace="other", name="p"), [grant])
    assert not allowed(ApiCall("get", "", "pods", name="p"), [grant])  # across all namespaces
    assert not allowed(ApiCall("get", "", "nodes", name="n"), [grant])


def test_wildcards_match_everything_and_are_reported() -> None:
    grant = Grant("ClusterRole/x", "", (Rule(("*",), ("*",), ("*",)),))
    assert allowed(ApiCall("delete", "apps", "deployments", "scale", "a", "d"), [grant])
    role = {"kind": "ClusterRole", "metadata": {"name": "x"}, "rules": [{"apiGroups": [""], "resources": ["*"]}]}
    assert wildcards([role]) == ["ClusterRole/x: resources ['*']"]


def _objects(
    binding_kind: str, role_kind: str, *, binding_ns: str = "ns", subject_ns: str | None = "home"
) -> list[Any]:
    role: dict[str, Any] = {
        "kind": role_kind,
        "metadata": {"name": "r", **({"namespace": "ns"} if role_kind == "Role" else {})},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
    }
    subject = {"kind": "ServiceAccount", "name": "sa", **({"namespace": subject_ns} if subject_ns else {})}
    binding: dict[str, Any] = {
        "kind": binding_kind,
        "metadata": {"name": "b", **({"namespace": binding_ns} if binding_kind == "RoleBinding" else {})},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": "r"},
        "subjects": [subject],
    }
    return [role, binding]


def test_a_cluster_role_bound_by_a_role_binding_grants_only_in_the_binding_namespace() -> None:
    grants = grants_for(_objects("RoleBinding", "ClusterRole"), service_account="sa", namespace="home")
    assert allowed(ApiCall("get", "", "configmaps", namespace="ns", name="c"), grants)
    assert not allowed(ApiCall("get", "", "configmaps", namespace="elsewhere", name="c"), grants)


def test_a_cluster_role_binding_grants_everywhere() -> None:
    grants = grants_for(_objects("ClusterRoleBinding", "ClusterRole"), service_account="sa", namespace="home")
    assert allowed(ApiCall("get", "", "configmaps", namespace="elsewhere", name="c"), grants)


def test_bindings_of_other_subjects_grant_nothing() -> None:
    assert grants_for(_objects("ClusterRoleBinding", "ClusterRole"), service_account="sa", namespace="other") == []
    # Without a namespace, a RoleBinding's ServiceAccount subject is the binding's own namespace's.
    objects = _objects("RoleBinding", "Role", subject_ns=None)
    assert grants_for(objects, service_account="sa", namespace="home") == []
    assert grants_for(objects, service_account="sa", namespace="ns") != []


def test_a_binding_to_a_missing_role_is_an_error_not_an_empty_grant() -> None:
    with pytest.raises(KeyError):
        grants_for(_objects("ClusterRoleBinding", "ClusterRole")[1:], service_account="sa", namespace="home")


def test_unused_atoms_are_each_group_resource_verb_no_call_needed() -> None:
    grant = Grant("ClusterRole/x", "", POD_RULES)
    calls = [ApiCall("list", "", "pods"), ApiCall("patch", "", "pods", namespace="a", name="p")]
    assert unused_atoms([grant], calls) == [("ClusterRole/x", "", "pods", "watch")]


def test_a_call_outside_a_role_namespace_does_not_count_as_using_it() -> None:
    grant = Grant("Role/ns/x", "ns", (Rule(("",), ("pods",), ("get",)),))
    assert unused_atoms([grant], [ApiCall("get", "", "pods", namespace="other", name="p")]) == [
        ("Role/ns/x", "", "pods", "get")
    ]
