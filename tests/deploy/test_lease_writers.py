"""Lease writes in the rendered overlays are the manager's alone (issue 38, spoofed Leases):
every Role or ClusterRole that may create, update, patch or delete `coordination.k8s.io`
Leases is bound to the manager's ServiceAccount only, and no role made for people (the
console roles) grants any. kube/holders.py is the guard when a cluster grants more."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.deploy.manifests import render

WRITES = {"create", "update", "patch", "delete", "deletecollection", "*"}
MANAGER = ("ServiceAccount", "nebula-system", "nebula-manager")
PEOPLE = {("ClusterRole", "", "nebula-console-viewer"), ("ClusterRole", "", "nebula-console-operator")}


def writes_leases(role: dict[str, Any]) -> bool:
    for rule in role.get("rules") or []:
        groups, resources = set(rule.get("apiGroups") or []), set(rule.get("resources") or [])
        if (
            groups & {"coordination.k8s.io", "*"}
            and resources & {"leases", "*"}
            and set(rule.get("verbs") or []) & WRITES
        ):
            return True
    return False


@pytest.mark.parametrize("overlay", ["dev", "production"])
def test_only_the_managers_service_account_may_write_leases_and_no_role_for_people_can(overlay: str) -> None:
    objects = render(overlay)
    roles = {
        (o["kind"], o["metadata"].get("namespace", "") if o["kind"] == "Role" else "", o["metadata"]["name"]): o
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
    }
    writers = {key for key, role in roles.items() if writes_leases(role)}
    assert writers, "the manager must be granted its Lease writes"
    subjects = set()
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace", "") if ref["kind"] == "Role" else ""
        if (ref["kind"], namespace, ref["name"]) in writers:
            subjects |= {(s["kind"], s.get("namespace", ""), s["name"]) for s in binding.get("subjects") or []}
    assert subjects == {MANAGER}
    assert PEOPLE <= set(roles) and not PEOPLE & writers
