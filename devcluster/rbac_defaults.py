"""The RBAC objects a fresh devcluster holds, as a cluster's bootstrap policy seeds them.

`DevCluster._seed` creates each one that is missing, before serving. Today: the ClusterRole
`system:kubelet-api-admin` (the bootstrap role for full kubelet API access) bound to the user
of the devcluster's kubelet client certificate (`tls.KUBELET_CLIENT_USER`), as kubeadm-style
installs bind kube-apiserver's `--kubelet-client-certificate`; kubelets then authorise the
devcluster's logs, exec, attach and metrics by SubjectAccessReview like anyone else.
Tests: tests/vnode/kubelet/test_kubelet_auth.py.
"""

from __future__ import annotations

from typing import Any

from devcluster.tls import KUBELET_CLIENT_USER

RBAC_GROUP = "rbac.authorization.k8s.io"
KUBELET_API_ADMIN_ROLE = "system:kubelet-api-admin"
KUBELET_API_ADMIN_BINDING = "kube-apiserver-kubelet-client"
_BOOTSTRAP = {
    "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
    "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
}

# (API group, resource, object): created in this order.
KUBELET_API_ADMIN: tuple[tuple[str, str, dict[str, Any]], ...] = (
    (
        RBAC_GROUP,
        "clusterroles",
        {
            "apiVersion": f"{RBAC_GROUP}/v1",
            "kind": "ClusterRole",
            "metadata": {"name": KUBELET_API_ADMIN_ROLE, **_BOOTSTRAP},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "proxy"]},
                {
                    "apiGroups": [""],
                    "resources": [
                        "nodes/proxy",
                        "nodes/metrics",
                        "nodes/spec",
                        "nodes/stats",
                        "nodes/log",
                        "nodes/pods",
                        "nodes/healthz",
                        "nodes/configz",
                    ],  # fmt: skip
                    "verbs": ["*"],
                },
            ],
        },
    ),
    (
        RBAC_GROUP,
        "clusterrolebindings",
        {
            "apiVersion": f"{RBAC_GROUP}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": KUBELET_API_ADMIN_BINDING},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": KUBELET_API_ADMIN_ROLE},
            "subjects": [{"apiGroup": RBAC_GROUP, "kind": "User", "name": KUBELET_CLIENT_USER}],
        },
    ),
)
