"""What the vnode remembers of each Pod: the tracked map, the one record of which instance serves which Pod.

Shared by every phase of the Handler (provision, status sync, teardown, serving), the
decisions and the pod controller. In memory only (I6): rebuilt after a restart from the
cluster and `provider.list()`, see
tests/vnode/test_restart.py::test_I6_a_restarted_runner_rebuilds_the_tracked_set_from_the_cluster_and_one_list.
Does no I/O.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kube import names
from providers.base import ClaimName, Instance, InstanceId
from providers.claim import claim_name
from vnode import status

JsonDict = dict[str, Any]


class Lookup(enum.Enum):
    FOUND = "found"
    NOT_FOUND = "not found"
    UNKNOWN = "could not ask"


@dataclass
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

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def observe(self, instance: Instance, *, now: datetime) -> bool:
        """Recompute the desired metadata and status from the instance's facts; False if
        the facts are unchanged (and a status was already computed)."""
        if (instance is self.last_instance or instance == self.last_instance) and self.desired_status is not None:
            return False
        self.last_instance = instance
        if instance.endpoint:
            self.desired_annotations[names.ENDPOINT_ANNOTATION] = instance.endpoint
        self.desired_annotations[names.INSTANCE_ID_ANNOTATION] = instance.id
        self.desired_status = status.status_from_instance(self.pod, instance, now=now)
        return True

    def lose(self, *, now: datetime) -> None:
        """The instance vanished from a list that could have seen it: Failed/InstanceLost."""
        self.last_instance = None
        self.desired_status = status.lost_status(self.pod, now=now)


class TrackedMap:
    """Thread-safe map of Pod key -> Tracked; one per Handler."""

    def __init__(self) -> None:
        self._entries: dict[str, Tracked] = {}
        self._lock = threading.Lock()

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
        with self._lock:
            return {entry.claim for entry in self._entries.values()}

    def track(self, pod: JsonDict) -> Tracked:
        """The entry for this Pod (a new one if the name now belongs to a new UID), holding `pod`."""
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
                )
                self._entries[key] = entry
            entry.pod = pod
            return entry

    def adopt(self, pod: JsonDict, instance: Instance, *, at: float, now: datetime) -> Tracked:
        """Track an instance found again (after a restart, or a cold map); no provider call."""
        entry = self.track(pod)
        entry.instance_id = instance.id
        entry.provisioned_at = at
        entry.observe(instance, now=now)
        return entry

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
