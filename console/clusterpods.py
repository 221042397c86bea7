"""The Pods and virtual Nodes of the providers this process does not serve, read from the
cluster (`ClusterView`): one list-and-watch of Pods per remote node (`spec.nodeName=`), kept
as a slim projection per Pod (`ClusterPod`), bounded; the remote Nodes read every few seconds.

Built, told the nodes its Handlers serve (`serve_here`) and stopped by the process wiring
(`nebula_site.manager.leading`) where the console serves; read by `console.rows`. Never writes
to the API; never keeps a whole Pod, an env value or a credential (I4).
Tests: tests/console/test_console_cluster_pods.py.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from kube import names, podstatus
from kube.client import GoneError, Kube, KubeError, NotFoundError, path_for
from kube.reflector import object_key
from kube.times import moment_of
from vnode.model.tracking import pod_claim

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]
T = TypeVar("T")

MAX_PODS_PER_NODE = 50_000  # the scale one manager is built for (docs/benchmarks.md); past it: counted
NODE_INTERVAL = 5.0  # seconds between reads of the remote Nodes (a kubelet writes its status every 10 s)
WATCH_TIMEOUT = 60  # seconds: a feed stopped mid-watch ends by then at the latest
NO_STATUS_YET = "Pending"  # a kubelet's phase for a Pod it took and has not started (console.rows' too)


@dataclass(frozen=True, slots=True)
class ClusterPod:
    """What the console shows of a Pod bound to a remote node: kubectl's columns worked out
    once per change, and the annotations the serving replica writes. Small strings interned."""

    uid: str
    namespace: str
    name: str
    provider: str
    node: str
    claim: str
    instance_id: str | None
    phase: str
    reason: str | None
    status: str
    ready: str
    restarts: int
    last_restart_at: datetime | None
    created_at: datetime | None
    endpoint: str | None
    capacity_type: str | None
    region: str | None
    hourly_price: str | None  # the annotation's text; console.rows parses it as for a served Pod
    pool: str | None


@dataclass(frozen=True, slots=True)
class ClusterNode:
    """A virtual Node as its serving replica last wrote it: Ready, its heartbeat, capacity,
    and since when (and why) its provider does not answer."""

    name: str
    ready: bool | None  # None: Unknown, or no Ready condition yet
    heartbeat: datetime | None
    capacity: tuple[tuple[str, str], ...]
    unreachable_since: datetime | None
    unreachable_error: str


def cluster_pod(pod: JsonDict, provider: str) -> ClusterPod:
    """The slim projection of `pod` (as JSON) bound to `provider`'s node."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    status = pod.get("status") or {}
    annotations = meta.get("annotations") or {}
    printed = podstatus.summarize(pod)
    return ClusterPod(
        uid=str(meta.get("uid") or ""),
        namespace=sys.intern(str(meta.get("namespace") or "")),
        name=str(meta.get("name") or ""),
        provider=sys.intern(provider),
        node=sys.intern(str(spec.get("nodeName") or names.node_name(provider))),
        claim=str(pod_claim(pod)),
        instance_id=annotations.get(names.INSTANCE_ID_ANNOTATION) or None,
        phase=sys.intern(str(status.get("phase") or NO_STATUS_YET)),
        reason=_interned(status.get("reason")),
        status=sys.intern(printed.status or NO_STATUS_YET),
        ready=sys.intern(printed.ready_text),
        restarts=printed.restarts,
        last_restart_at=printed.last_restart,
        created_at=podstatus.created_at(pod),
        endpoint=annotations.get(names.ENDPOINT_ANNOTATION) or None,
        capacity_type=_interned(annotations.get(names.CAPACITY_TYPE_ANNOTATION)),
        region=_interned(annotations.get(names.REGION_ANNOTATION)),
        hourly_price=_interned(annotations.get(names.HOURLY_PRICE_ANNOTATION)),
        pool=_interned(annotations.get(names.POOL_ANNOTATION)),
    )


