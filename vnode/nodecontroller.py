"""The node controller: registers `nebula-<provider>`, renews its Lease, keeps Ready honest.

Started by the Runner. Every `renew_interval` it renews the Lease in `kube-node-lease`
and patches the node's status: Ready is True only while the provider's last list
succeeded, and the `ProviderReachable` condition says why when it did not. A node someone
deleted is created again. Never touches Pods.
Tests: tests/vnode/test_controllers.py.
"""

from __future__ import annotations

import logging
import platform
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kube import names, observe
from kube.client import ConflictError, Kube, KubeError, NotFoundError, path_for
from kube.times import micro_time, rfc3339
from kube.worker import join_within
from vnode.handler import Handler

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]
VERSION = "nebula-0.1.0"
DEFAULT_CAPACITY = {"cpu": "1k", "memory": "10Ti", "pods": "1k", "nvidia.com/gpu": "1k"}


class NodeController:
    def __init__(
        self,
        handler: Handler,
        *,
        kube: Kube,
        node_ip: str | None,
        kubelet_port: int,
        lease_duration: int = 40,
        renew_interval: float = 10.0,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.handler = handler
        self._kube = kube
        self._node_ip = node_ip
        self._kubelet_port = kubelet_port
        self._lease_duration = lease_duration
        self._renew_interval = renew_interval
        self._now = now
        self._node_uid = ""
        self._lease: JsonDict | None = None
        self._conditions: dict[str, JsonDict] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def name(self) -> str:
        return self.handler.node_name

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"{self.name} node", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> list[threading.Thread]:
        """Stop syncing; returns the thread if it is still inside a call after `timeout`."""
        self._stop.set()
        return join_within([self._thread] if self._thread is not None else [], timeout)

    def _run(self) -> None:
        """Sync every `renew_interval`, and at once when the provider's reachability flips
        (so Ready follows the provider within a second, not a renewal period)."""
        last_sync = float("-inf")
        written: bool | None | str = "never"
        while not self._stop.is_set():
            reachable = self.handler.last_list_ok
            now = time.monotonic()
            if reachable != written or now - last_sync >= self._renew_interval:
                try:
                    self.sync()
                    written, last_sync = reachable, now
                except KubeError as exc:
                    logger.warning("node %s: sync failed: %s", self.name, exc)
                    written, last_sync = reachable, now - self._renew_interval + 2.0  # again in 2 s
            self._stop.wait(min(0.5, self._renew_interval))

    def sync(self) -> None:
        """One round: make sure the node exists, write its status, renew its Lease."""
        if not self._node_uid:
            self.ensure_node()
        try:
            self.update_status()
        except NotFoundError:
            logger.warning("node %s was deleted; registering it again", self.name)
            self._node_uid = ""
            self.ensure_node()
        self.renew_lease()
        observe.current().node_synced(self.name)

    # -- the Node ----------------------------------------------------------------------------
    def build_node(self) -> JsonDict:
        capabilities = self.handler.capabilities()
        capacity = dict(DEFAULT_CAPACITY)
        capacity.update(capabilities.capacity)
        annotations = {}
        addresses = [{"type": "Hostname", "address": self.name}]
        port = 0
        if self._node_ip:
            addresses.insert(0, {"type": "InternalIP", "address": self._node_ip})
            port = self._kubelet_port
        else:
            annotations[f"{names.PREFIX}/kubelet"] = "unsupported: no node IP (set POD_IP or --node-ip)"
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": {
                    names.PROVIDER_KEY: self.handler.provider.name,
                    "kubernetes.io/hostname": self.name,
                    "kubernetes.io/os": "linux",
                    "type": "virtual-kubelet",
                    "node-role.kubernetes.io/nebula": "",
                    names.MANAGED_BY_LABEL: names.MANAGED_BY_VALUE,
                },
                "annotations": annotations,
            },
            "spec": {
                "taints": [{"key": names.PROVIDER_KEY, "value": self.handler.provider.name, "effect": "NoSchedule"}]
            },
            "status": self.build_status(capacity=capacity, addresses=addresses, port=port),
        }

    def build_status(self, *, capacity: dict[str, str], addresses: list[dict[str, str]], port: int) -> JsonDict:
        return {
            "capacity": capacity,
            "allocatable": capacity,
            "addresses": addresses,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
            "nodeInfo": {
                "kubeletVersion": VERSION,
                "operatingSystem": "linux",
                "architecture": {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine()),
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": "",
                "osImage": "",
                "containerRuntimeVersion": "",
                "kubeProxyVersion": "",
            },
            "conditions": self.conditions(),
            "phase": "Running",
        }

    def conditions(self) -> list[JsonDict]:
        """Ready and ProviderReachable from the Handler's last list; transition times move
        only when a status changes."""
        ok = self.handler.last_list_ok
        now = self._now()
        if ok is True:
            ready = ("True", "KubeletReady", "provider answers; virtual node ready")
            reachable = ("True", "ProviderAnswered", f"last list took {self.handler.last_list_seconds:.3f}s")
        elif ok is None:
            ready = ("False", "ProviderNotListedYet", "waiting for the first provider list")
            reachable = ("Unknown", "ProviderNotListedYet", "waiting for the first provider list")
        else:
            error = self.handler.last_list_error
            ready = ("False", "ProviderUnreachable", f"provider does not answer: {error}")
            reachable = ("False", "ProviderUnreachable", error)
        result = []
        for kind, (status, reason, message) in (("Ready", ready), (names.CONDITION_PROVIDER_REACHABLE, reachable)):
            previous = self._conditions.get(kind)
            moved = previous is None or previous["status"] != status
            condition = {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": rfc3339(now),
                "lastTransitionTime": rfc3339(now) if moved else previous["lastTransitionTime"],  # type: ignore[index]
            }
            self._conditions[kind] = condition
            result.append(condition)
        return result

    def ensure_node(self) -> None:
        path = path_for("nodes", name=self.name)
        try:
            node = self._kube.get(path)
        except NotFoundError:
            try:
                node = self._kube.create(path_for("nodes"), self.build_node())
                logger.info("registered node %s", self.name)
            except ConflictError:
                node = self._kube.get(path)
        self._node_uid = str(node["metadata"]["uid"])

    def update_status(self) -> None:
        built = self.build_node()
        self._kube.patch(path_for("nodes", name=self.name, subresource="status"), {"status": built["status"]})

    # -- the Lease ---------------------------------------------------------------------------
    def renew_lease(self) -> None:
        path = path_for("leases", namespace=names.LEASE_NAMESPACE, name=self.name, group="coordination.k8s.io")
        renew = micro_time(self._now())
        for _ in range(5):
            if self._lease is None:
                try:
                    self._lease = self._kube.get(path)
                except NotFoundError:
                    self._lease = self._kube.create(
                        path_for("leases", namespace=names.LEASE_NAMESPACE, group="coordination.k8s.io"),
                        self._new_lease(renew),
                    )
                    return
            lease = dict(self._lease)
            lease["spec"] = dict(lease.get("spec") or {}, renewTime=renew)
            try:
                self._lease = self._kube.replace(path, lease)
                return
            except (ConflictError, NotFoundError):
                self._lease = None

    def _new_lease(self, renew: str) -> JsonDict:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": names.LEASE_NAMESPACE,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self._node_uid}],
            },
            "spec": {"holderIdentity": self.name, "leaseDurationSeconds": self._lease_duration, "renewTime": renew},
        }
