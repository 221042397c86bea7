"""The node controller: registers `nebula-<provider>`, renews its Lease, keeps Ready honest.

Started by the Runner. Every `renew_interval` it renews the Lease in `kube-node-lease`
and patches the node's status: Ready is True only while the provider's last list
succeeded, and the `ProviderReachable` condition says why when it did not. A node someone
deleted is created again. It publishes only addresses that reach its kubelet listener, and
writes the kubelet's NodeReady / NodeNotReady Events when Ready changes; its `nodeInfo` is a
kubelet's (`node_info`), and it tells the PodWriter the node's addresses (every Pod's hostIP). It
keeps the node's `nebula.io/billing-seen-at` (written at most once a minute; read back at start-up,
before Pods are reconciled: vnode.model.billing, tests/vnode/test_billing_devcluster.py).
Never touches Pods. Tests: tests/vnode/test_controllers.py, tests/vnode/test_nodecontroller_addresses.py,
tests/vnode/test_nodecontroller_info.py.
"""

from __future__ import annotations

import functools
import logging
import platform
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kube import leases, names, observe
from kube.client import ConflictError, Kube, KubeError, NotFoundError, path_for
from kube.events import EventRecorder
from kube.times import micro_time, parse_rfc3339, rfc3339
from kube.worker import join_within
from vnode.handler import Handler

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]
NEBULA_VERSION = "0.1.0"  # pyproject.toml's (tests/vnode/test_nodecontroller_info.py checks they agree)
KUBELET_VERSION = f"v{NEBULA_VERSION}-nebula"  # the v-form kubectl prints in VERSION
RUNTIME_VERSION = f"nebula://{NEBULA_VERSION}"  # the kubelet's `<runtime>://<version>`
GOARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "armv7l": "arm",
          "i386": "386", "i686": "386", "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}  # fmt: skip
DEFAULT_CAPACITY = {"cpu": "1k", "memory": "10Ti", "pods": "1k", "nvidia.com/gpu": "1k"}
MANAGED_CONDITIONS = ("Ready", names.CONDITION_PROVIDER_REACHABLE)


def node_addresses(node_ip: str | None, dns_name: str | None) -> list[dict[str, str]]:
    """The node's `status.addresses`: only those that reach its kubelet listener.

    The API server dials the first address of its preferred type (kube-apiserver's default
    order: Hostname, InternalDNS, InternalIP, ExternalDNS, ExternalIP), with no fallback to
    the next, so an address that resolves nowhere (the node name as a Hostname, say) would
    break `kubectl logs` and `exec`. Hence no Hostname; a configured DNS name is published as
    InternalDNS: a name that resolves to the listener's in-cluster address.
    """
    addresses = []
    if node_ip:
        addresses.append({"type": "InternalIP", "address": node_ip})
    if dns_name:
        addresses.append({"type": "InternalDNS", "address": dns_name})
    return addresses


def _first_line(*paths: str) -> str:
    for path in paths:
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.readline().strip()
        except OSError:
            continue
    return ""


@functools.cache
def node_info() -> dict[str, str]:
    """`status.nodeInfo`, as a kubelet fills it, for the machine this virtual kubelet runs on
    (the node's address and its kubelet endpoint are this machine's; its Pods run at the
    provider): Nebula's version as kubeletVersion and runtime, GOARCH's name of the machine,
    the kernel, the OS image, and the machine's ids where the system tells them ("" where it
    does not: a kubelet reads the same files). Read once."""
    try:
        os_image = platform.freedesktop_os_release().get("PRETTY_NAME", "")
    except OSError:
        os_image = ""
    machine = platform.machine()
    return {
        "kubeletVersion": KUBELET_VERSION,
        "containerRuntimeVersion": RUNTIME_VERSION,
        "operatingSystem": "linux",
        "architecture": GOARCH.get(machine.lower(), machine.lower()),
        "kernelVersion": platform.release(),
        "osImage": os_image,
        "machineID": _first_line("/etc/machine-id", "/var/lib/dbus/machine-id"),
        "systemUUID": _first_line("/sys/class/dmi/id/product_uuid").lower(),
        "bootID": _first_line("/proc/sys/kernel/random/boot_id"),
        "kubeProxyVersion": "",
    }