def cluster_node(node: JsonDict) -> ClusterNode:
    """The slim projection of a virtual Node (as JSON): its Ready and ProviderReachable conditions."""
    status = node.get("status") or {}
    conditions = {str(c.get("type")): c for c in status.get("conditions") or [] if isinstance(c, dict)}
    ready, reachable = conditions.get("Ready") or {}, conditions.get(names.CONDITION_PROVIDER_REACHABLE) or {}
    cut = reachable.get("status") == "False"
    return ClusterNode(
        name=str((node.get("metadata") or {}).get("name") or ""),
        ready={"True": True, "False": False}.get(str(ready.get("status"))),
        heartbeat=moment_of(ready.get("lastHeartbeatTime")),
        capacity=tuple(sorted((str(k), str(v)) for k, v in (status.get("capacity") or {}).items())),
        unreachable_since=moment_of(reachable.get("lastTransitionTime")) if cut else None,
        unreachable_error=str(reachable.get("message") or "") if cut else "",
    )


class Feed(Generic[T]):
    """One list-and-watch into a dict of slim values by namespace/name, at most `bound` kept:
    past it an object is counted (`unlisted`), not kept, and a kept one deleted re-lists so
    the next one shows. Like `kube.reflector.Reflector`, which keeps whole objects instead."""

    def __init__(
        self,
        kube: Kube,
        path: str,
        project: Callable[[JsonDict], T],
        *,
        bound: int,
        field_selector: str = "",
        label_selector: str = "",
        watch_timeout: int = WATCH_TIMEOUT,
        max_backoff: float = 10.0,
    ) -> None:
        self._kube = kube
        self._path = path
        self._project = project
        self._bound = bound
        self._selectors = {"fieldSelector": field_selector, "labelSelector": label_selector}
        self._watch_timeout = watch_timeout
        self._max_backoff = max_backoff
        self._items: dict[str, T] = {}
        self._unlisted = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.synced = threading.Event()
        self.what = f"{path}?{field_selector or label_selector}"

    def start(self) -> None:
        threading.Thread(target=self._run, name=f"console feed {self.what}", daemon=True).start()

    def stop(self) -> None:
        """Nothing is kept or changed from now on; the thread ends at its watch's next event
        or timeout (it only reads)."""
        with self._lock:
            self._stop.set()
            self._items, self._unlisted = {}, 0

    def values(self) -> list[T]:
        with self._lock:
            return list(self._items.values())

    @property
    def unlisted(self) -> int:
        with self._lock:
            return self._unlisted

    def _run(self) -> None:
        backoff = 0.2
        while not self._stop.is_set():
            try:
                version: str | None = self._relist()
                backoff = 0.2
                while version is not None and not self._stop.is_set():
                    version = self._watch(version)
            except GoneError:
                logger.info("watch of %s expired; re-listing", self.what)
            except KubeError as exc:
                if self._stop.is_set():
                    return  # stopped mid-watch: what failed is no longer wanted
                logger.warning("list/watch of %s failed: %s; retrying in %.1fs", self.what, exc, backoff)
                self._stop.wait(backoff)
                backoff = min(self._max_backoff, backoff * 2)

    def _relist(self) -> str:
        items, version = self._kube.list(self._path, **self._selectors)
        fresh = {object_key(obj): self._project(obj) for obj in items[: self._bound]}
        with self._lock:
            if not self._stop.is_set():
                self._items, self._unlisted = fresh, max(0, len(items) - self._bound)
        if len(items) > self._bound:
            logger.warning("%s holds %d objects; the console shows %d of them", self.what, len(items), self._bound)
        self.synced.set()
        return version

    def _watch(self, version: str) -> str | None:
        """Apply the watch's events; None when a re-list must fill a freed place."""
        started = time.monotonic()
        for kind, obj in self._kube.watch(
            self._path, resource_version=version, timeout_seconds=self._watch_timeout, **self._selectors
        ):
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if kind == "BOOKMARK":
                continue
            key = object_key(obj)
            projected = None if kind == "DELETED" else self._project(obj)
            with self._lock:
                if self._stop.is_set():
                    return None
                if projected is None:
                    if self._items.pop(key, None) is not None:
                        if self._unlisted:
                            return None  # a place freed: a re-list shows the next one
                    elif self._unlisted:
                        self._unlisted -= 1
                elif key in self._items or len(self._items) < self._bound:
                    self._items[key] = projected
                elif kind == "ADDED":
                    self._unlisted += 1
        if time.monotonic() - started < 0.05:
            self._stop.wait(0.2)  # a server that ends watches at once must not make us spin
        return version


