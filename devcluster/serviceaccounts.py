"""The serviceaccount controller's one duty here: a ServiceAccount `default` in every namespace,
the ones that exist at start and the ones created later, put back when deleted.

`DevCluster` runs one `DefaultServiceAccounts` loop (a first pass before it serves, as for the
root CA); it wakes on Namespace changes and on changes to ServiceAccounts named `default`.
Writes only through `Resources`; never touches a ServiceAccount it did not create by name.
Tests: tests/devcluster/test_default_serviceaccount.py.
"""

from __future__ import annotations

from devcluster.controlloop import ControlLoop
from devcluster.errors import ApiError
from devcluster.resources import Resources
from devcluster.watch import Change

NAME = "default"
NAMESPACES, SERVICEACCOUNTS = "/namespaces", "/serviceaccounts"


class DefaultServiceAccounts(ControlLoop):
    name = "devcluster-serviceaccounts"

    def __init__(self, resources: Resources, *, interval: float = 5.0) -> None:
        super().__init__(resources, interval=interval)

    def wants(self, change: Change) -> bool:
        return change.storage_key == NAMESPACES or (change.storage_key == SERVICEACCOUNTS and change.name == NAME)

    def run_once(self) -> None:
        rt = self.resources.builtin("", "v1", "serviceaccounts")
        namespaces, _ = self.resources.store.list_objects(NAMESPACES)
        for namespace in namespaces:
            meta = namespace["metadata"]
            if meta.get("deletionTimestamp") or self.resources.store.get(SERVICEACCOUNTS, meta["name"], NAME):
                continue
            try:
                self.resources.create(rt, meta["name"], {"metadata": {"name": NAME}})
            except ApiError:
                continue  # the namespace went, or someone created it first: the next pass looks again