def ready_event(published: str | None, written: str) -> str | None:
    """The Event reason for writing Ready status `written` over `published` (None: no Ready
    condition known yet), as the kubelet's Ready setter decides: an Event only when the status
    changes, NodeReady for True and NodeNotReady for anything else; a first registration
    writes NodeReady if it is Ready and nothing otherwise."""
    if written == published:
        return None
    if written == "True":
        return names.EVENT_NODE_READY
    return None if published is None else names.EVENT_NODE_NOT_READY


class NodeController:
    def __init__(
        self,
        handler: Handler,
        *,
        kube: Kube,
        node_ip: str | None,
        kubelet_port: int,
        node_dns_name: str | None = None,
        events: EventRecorder | None = None,
        lease_duration: int = 40,
        renew_interval: float = 10.0,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.handler = handler
        self._kube = kube
        self._node_ip = node_ip
        self._node_dns_name = node_dns_name
        self._events = events
        self._kubelet_port = kubelet_port
        self._lease_duration = lease_duration
        self._renew_interval = renew_interval
        self._now = now
        self._node_uid = ""
        self._lease: JsonDict | None = None
        self._conditions: dict[str, JsonDict] = {}
        self._published_ready: str | None = None  # the Ready status the API server holds, as far as known
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # The Pods on this node read its address as their hostIP (the writer stamps it).
        handler.writer.advertise_node(node_addresses(node_ip, node_dns_name))

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
            reachable = self.handler.inventory.last_list_ok
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
        """One round: make sure the node exists, write its status, renew its Lease, and the
        node's billing-seen-at when due."""
        if not self._node_uid:
            try:
                self.ensure_node()
            finally:  # found or not: the pod controller need not wait for it any longer
                self.handler.billing_anchor_read.set()
        try:
            self.update_status()
        except NotFoundError:
            logger.warning("node %s was deleted; registering it again", self.name)
            self._node_uid = ""
            self.ensure_node()
        self.renew_lease()
        self.write_billing_seen()
        observe.current().node_synced(self.name)

    # -- the Node ----------------------------------------------------------------------------
    def build_node(self) -> JsonDict:
        capabilities = self.handler.capabilities()
        capacity = dict(DEFAULT_CAPACITY)
        capacity.update(capabilities.capacity)
        annotations = {}
        addresses = node_addresses(self._node_ip, self._node_dns_name)
        port = self._kubelet_port if addresses else 0
        if not addresses:
            annotations[f"{names.PREFIX}/kubelet"] = (
                "unsupported: no node address (set POD_IP, --node-ip or --node-dns-name)"
            )
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
            "nodeInfo": dict(node_info()),
            "conditions": self.conditions(),
            "phase": "Running",
        }

    def conditions(self) -> list[JsonDict]:
        """Ready and ProviderReachable from the Handler's last list; transition times move
        only when a status changes. Before the first list a node found registered keeps the
        conditions it has (a restart or a new leader is no news about the provider, and a
        NotReady flap would taint the node), while a new node is not Ready yet."""
        ok = self.handler.inventory.last_list_ok
        now = self._now()
        if ok is True:
            ready = ("True", "KubeletReady", "provider answers; virtual node ready")
            reachable = ("True", "ProviderAnswered", f"last list took {self.handler.inventory.last_list_seconds:.3f}s")
        elif ok is None:
            ready = self._kept("Ready") or ("False", "ProviderNotListedYet", "waiting for the first provider list")
            reachable = self._kept(names.CONDITION_PROVIDER_REACHABLE) or (
                "Unknown",
                "ProviderNotListedYet",
                "waiting for the first provider list",
            )
        else:
            error = self.handler.inventory.last_list_error
            ready = ("False", "ProviderUnreachable", f"provider does not answer: {error}")
            reachable = ("False", "ProviderUnreachable", error)
        result = []
        for kind, (status, reason, message) in (("Ready", ready), (names.CONDITION_PROVIDER_REACHABLE, reachable)):
            previous = self._conditions.get(kind) or {}
            kept = previous.get("lastTransitionTime") if previous.get("status") == status else None
            condition = {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": rfc3339(now),
                "lastTransitionTime": kept or rfc3339(now),
            }
            self._conditions[kind] = condition
            result.append(condition)
        return result

    def _kept(self, kind: str) -> tuple[str, str, str] | None:
        previous = self._conditions.get(kind)
        if previous is None:
            return None
        return str(previous.get("status")), str(previous.get("reason", "")), str(previous.get("message", ""))

    def ensure_node(self) -> None:
        """Find or register the node. A found node's conditions are taken as the last published
        ones (transition times and Ready Events carry over a restart); a new node has none."""
        path = path_for("nodes", name=self.name)
        try:
            node = self._kube.get(path)
        except NotFoundError:
            self._conditions, self._published_ready = {}, None
            built = self.build_node()
            try:
                node = self._kube.create(path_for("nodes"), built)
            except ConflictError:
                node = self._kube.get(path)
            else:
                logger.info("registered node %s", self.name)
                self._node_uid = str(node["metadata"]["uid"])
                self._published(built["status"])
                return
        self._node_uid = str(node["metadata"]["uid"])
        self._restore_billing_seen(node)
        for condition in (node.get("status") or {}).get("conditions") or []:
            if isinstance(condition, dict) and condition.get("type") in MANAGED_CONDITIONS:
                self._conditions[str(condition["type"])] = dict(condition)
                if condition["type"] == "Ready":
                    self._published_ready = str(condition.get("status"))

    def _restore_billing_seen(self, node: JsonDict) -> None:
        """The node's `nebula.io/billing-seen-at` as found: when every open span was last seen
        billing before this process (a span whose instance is found gone closes there)."""
        text = ((node.get("metadata") or {}).get("annotations") or {}).get(names.BILLING_SEEN_ANNOTATION)
        try:
            at = parse_rfc3339(str(text)).timestamp() if text else None
        except ValueError:
            logger.warning("node %s: %s is not a time: %r", self.name, names.BILLING_SEEN_ANNOTATION, text)
            return
        if at is not None:
            self.handler.restore_billing_anchor(at)

    def write_billing_seen(self) -> None:
        """The node's billing-seen-at, at most once a minute (one annotation per node)."""
        at = self.handler.billing_seen.due()
        if at is None:
            return
        value = micro_time(datetime.fromtimestamp(at, UTC))
        self._kube.patch(
            path_for("nodes", name=self.name), {"metadata": {"annotations": {names.BILLING_SEEN_ANNOTATION: value}}}
        )
        self.handler.billing_seen.written(at)

    def update_status(self) -> None:
        built = self.build_node()
        self._kube.patch(path_for("nodes", name=self.name, subresource="status"), {"status": built["status"]})
        self._published(built["status"])

    def _published(self, status: JsonDict) -> None:
        """`status` was written: the Ready Event when Ready changed."""
        ready = next((str(c["status"]) for c in status["conditions"] if c["type"] == "Ready"), None)
        if ready is None:
            return
        reason = ready_event(self._published_ready, ready)
        self._published_ready = ready
        if reason is not None and self._events is not None:
            node = {"metadata": {"name": self.name, "uid": self._node_uid}}
            self._events.node(node, "Normal", reason, f"Node {self.name} status is now: {reason}")

    # -- the Lease ---------------------------------------------------------------------------
    def renew_lease(self) -> None:
        path = leases.lease_path(names.LEASE_NAMESPACE, self.name)
        renew = micro_time(self._now())
        for _ in range(5):
            if self._lease is None:
                try:
                    self._lease = self._kube.get(path)
                except NotFoundError:
                    self._lease = self._kube.create(
                        leases.lease_path(names.LEASE_NAMESPACE),
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
            "apiVersion": leases.API_VERSION,
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": names.LEASE_NAMESPACE,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self._node_uid}],
            },
            "spec": {"holderIdentity": self.name, "leaseDurationSeconds": self._lease_duration, "renewTime": renew},
        }