class ClusterView:
    """The configured providers' virtual nodes that no local Handler serves (`serve_here`
    says which are served): their Pods, watched, and their Node objects, read every
    `node_interval` seconds (a `get` each: the manager's ClusterRole lists no Nodes)."""

    def __init__(
        self,
        kube: Kube,
        providers: Iterable[str],
        *,
        max_pods: int = MAX_PODS_PER_NODE,
        watch_timeout: int = WATCH_TIMEOUT,
        node_interval: float = NODE_INTERVAL,
    ) -> None:
        self._kube = kube
        self._providers = {names.node_name(p): p for p in providers}  # node name -> provider
        self._max_pods = max_pods
        self._watch_timeout = watch_timeout
        self._node_interval = node_interval
        self._pods: dict[str, Feed[ClusterPod]] = {}  # remote node name -> its Pods
        self._nodes: dict[str, ClusterNode | None] = {}  # remote node name -> its Node (None: none yet)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._reader: threading.Thread | None = None

    def serve_here(self, nodes: Iterable[str]) -> None:
        """`nodes` are served by this process now: every other configured node is watched from
        now on, and a node served here is no longer (its rows go at once)."""
        with self._lock:
            if self._stop.is_set():
                return
            remote = set(self._providers) - set(nodes)
            for node in sorted(set(self._pods) - remote):
                self._pods.pop(node).stop()
                self._nodes.pop(node, None)
            for node in sorted(remote - set(self._pods)):
                feed = Feed(
                    self._kube,
                    path_for("pods"),
                    functools.partial(cluster_pod, provider=self._providers[node]),
                    bound=self._max_pods,
                    field_selector=f"spec.nodeName={node}",
                    watch_timeout=self._watch_timeout,
                )
                self._pods[node] = feed
                feed.start()
            if remote and self._reader is None:
                self._reader = threading.Thread(target=self._read_nodes, name="console remote nodes", daemon=True)
                self._reader.start()
        self._wake.set()

    def remote(self) -> dict[str, str]:
        """The watched nodes, each with its provider."""
        with self._lock:
            return {node: self._providers[node] for node in sorted(self._pods)}

    def pods(self) -> list[ClusterPod]:
        with self._lock:
            feeds = list(self._pods.values())
        return [pod for feed in feeds for pod in feed.values()]

    def nodes(self) -> dict[str, ClusterNode]:
        """The remote nodes' Node objects by name (a node not registered yet has none)."""
        with self._lock:
            return {name: node for name, node in self._nodes.items() if node is not None}

    def unlisted(self) -> int:
        """Pods on remote nodes past the bound: counted, not shown."""
        with self._lock:
            return sum(feed.unlisted for feed in self._pods.values())

    def synced(self) -> bool:
        """Every watch has listed once and every remote Node was read once."""
        with self._lock:
            return set(self._nodes) >= set(self._pods) and all(f.synced.is_set() for f in self._pods.values())

    def stop(self) -> None:
        """Every watch stops; the view is empty and stays so."""
        with self._lock:
            self._stop.set()
            for feed in self._pods.values():
                feed.stop()
            self._pods, self._nodes = {}, {}
        self._wake.set()

    def _read_nodes(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            for node in self.remote():
                try:
                    seen: ClusterNode | None = cluster_node(self._kube.get(path_for("nodes", name=node)))
                except NotFoundError:
                    seen = None
                except KubeError as exc:
                    logger.warning("reading node %s for the console failed: %s; keeping what was read", node, exc)
                    continue
                with self._lock:
                    if node in self._pods:
                        self._nodes[node] = seen
            self._wake.wait(self._node_interval)


def _interned(value: Any) -> str | None:
    return sys.intern(str(value)) if value not in (None, "") else None
