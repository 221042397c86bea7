"""The Handler: one per provider, the bridge between Pods and the provider's instances.

Called by the pod controller (create, update, delete, lookup, flush) and by its own poll
loop (`poll_once`, one `provider.list()` per tick). Owns the tracked map, the only
in-memory record of which instance serves which Pod. Writes to the API only the Pod's
annotations, its status (metadata first) and the connect Secret; never deletes Pods.

Invariant (I2): the instance id is in the tracked map and on the Pod's annotations before
`create_pod` returns; see tests/vnode/test_invariants.py::test_I2_*.
Invariant (I3): `Unavailable` never leads to a create, a Failed phase or a delete; see
tests/vnode/test_invariants.py::test_I3_*.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from kube import names, observe
from kube.client import Kube
from kube.events import EventRecorder
from kube.times import rfc3339
from providers import errors
from providers.base import (
    Attacher,
    Capabilities,
    ClaimName,
    Executor,
    Instance,
    InstanceId,
    InstanceState,
    LogOptions,
    LogStream,
    LogStreamer,
    Process,
    Provider,
    ProvisionRequest,
    ProvisionResult,
)
from providers.podspec import pod_spec_from_dict
from vnode import status
from vnode.blocklister import Blocklister
from vnode.env import EnvError, resolve_env
from vnode.podwriter import PodWriter
from vnode.tracking import Lookup, RetryLater, Tracked, pod_claim, pod_key, tier_from

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]
DEFAULT_BLOCK_TTL = 300.0
# What a provider must implement for each kubelet streaming capability (`kubelet_instance`
# checks it, so the methods below may cast).
_CAPABILITIES: dict[str, type] = {"logs": LogStreamer, "exec": Executor, "attach": Attacher}


class Handler:
    """Thread-safe; the pod controller never runs two operations on one Pod at once."""

    def __init__(
        self,
        provider: Provider,
        *,
        kube: Kube,
        events: EventRecorder,
        blocklister: Blocklister | None = None,
        block_ttl: float = DEFAULT_BLOCK_TTL,
        poll_interval: float | None = None,
        snapshot_ttl: float = 2.0,
        monotonic: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.provider = provider
        self._events = events
        self.writer = PodWriter(kube, events)
        self._blocklister = blocklister
        self._block_ttl = block_ttl
        self._poll_interval = poll_interval
        self._snapshot_ttl = snapshot_ttl
        self._monotonic = monotonic
        self._now = now
        self._tracked: dict[str, Tracked] = {}
        self._lock = threading.Lock()
        self._list_lock = threading.Lock()
        self._snapshot: dict[ClaimName, Instance] | None = None
        self._snapshot_at = -1e18
        self._capabilities: Capabilities | None = None
        self.last_list_ok: bool | None = None  # None until the first list
        self.last_list_error = ""
        self.last_list_seconds = 0.0
        self._orphan_suspects: set[InstanceId] = set()

    # -- identity --------------------------------------------------------------------------
    @property
    def node_name(self) -> str:
        return names.node_name(self.provider.name)

    def capabilities(self) -> Capabilities:
        if self._capabilities is None:
            self._capabilities = self.provider.capabilities()
        return self._capabilities

    @property
    def poll_interval(self) -> float:
        return self._poll_interval or self.capabilities().poll_interval

    def tracks(self, namespace: str, name: str) -> bool:
        with self._lock:
            return f"{namespace}/{name}" in self._tracked

    def tracked(self, key: str) -> Tracked | None:
        with self._lock:
            return self._tracked.get(key)

    def tracked_claims(self) -> set[ClaimName]:
        with self._lock:
            return {t.claim for t in self._tracked.values()}

    def tracked_entries(self) -> list[Tracked]:
        """Every tracked Pod's record, for readers (the console's mirror); never mutate them."""
        with self._lock:
            return list(self._tracked.values())

    def last_instances(self) -> dict[ClaimName, Instance]:
        """What the last successful provider.list() returned, by claim (orphans included)."""
        return dict(self._snapshot or {})

    def get_pods(self) -> list[JsonDict]:
        """The Pods this node serves, with the status Nebula computed for them."""
        with self._lock:
            return [dict(t.pod, status=t.desired_status or t.pod.get("status") or {}) for t in self._tracked.values()]

    def get_pod_status(self, namespace: str, name: str) -> JsonDict | None:
        entry = self.tracked(f"{namespace}/{name}")
        return None if entry is None else entry.desired_status

    # -- the provider's instances ------------------------------------------------------------
    def _list(self) -> dict[ClaimName, Instance]:
        """One provider.list(); raises errors.Unavailable. Feeds the re-adoption snapshot."""
        started = self._monotonic()
        try:
            instances = self.provider.list()
        except errors.ProviderError as exc:
            self.last_list_ok, self.last_list_error = False, f"{type(exc).__name__}: {exc}"
            self.last_list_seconds = self._monotonic() - started
            observe.current().listed(self.provider.name, self.last_list_seconds, ok=False)
            raise
        self.last_list_seconds = self._monotonic() - started
        self.last_list_ok, self.last_list_error = True, ""
        observe.current().listed(self.provider.name, self.last_list_seconds, ok=True)
        snapshot = {i.claim: i for i in instances}
        self._snapshot, self._snapshot_at = snapshot, self._monotonic()
        return snapshot

    def lookup(self, pod: Mapping[str, Any]) -> tuple[Lookup, Instance | None]:
        """Is there an instance for this Pod's claim? Three outcomes stay distinct (I3)."""
        claim = pod_claim(pod)
        with self._list_lock:  # single flight: 500 cold Pods share one list()
            snapshot = self._snapshot
            if snapshot is None or self._monotonic() - self._snapshot_at > self._snapshot_ttl:
                try:
                    snapshot = self._list()
                except errors.ProviderError:
                    return Lookup.UNKNOWN, None
        instance = snapshot.get(claim)
        return (Lookup.FOUND, instance) if instance is not None else (Lookup.NOT_FOUND, None)

    def adopt(self, pod: JsonDict, instance: Instance) -> None:
        """Track an instance found again after a restart (no provider call)."""
        entry = self._track(pod)
        entry.instance_id = instance.id
        entry.provisioned_at = self._monotonic()
        self._observe(entry, instance)

    # -- create / update / delete -------------------------------------------------------------
    def _track(self, pod: JsonDict) -> Tracked:
        meta = pod.get("metadata") or {}
        key = pod_key(pod)
        with self._lock:
            entry = self._tracked.get(key)
            if entry is None or entry.uid != meta.get("uid"):
                entry = Tracked(
                    namespace=str(meta.get("namespace")),
                    name=str(meta.get("name")),
                    uid=str(meta.get("uid")),
                    claim=pod_claim(pod),
                    pod=pod,
                )
                self._tracked[key] = entry
            entry.pod = pod
            return entry

    def update_pod(self, pod: JsonDict) -> None:
        """A Pod's spec or metadata changed: nothing changes at the provider."""
        entry = self.tracked(pod_key(pod))
        if entry is not None and entry.uid == (pod.get("metadata") or {}).get("uid"):
            entry.pod = pod

    def create_pod(self, pod: JsonDict) -> None:
        """Provision the Pod's instance. Returns once the instance id is recorded in memory
        and on the Pod (I2); raises RetryLater when it must be tried again."""
        try:
            env = resolve_env(pod, read_secret=self.writer.read_secret, read_configmap=self.writer.read_configmap)
        except EnvError as exc:
            self._events.pod(pod, "Warning", exc.reason, str(exc))
            raise RetryLater(str(exc), missing=exc.missing) from exc
        for reason, message in env.warnings:
            self._events.pod(pod, "Warning", reason, message)
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        request = ProvisionRequest(
            claim=pod_claim(pod),
            capacity_type=tier_from(annotations.get(names.CAPACITY_TYPE_ANNOTATION)),
            region=annotations.get(names.REGION_ANNOTATION) or None,
            env=env.values,
        )
        started, who = self._monotonic(), observe.Subject(pod_key(pod), request.claim)
        try:
            spec = pod_spec_from_dict(pod)
            result = self.provider.provision(spec, request)
        except ValueError as exc:
            observe.current().provisioned(self.provider.name, "invalid", self._monotonic() - started, who)
            self._refuse(pod, names.REASON_CONFIG_ERROR, str(exc))
            return
        except errors.Unavailable as exc:
            observe.current().provisioned(self.provider.name, "unavailable", self._monotonic() - started, who)
            self._events.pod(pod, "Warning", names.EVENT_PROVISION_RETRYING, f"provider unreachable: {exc}")
            raise RetryLater(f"provider unreachable: {exc}", delay=exc.retry_after) from exc
        except errors.Refused as exc:
            observe.current().provisioned(self.provider.name, "refused", self._monotonic() - started, who)
            scope = self.provider.classify_provision_error(
                exc, accelerator=spec.accelerator, tier=request.capacity_type, region=request.region
            )
            if self._blocklister is not None:
                pool = ((pod.get("metadata") or {}).get("labels") or {}).get(names.POOL_LABEL)
                self._blocklister.record(self.provider.name, scope, pool=pool)
            self._refuse(pod, names.REASON_PROVISION_FAILED, f"{type(exc).__name__}: {exc}")
            return
        except (errors.InvalidRequest, errors.NotSupported, errors.NotFound) as exc:
            observe.current().provisioned(self.provider.name, "invalid", self._monotonic() - started, who)
            self._refuse(pod, names.REASON_PROVISION_FAILED, f"{type(exc).__name__}: {exc}")
            return
        except errors.ProviderError as exc:
            observe.current().provisioned(self.provider.name, "error", self._monotonic() - started, who)
            raise RetryLater(f"{type(exc).__name__}: {exc}") from exc
        observe.current().provisioned(self.provider.name, "ok", self._monotonic() - started, who.on(result.instance_id))
        self._record_instance(pod, result)

    def _record_instance(self, pod: JsonDict, result: ProvisionResult) -> None:
        entry = self._track(pod)
        entry.instance_id = result.instance_id
        entry.provisioned_at = self._monotonic()
        entry.desired_annotations[names.INSTANCE_ID_ANNOTATION] = result.instance_id
        if result.endpoint:
            entry.desired_annotations[names.ENDPOINT_ANNOTATION] = result.endpoint
        self.writer.flush_annotations(entry)  # I2: on the Pod before we report success
        if result.credential is not None:
            self.writer.write_connect_secret(pod, result.credential.data)
        if not self.capabilities().pulls_images:
            image = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("image", "")
            message = f"{self.provider.name} does not pull container images; image {image!r} is not used"
            self._events.pod(pod, "Normal", names.EVENT_IMAGE_NOT_USED, message)
        try:
            instance = self.provider.get(result.instance_id)
        except errors.ProviderError:
            instance = None
        if instance is None:
            state = InstanceState.INITIALIZING if result.reserved else InstanceState.PROVISIONING
            instance = Instance(result.instance_id, entry.claim, state, created_at=self._now())
        self._observe(entry, instance)

    def _refuse(self, pod: JsonDict, reason: str, message: str) -> None:
        """The provider will not serve this Pod: Failed, with an Event saying why."""
        entry = self._track(pod)
        entry.terminal = True
        entry.desired_status = status.failed_status(pod, reason=reason, message=message, now=self._now())
        self._events.pod(pod, "Warning", reason, message)

    def delete_pod(self, key: str, *, uid: str | None = None) -> bool:
        """Terminate the Pod's instance (idempotent). True once the instance is gone and
        the Pod dropped from tracking; False while it is going; RetryLater if we could not
        ask (I3: the Pod object stays until the provider answers)."""
        entry = self.tracked(key)
        if entry is None or (uid is not None and entry.uid != uid):
            return True
        if entry.instance_id is None:
            self._forget(key, entry)
            return True
        who = observe.Subject(key, entry.claim, entry.instance_id)
        try:
            self.provider.terminate(entry.instance_id)
            observe.current().terminated(self.provider.name, "ok", who)
            gone = self.provider.get(entry.instance_id) is None
        except errors.Unavailable as exc:
            observe.current().terminated(self.provider.name, "unavailable", who)
            raise RetryLater(f"provider unreachable: {exc}", delay=exc.retry_after) from exc
        except errors.ProviderError as exc:
            observe.current().terminated(self.provider.name, "error", who)
            raise RetryLater(f"{type(exc).__name__}: {exc}") from exc
        if gone:
            self._forget(key, entry)
        return gone

    def terminate_for_pod(self, pod: Mapping[str, Any]) -> bool:
        """Terminate the instance of a Pod this Handler may not track (cold map, or the Pod
        object is already gone). True once gone; RetryLater if we could not ask."""
        key = pod_key(pod)
        if self.tracked(key) is None:
            found, instance = self.lookup(pod)
            if found is Lookup.UNKNOWN:
                raise RetryLater("provider unreachable: cannot tell whether the Pod has an instance")
            if instance is None:
                return True
            self.adopt(dict(pod), instance)
        return self.delete_pod(key)

    def _forget(self, key: str, entry: Tracked) -> None:
        with self._lock:
            if self._tracked.get(key) is entry:
                del self._tracked[key]

    # -- observing ---------------------------------------------------------------------------
    def _observe(self, entry: Tracked, instance: Instance) -> bool:
        """Recompute the Pod's desired metadata and status; False if the facts are unchanged."""
        if (instance is entry.last_instance or instance == entry.last_instance) and entry.desired_status is not None:
            return False
        entry.last_instance = instance
        if instance.endpoint:
            entry.desired_annotations[names.ENDPOINT_ANNOTATION] = instance.endpoint
        entry.desired_annotations[names.INSTANCE_ID_ANNOTATION] = instance.id
        entry.desired_status = status.status_from_instance(entry.pod, instance, now=self._now())
        return True

    def poll_once(self, live_claims: Iterable[ClaimName] | None = None) -> list[str]:
        """One tick: one provider.list(), statuses recomputed, orphans swept.

        Returns the keys whose desired metadata or status changed (to be flushed). A failed
        list changes nothing (I3). `live_claims` (the claims of every Pod on the node, or
        None while the Pod cache is not synced) enables the orphan sweep.
        """
        begun = self._monotonic()
        try:
            snapshot = self._list()
        except errors.ProviderError as exc:
            logger.warning("list on %s failed; nothing changes this tick: %s", self.provider.name, exc)
            return []
        changed: list[str] = []
        lag = self.capabilities().list_lag
        for entry in self.tracked_entries():
            if entry.terminal or entry.instance_id is None:
                continue
            instance = snapshot.get(entry.claim)
            moved = False
            if instance is not None:
                moved = self._observe(entry, instance)
            # Only a list begun `lag` after the instance was recorded can say it is gone: one
            # begun earlier may have been read before the provision completed.
            elif begun - entry.provisioned_at >= lag and entry.last_instance is not None:
                entry.last_instance = None
                entry.desired_status = status.lost_status(entry.pod, now=self._now())
                moved = True
            if moved or self.writer.needs_flush(entry):
                changed.append(entry.key)
        if live_claims is not None:
            self._sweep_orphans(snapshot, set(live_claims) | self.tracked_claims())
        return changed

    def _sweep_orphans(self, snapshot: Mapping[ClaimName, Instance], live: set[ClaimName]) -> None:
        """Terminate instances whose claim matched no live Pod on two successful lists in a row."""
        suspects = {i.id for claim, i in snapshot.items() if claim not in live}
        confirmed = suspects & self._orphan_suspects
        self._orphan_suspects = suspects - confirmed
        for instance_id in sorted(confirmed):
            try:
                self.provider.terminate(instance_id)
            except errors.ProviderError as exc:
                logger.warning("orphan %s on %s: terminate failed: %s", instance_id, self.provider.name, exc)
                self._orphan_suspects.add(instance_id)
                continue
            logger.info("terminated orphan instance %s on %s (no live Pod claims it)", instance_id, self.provider.name)
            observe.current().orphan_swept(self.provider.name, observe.Subject(instance=instance_id))
            node = {"metadata": {"name": self.node_name, "uid": self.node_name}}
            self._events.node(
                node, "Normal", names.EVENT_ORPHAN_TERMINATED, f"terminated instance {instance_id}: no Pod claims it"
            )

    def flush(self, key: str, current: Mapping[str, Any] | None) -> None:
        """Write the Pod's pending metadata, then its status (see PodWriter.flush)."""
        entry = self.tracked(key)
        if entry is not None:
            self.writer.flush(entry, current)

    # -- the kubelet API (vnode.kubelet calls these on worker threads, never the reactor) ----
    def kubelet_instance(self, namespace: str, name: str, container: str, *, capability: str) -> InstanceId:
        """The instance serving the Pod's container for `capability` (`logs`, `exec` or
        `attach`); NotFound or NotSupported with the reason otherwise."""
        entry = self.tracked(f"{namespace}/{name}")
        if entry is None:
            raise errors.NotFound(f'pod "{namespace}/{name}" is not on node {self.node_name}')
        if entry.instance_id is None:
            raise errors.NotFound(f'pod "{namespace}/{name}" has no instance yet: nothing to {capability}')
        containers = ((entry.pod.get("spec") or {}).get("containers")) or [{}]
        if container != containers[0].get("name"):
            # Providers run the Pod's first container only (providers.podspec).
            raise errors.NotFound(f'container "{container}" not found in pod "{namespace}/{name}"')
        if not isinstance(self.provider, _CAPABILITIES[capability]):
            raise errors.NotSupported(f"provider {self.provider.name!r} does not support {capability}")
        return entry.instance_id

    def get_container_logs(self, namespace: str, name: str, container: str, options: LogOptions) -> LogStream:
        """The container's log as the provider streams it; NotSupported without LogStreamer."""
        instance_id = self.kubelet_instance(namespace, name, container, capability="logs")
        return cast(LogStreamer, self.provider).logs(instance_id, options)

    def run_in_container(
        self, namespace: str, name: str, container: str, command: Sequence[str], *, tty: bool, stdin: bool
    ) -> Process:
        """Start a command in the Pod's instance; NotSupported without Executor."""
        instance_id = self.kubelet_instance(namespace, name, container, capability="exec")
        return cast(Executor, self.provider).exec(instance_id, list(command), tty=tty, stdin=stdin)

    def attach_to_container(self, namespace: str, name: str, container: str, *, tty: bool, stdin: bool) -> Process:
        """Attach to the Pod's workload; NotSupported without Attacher."""
        instance_id = self.kubelet_instance(namespace, name, container, capability="attach")
        return cast(Attacher, self.provider).attach(instance_id, stdin=stdin, tty=tty)

    def get_stats_summary(self) -> JsonDict:
        """A kubelet stats/v1alpha1 Summary from what the provider last reported; Pods
        whose provider reports no usage are listed without cpu and memory."""
        now = rfc3339(self._now())
        pods: list[JsonDict] = []
        for entry in self.tracked_entries():
            instance = entry.last_instance
            container = (((entry.pod.get("spec") or {}).get("containers")) or [{}])[0].get("name", "")
            stats: JsonDict = {"name": container}
            usage = instance.usage if instance is not None else None
            if instance is not None and instance.started_at is not None:
                stats["startTime"] = rfc3339(instance.started_at)
            if usage is not None and usage.cpu_nano_cores is not None:
                stats["cpu"] = {"time": now, "usageNanoCores": usage.cpu_nano_cores}
            if usage is not None and usage.memory_bytes is not None:
                stats["memory"] = {"time": now, "workingSetBytes": usage.memory_bytes, "usageBytes": usage.memory_bytes}
            pod: JsonDict = {
                "podRef": {"name": entry.name, "namespace": entry.namespace, "uid": entry.uid},
                "containers": [stats],
            }
            pod.update({k: v for k, v in stats.items() if k in ("startTime", "cpu", "memory")})
            pods.append(pod)
        return {"node": {"nodeName": self.node_name, "systemContainers": []}, "pods": pods}

    def get_metrics_resource(self) -> str:
        """The kubelet's /metrics/resource in Prometheus text format, for the Pods whose
        provider reports usage."""
        lines = [
            "# HELP container_cpu_usage_seconds_total Cumulative cpu time consumed by the container in core-seconds",
            "# TYPE container_cpu_usage_seconds_total counter",
            "# HELP container_memory_working_set_bytes Current working set of the container in bytes",
            "# TYPE container_memory_working_set_bytes gauge",
        ]
        for pod in self.get_stats_summary()["pods"]:
            ref, container = pod["podRef"], pod["containers"][0]
            labels = f'container="{container["name"]}",namespace="{ref["namespace"]}",pod="{ref["name"]}"'
            if "memory" in container:
                lines.append(f"container_memory_working_set_bytes{{{labels}}} {container['memory']['workingSetBytes']}")
        return "\n".join(lines) + "\n"
