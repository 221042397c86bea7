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
from providers.base import ClaimName, Instance, InstanceId, InstanceState
from providers.claim import claim_name
from vnode import status
from vnode.runs import ENDED, BackoffPolicy, Due, Ending, Runs, Step, ending_of, runs_again

JsonDict = dict[str, Any]


class Lookup(enum.Enum):
    FOUND = "found"
    NOT_FOUND = "not found"
    UNKNOWN = "could not ask"


@dataclass(frozen=True)
class Rules:
    """What the provider's capabilities and the settings say about runs (vnode.runs)."""

    in_place: bool = False  # the provider restarts a workload in its instance
    bills: bool = True  # an instance whose workload ended still costs money
    backoff: BackoffPolicy = BackoffPolicy()

    def billing(self, instance: Instance) -> bool:
        """Does `instance` still cost money (so a finished Pod's instance must be terminated)?"""
        if instance.state in (InstanceState.TERMINATING, InstanceState.TERMINATED):
            return False
        return self.bills or instance.state not in ENDED


DEFAULT_RULES = Rules()
PodEvent = tuple[str, str, str]  # type, reason, message


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
    runs: Runs = field(default_factory=Runs)
    misses: int = 0  # successful lists in a row that did not show the instance
    missing_since: float | None = None  # monotonic: when the first of them began
    events: list[PodEvent] = field(default_factory=list)  # written by the next flush
    credential: dict[str, bytes] | None = None  # a minted credential not yet in its Secret
    terminate_asked: bool = False  # teardown: terminate was called once for this instance
    recheck: float = 0.0  # teardown: seconds until the next look at a going instance
    probe_ready: dict[str, bool] = field(default_factory=dict)  # probes: container -> readiness verdict
    probe_started: dict[str, bool] = field(default_factory=dict)  # probes: container -> startup probe passed

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def container(self) -> str:
        return str((((self.pod.get("spec") or {}).get("containers") or [{}])[0]).get("name", ""))

    def say(self, event_type: str, reason: str, message: str) -> None:
        self.events.append((event_type, reason, message))

    def observe(self, instance: Instance, *, now: datetime, at: float = 0.0, rules: Rules = DEFAULT_RULES) -> bool:
        """Recompute the desired metadata and status from the instance's facts; False if
        the facts are unchanged (and a status was already computed). `at` is the monotonic
        time of the observation (for the back-off)."""
        if self.instance_id is not None and instance.id != self.instance_id:
            return False  # another instance of the claim (the one a restart replaced)
        if self.runs.finished:
            if not self.runs.released and self.runs.due is None and rules.billing(instance):
                self.runs.due = Due(Step.RELEASE, at)  # it bills behind a finished Pod
            self.last_instance = instance
            return False
        if self.runs.stale(instance) or self.runs.due is not None and self.runs.due.step is Step.REPLACE:
            return False
        if (instance is self.last_instance or instance == self.last_instance) and self.desired_status is not None:
            return False
        self.last_instance = instance
        if instance.endpoint:
            self.desired_annotations[names.ENDPOINT_ANNOTATION] = instance.endpoint
        self.desired_annotations[names.INSTANCE_ID_ANNOTATION] = instance.id
        self._note_start(instance)
        if instance.state in ENDED:
            self.runs.end(ending_of(instance, now=now), seen_at=at, in_place=rules.in_place, bills=rules.bills,
                          policy=rules.backoff)  # fmt: skip
        elif instance.state is InstanceState.TERMINATED:
            if instance.preempted:
                self.say(
                    "Warning",
                    names.EVENT_PREEMPTED,
                    f"the provider reclaimed instance {instance.id}: {instance.message}",
                )
            ending = ending_of(instance, now=now, reason=names.REASON_TERMINATED)
            self.runs.end(ending, seen_at=at, in_place=False, bills=False, policy=rules.backoff)
            if not self.runs.finished:
                return self._wait_for_replacement(now, at)
        self.desired_status = status.status_from_instance(self.pod, instance, now=now, run=self._view(at))
        self._note_backoff(at)
        return True

    def lose(self, *, now: datetime, at: float = 0.0, rules: Rules = DEFAULT_RULES, why: str = "") -> None:
        """The provider confirms the instance is gone (absent from lists past the list lag,
        and `get` says so): a crash with exit code 137 under the restart policy."""
        self.last_instance = None
        gone = why or f"instance {self.instance_id} is gone: the provider no longer lists it and get finds nothing"
        ending = Ending(137, names.REASON_INSTANCE_LOST, None, now, gone)
        if runs_again(self.runs.policy, ending.exit_code):
            self.say("Warning", names.EVENT_INSTANCE_LOST, f"{gone}; a new instance replaces it")
            self.runs.end(ending, seen_at=at, in_place=False, bills=False, policy=rules.backoff)
            self._wait_for_replacement(now, at)
            return
        self.say("Warning", names.EVENT_INSTANCE_LOST, gone)
        self.runs.finished, self.runs.ended = True, ending
        self.desired_status = status.lost_status(self.pod, now=now, message=gone, run=self._view(at))

    def _wait_for_replacement(self, now: datetime, at: float) -> bool:
        self.desired_status = status.replacing_status(self.pod, now=now, run=self._view(at))
        self._note_backoff(at)
        return True

    def _view(self, at: float) -> status.RunView:
        runs = self.runs
        again = runs.ended is not None and not runs.finished
        waiting = runs.waiting_message(self.container, f"{self.name}_{self.namespace}({self.uid})", at)
        last = runs.ended.terminated() if again and waiting is not None and runs.ended else runs.last
        return status.RunView(restarts=runs.restarts, last=last, again=again, waiting=waiting)

    def _note_start(self, instance: Instance) -> None:
        if instance.state is InstanceState.RUNNING and instance.runs not in self.runs.started_runs:
            self.runs.started_runs.add(instance.runs)
            self.say("Normal", names.EVENT_STARTED, f"Started container {self.container}")

    def _note_backoff(self, at: float) -> None:
        if self._view(at).waiting is not None:
            message = (
                f"Back-off restarting failed container {self.container} in pod {self.name}_{self.namespace}({self.uid})"
            )
            self.say("Warning", names.EVENT_BACKOFF, message)


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
                )
                self._entries[key] = entry
            entry.pod = pod
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                entry.runs.finished = True  # terminal in the API: frozen, nothing runs again
            return entry

    def adopt(
        self, pod: JsonDict, instance: Instance, *, at: float, now: datetime, rules: Rules = DEFAULT_RULES
    ) -> Tracked:
        """Track an instance found again (after a restart, or a cold map); no provider call."""
        entry = self.track(pod)
        entry.instance_id = instance.id
        entry.provisioned_at = at
        entry.runs.awaiting_run = instance.runs
        entry.runs.started_runs.add(instance.runs)  # its start was told before the restart
        entry.observe(instance, now=now, at=at, rules=rules)
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
