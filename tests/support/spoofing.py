"""What a tenant who may write Leases in the manager's namespace can do, and manager Pods for the
replicas to be checked against (kube/holders.py): used by tests/kube/test_holders.py and
tests/nebula_site/test_sharing_managers.py."""

from __future__ import annotations

from datetime import UTC, datetime

from kube.client import ConflictError, Kube, NotFoundError, path_for
from kube.holders import pod_identity
from kube.leases import API_VERSION, KIND_LABEL, lease_path
from kube.times import micro_time

MANAGER_LABELS = {"app.kubernetes.io/name": "nebula", "app.kubernetes.io/component": "manager"}


def manager_pod(
    kube: Kube, name: str, *, namespace: str = "default", labels: dict[str, str] = MANAGER_LABELS, ip: str = "10.0.0.7"
) -> str:
    """A Pod as the Deployment makes one, Running at `ip` and bound to a real node (no virtual
    kubelet here touches it); the Lease identity of a replica running as it."""
    body = {
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": "worker-1", "containers": [{"name": "manager", "image": "nebula"}]},
    }
    pod = kube.create(path_for("pods", namespace=namespace), body)
    status = {"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}}
    kube.patch(path_for("pods", namespace=namespace, name=name, subresource="status"), status)
    return pod_identity(name, pod["metadata"]["uid"])


def spoof(
    kube: Kube,
    name: str,
    holder: str,
    kind: str,
    annotations: dict[str, str] | None = None,
    *,
    namespace: str = "default",
    duration: int = 30,
) -> None:
    """Create or overwrite the Lease `name` as held by `holder` for `duration` seconds, renewed
    now (its other fields kept)."""
    now = micro_time(datetime.now(UTC))
    spec = {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": now, "acquireTime": now}
    try:
        current = kube.get(lease_path(namespace, name))
    except NotFoundError:
        metadata = {"name": name, "labels": {KIND_LABEL: kind} if kind else {}, "annotations": annotations or {}}
        kube.create(
            lease_path(namespace), {"apiVersion": API_VERSION, "kind": "Lease", "metadata": metadata, "spec": spec}
        )
        return
    current["spec"] = dict(current["spec"], **spec)
    current["metadata"]["annotations"] = dict(current["metadata"].get("annotations") or {}, **(annotations or {}))
    kube.replace(lease_path(namespace, name), current)


def renew_as_holder(kube: Kube, name: str, holder: str, *, namespace: str = "default") -> bool:
    """Renew the Lease `name` as its holder `holder` would (a write carrying the resourceVersion
    read); False, writing nothing, once someone else holds it or wrote first."""
    try:
        current = kube.get(lease_path(namespace, name))
    except NotFoundError:
        return False
    if current["spec"].get("holderIdentity") != holder:
        return False
    current["spec"]["renewTime"] = micro_time(datetime.now(UTC))
    try:
        kube.replace(lease_path(namespace, name), current)
    except ConflictError:
        return False
    return True
