"""What the vnode remembers of each Pod: the tracked map, the one record of which instance serves which Pod.

Shared by every phase of the Handler (provision, status sync, teardown, serving), the
decisions and the pod controller. In memory only (I6): rebuilt after a restart from the
cluster and `provider.list()`, see
tests/vnode/test_restart.py::test_I6_a_restarted_runner_rebuilds_the_tracked_set_from_the_cluster_and_one_list.
`Tracked` is a plain record: how facts move it is `vnode.model.assess`. Does no I/O.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kube.billing import Billing
from providers.base import ClaimName, Instance, InstanceId
from providers.claim import claim_name
from providers.shape import ContainerFacts
from vnode.model import containerstatus, status
from vnode.model.interruption import Noted
from vnode.model.probestate import run_of
from vnode.model.runs import Rules as Rules
from vnode.model.runs import Runs, container_policy
from vnode.model.stopping import Stop

JsonDict = dict[str, Any]


class Lookup(enum.Enum):
    FOUND = "found"
    NOT_FOUND = "not found"
    UNKNOWN = "could not ask"


PodEvent = tuple[str, str, str]  # type, reason, message
NO_CONTAINERS: Mapping[str, Runs] = MappingProxyType({})  # every Tracked's `containers` until one has facts


@dataclass(slots=True)  # one per tracked Pod: no per-object __dict__ (bench/poll.py: RSS per Pod)
class Tracked:
    """What the Handler knows of one Pod bound to its node."""

    namespace: str
    name: str
    uid: str
    claim: ClaimName
    pod: JsonDict
    instance_id: InstanceId | None = None
    provisioned_at: float = 0.0  # monotonic; for the provider's list lag
    terminal: bool = False  # refused: there is no instance and never will be
    desired_annotations: dict[str, str] = field(default_factory=dict)
    written_annotations: dict[str, str] = field(default_factory=dict)
    desired_status: JsonDict | None = None
    written_status: JsonDict | None = None
    last_instance: Instance | None = None  # unchanged facts need no new status
    # Monotonic time the read behind `last_instance` returned (None: no read applied yet): a read
    # begun before it may be older, and is not applied (vnode.phases.provision, .statussync).
    facts_read: float | None = None
    runs: Runs = field(default_factory=Runs)
    misses: int = 0  # successful lists in a row that did not show the instance
    missing_since: float | None = None  # monotonic: when the first of them began
    events: list[PodEvent] = field(default_factory=list)  # written by the next flush
    credential: dict[str, bytes] | None = None  # a minted credential not yet in its Secret
    preemption: str = ""  # a preemption's block reason, not yet reported (vnode.phases.giveup)
    ignored_stop: str = ""  # a `nebula.io/stop-reason` not Nebula's, already logged (vnode.phases.lifecycle)
    terminate_asked: bool = False  # teardown: terminate was called once for this instance
    recheck: float = 0.0  # teardown: seconds until the next look at a going instance
    look_after: float = 0.0  # teardown: monotonic time before which a wake-up does not look again
    # The prober's verdicts, each for the container run it probed; replaced whole, never changed.
    probe_verdicts: status.Verdicts = status.NO_VERDICTS
    # Held while the facts or the probes' verdicts are turned into a status (poll thread, flush).
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    # Each container's runs (from container facts); replaced whole when one is added, never changed
    # in place, so a Pod with no container facts holds no dict of its own (bench/poll.py: RSS).
    containers: Mapping[str, Runs] = field(default_factory=lambda: NO_CONTAINERS)
    judged_by: status.Verdicts | None = None  # the prober's verdicts (as written) the status was computed from
    stop: Stop | None = None  # its containers are being stopped (vnode.phases.stopping): nothing runs again
    billing: Billing | None = None  # its billing record (vnode.model.billing); None: the Pod's, not read yet
    billing_seen: float | None = None  # epoch seconds its instance was last seen billing (or the node's anchor)
    # A provider's notice recorded on the Pod by the notice intake, before the watch brings the
    # annotation back (vnode.model.interruption; the annotation is what a restart reads).
    notice: Noted | None = None
    # The poll tick's quiet path (vnode.model.quiet): the facts and billing record last found to
    # agree, and whether those facts bill; kept while both are the very same objects.
    quiet_facts: Instance | None = field(default=None, repr=False, compare=False)
    quiet_record: Billing | None = field(default=None, repr=False, compare=False)
    quiet_bills: bool = field(default=False, repr=False, compare=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def container(self) -> str:
        return str((((self.pod.get("spec") or {}).get("containers") or [{}])[0]).get("name", ""))

    @property
    def pod_ref(self) -> str:
        """The Pod as the kubelet names it in messages: `name_namespace(uid)`."""
        return f"{self.name}_{self.namespace}({self.uid})"

    def say(self, event_type: str, reason: str, message: str) -> None:
        self.events.append((event_type, reason, message))

    def verdicts(self) -> status.Verdicts:
        """The probes' verdicts now, for the runs the last facts show: a container that
        restarted, or runs in a new instance, is not ready until the prober probed that run."""
        instance, first = self.last_instance, self.container
        return self.probe_verdicts.for_runs(lambda name: run_of(instance, name, first=first))

    def container_runs(self, name: str) -> Runs | None:
        """The runs of the Pod's container `name` (init or app); None if the Pod has no such container."""
        runs = self.containers.get(name)
        if runs is not None:
            return runs
        for key, init in (("initContainers", True), ("containers", False)):
            spec = next((c for c in (self.pod.get("spec") or {}).get(key) or [] if c.get("name") == name), None)
            if spec is None:
                continue
            policy = container_policy(self.runs.policy, init=init, sidecar=containerstatus.is_sidecar(spec))
            statuses = (self.pod.get("status") or {}).get("initContainerStatuses" if init else "containerStatuses")
            old = next((e for e in statuses or [] if isinstance(e, Mapping) and e.get("name") == name), {})
            runs = Runs.from_status(old, policy=policy)
            self.containers = {**self.containers, name: runs}
            return runs
        return None

    def next_due(self) -> float | None:
        """The monotonic time of the next due step: the Pod's, or a container's restart."""
        dues = [self.runs.due, *(runs.due for runs in self.containers.values())]
        return min((due.at for due in dues if due is not None), default=None)

    def due_containers(self, at: float) -> list[str]:
        """The containers whose restart is due by `at`."""
        return [name for name, runs in self.containers.items() if runs.due is not None and runs.due.at <= at]

    def container_facts(self, name: str) -> ContainerFacts | None:
        instance = self.last_instance
        return next((c for c in instance.containers if c.name == name), None) if instance is not None else None


