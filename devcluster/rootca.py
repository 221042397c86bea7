"""The root CA publisher: the ConfigMap `kube-root-ca.crt` (key `ca.crt`, the cluster CA) in
every namespace, as kube-controller-manager publishes it.

`DevCluster` runs one `RootCAPublisher` thread; it wakes on Namespace changes and on changes to
those ConfigMaps (a deleted or edited one is put back). Pods mount it, e.g. the manager's
`--kubelet-client-ca` (on kubeadm and here, the CA of the kubelet client certificate).
Writes only through `Resources`.
Tests: tests/vnode/kubelet/test_kubelet_auth.py.
"""

from __future__ import annotations

from devcluster.controlloop import ControlLoop
from devcluster.errors import ApiError
from devcluster.resources import Resources
from devcluster.watch import Change

NAME = "kube-root-ca.crt"
NAMESPACES, CONFIGMAPS = "/namespaces", "/configmaps"


class RootCAPublisher(ControlLoop):
    name = "devcluster-root-ca"

    def __init__(self, resources: Resources, ca_pem: bytes, *, interval: float = 5.0) -> None:
        super().__init__(resources, interval=interval)
        self.data = {"ca.crt": ca_pem.decode("ascii")}

    def wants(self, change: Change) -> bool:
        return change.storage_key == NAMESPACES or (change.storage_key == CONFIGMAPS and change.name == NAME)

    def run_once(self) -> None:
        rt = self.resources.builtin("", "v1", "configmaps")
        namespaces, _ = self.resources.store.list_objects(NAMESPACES)
        for namespace in namespaces:
            meta = namespace["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            current = self.resources.store.get(CONFIGMAPS, meta["name"], NAME)
            try:
                if current is None:
                    self.resources.create(rt, meta["name"], {"metadata": {"name": NAME}, "data": self.data})
                elif current.get("data") != self.data:
                    self.resources.replace(rt, meta["name"], NAME, {**current, "data": self.data})
            except ApiError:
                continue  # the namespace went, or a write raced ours: the next pass looks again
