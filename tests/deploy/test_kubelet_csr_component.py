"""deploy/components/kubelet-csr: an overlay that adds it renders (real `kubectl kustomize`),
grants the manager's ServiceAccount exactly the CSR verbs the csr certificate source uses
(vnode/kubelet/certcsr.py: create, then get/list/watch its CSR) and nothing to approve or
sign, and switches NEBULA_KUBELET_CERT_SOURCE to csr."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.deploy.manifests import NAMESPACE, ROOT, SERVICE_ACCOUNT, find, render_copy


def test_the_component_grants_the_csr_flow_and_selects_the_csr_source(tmp_path: Path) -> None:
    deploy = tmp_path / "deploy"
    shutil.copytree(ROOT / "deploy", deploy)
    overlay = deploy / "overlays" / "csr"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources: [../dev]\ncomponents: [../../components/kubelet-csr]\n"
    )
    objects = render_copy(deploy, "csr")
    role = find(objects, "ClusterRole", "nebula-manager-kubelet-csr")
    assert role["rules"] == [
        {
            "apiGroups": ["certificates.k8s.io"],
            "resources": ["certificatesigningrequests"],
            "verbs": ["create", "get", "list", "watch"],
        }
    ]
    binding = find(objects, "ClusterRoleBinding", "nebula-manager-kubelet-csr")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]
    settings = find(objects, "ConfigMap", "nebula-settings")
    assert settings["data"]["NEBULA_KUBELET_CERT_SOURCE"] == "csr"
    assert not any(
        "approve" in rule.get("verbs", []) or "sign" in rule.get("verbs", [])
        for o in objects
        if o.get("kind") in ("ClusterRole", "Role")
        for rule in o.get("rules", [])
    )