class TrackedMap:
    """Thread-safe map of Pod key -> Tracked; one per Handler."""

    def __init__(self) -> None:
        self._entries: dict[str, Tracked] = {}
        self._lock = threading.Lock()
        # The node's billing-seen-at as found at start-up (vnode.model.billing): a new entry was
        # last seen billing then, at the latest, so a span whose instance is gone closes there.
        self.billing_anchor: float | None = None

    def get(self, key: str) -> Tracked | None:
        with self._lock:
            return self._entries.get(key)

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._entries

    def entries(self) -> list[Tracked]:
        with self._lock:
            return list(self._entries.values())

    def claims(self) -> set[ClaimName]:
        return {entry.claim for entry in self.entries()}

    def claims_of(self, pods: Iterable[Mapping[str, Any]]) -> set[ClaimName]:
        """The claims of `pods`: a tracked Pod's (same key and UID) from its entry, the others
        hashed (`pod_claim`); no SHA-256 per tracked Pod on each poll. The map is copied under
        its lock and read outside it: a loop over 10,000 Pods holding the lock kept every
        operation thread that tracks or forgets a Pod waiting for it (and, under the GIL, for
        the holder to be scheduled again), which was most of a mass delete's time."""
        with self._lock:
            entries = dict(self._entries)  # one C-level copy
        claims: set[ClaimName] = set()
        for pod in pods:
            entry = entries.get(pod_key(pod))
            uid = (pod.get("metadata") or {}).get("uid")
            claims.add(entry.claim if entry is not None and entry.uid == uid else pod_claim(pod))
        return claims

    def track(self, pod: JsonDict) -> Tracked:
        """The entry for this Pod (a new one if the name now belongs to a new UID), holding
        `pod`; a new entry's run history starts from the Pod's status (restartCount,
        lastState), and a Pod the API already shows terminal is finished."""
        meta = pod.get("metadata") or {}
        key = pod_key(pod)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.uid != meta.get("uid"):
                entry = Tracked(
                    namespace=str(meta.get("namespace")),
                    name=str(meta.get("name")),
                    uid=str(meta.get("uid")),
                    claim=pod_claim(pod),
                    pod=pod,
                    runs=Runs.from_pod(pod),
                    billing_seen=self.billing_anchor,
                )
                self._entries[key] = entry
            entry.pod = pod
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") and entry.stop is None:
                # Terminal in the API: frozen, nothing runs again. A stop under way (a deadline's,
                # a budget's: written Failed as it began) finishes it itself, once its
                # containers' ends are observed and written.
                entry.runs.finished = True
            return entry

    def restore_billing_anchor(self, at: float) -> None:
        """The node's billing-seen-at found at start-up; once. Entries not seen billing since take it."""
        with self._lock:
            if self.billing_anchor is not None:
                return
            self.billing_anchor = at
            for entry in self._entries.values():
                if entry.billing_seen is None:
                    entry.billing_seen = at

    def forget(self, entry: Tracked) -> None:
        """Drop the entry, unless its key already belongs to a newer one."""
        with self._lock:
            if self._entries.get(entry.key) is entry:
                del self._entries[entry.key]


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def pod_claim(pod: Mapping[str, Any]) -> ClaimName:
    meta = pod.get("metadata") or {}
    return claim_name(str(meta.get("namespace")), str(meta.get("name")), str(meta.get("uid")))
