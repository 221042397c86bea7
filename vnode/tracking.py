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
from providers.shape import ContainerFacts, ContainerState
from vnode import containerstatus, giveup, status
from vnode.probestate import run_of
from vnode.runs import (
    DEFAULT_RULES,
    ENDED,
    BackoffPolicy,
    Due,
    Ending,
    Runs,
    Step,
    container_policy,
    ending_of,
    ending_of_container,
    replace_all,
    runs_again,
)
from vnode.runs import Rules as Rules

JsonDict = dict[str, Any]


class Lookup(enum.Enum):
    FOUND = "found"
    NOT_FOUND = "not found"
    UNKNOWN = "could not ask"


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
    preemption: str = ""  # a preemption's block reason, not yet reported (vnode.giveup)
    terminate_asked: bool = False  # teardown: terminate was called once for this instance
    recheck: float = 0.0  # teardown: seconds until the next look at a going instance
    # The prober's verdicts, each for the container run it probed; replaced whole, never changed.
    probe_verdicts: status.Verdicts = status.NO_VERDICTS
    # Held while the facts or the probes' verdicts are turned into a status (poll thread, flush).
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    containers: dict[str, Runs] = field(default_factory=dict)  # each container's runs (from container facts)
    judged_by: status.Verdicts | None = None  # the prober's verdicts (as written) the status was computed from

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

    def _judge(self) -> status.Verdicts:
        """The verdicts a status is computed from; the prober's, as written, are remembered
        (`judged_by`: the prober replaces them whole, so a new one is a new object)."""
        self.judged_by = self.probe_verdicts
        return self.verdicts()

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
        if self.runs.stale(instance) or self._stale_containers(instance):
            return False
        if self.runs.due is not None and self.runs.due.step is Step.REPLACE:
            return False
        if (instance is self.last_instance or instance == self.last_instance) and self.desired_status is not None:
            # Same facts: only a probe verdict that changed since the last status moves it.
            return self.probe_verdicts is not self.judged_by and self.reassess(now=now, at=at, rules=rules)
        self.last_instance = instance
        if instance.endpoint:
            self.desired_annotations[names.ENDPOINT_ANNOTATION] = instance.endpoint
        self.desired_annotations[names.INSTANCE_ID_ANNOTATION] = instance.id
        if self._by_container(instance):
            self._observe_containers(instance, now=now, at=at, rules=rules)
            self._recompute_containers(instance, now=now, at=at, rules=rules)
            return True
        self._note_start(instance)
        if instance.state in ENDED:
            self.runs.end(ending_of(instance, now=now), seen_at=at, in_place=rules.in_place, bills=rules.bills,
                          policy=rules.backoff)  # fmt: skip
        elif instance.state is InstanceState.TERMINATED:
            if instance.preempted:  # the capacity is gone: the Pod fails, placement replaces it
                return giveup.preempted(self, instance, now=now)
            ending = ending_of(instance, now=now, reason=names.REASON_TERMINATED)
            self.runs.end(ending, seen_at=at, in_place=False, bills=False, policy=rules.backoff)
            if not self.runs.finished:
                return self._wait_for_replacement(now, at)
        self.desired_status = status.status_from_instance(
            self._latest(), instance, now=now, run=self._view(at), verdicts=self._judge()
        )
        self._note_backoff(at)
        return True

    def _latest(self) -> Mapping[str, Any]:
        """The Pod with the status last decided for it: rebuilt before the watch brings our write
        back, a status keeps its transition times and startTime (not now's)."""
        return self.pod if self.desired_status is None else {**self.pod, "status": self.desired_status}

    def reassess(self, *, now: datetime, at: float, rules: Rules) -> bool:
        """Recompute the desired status from the last facts and the probes' current verdicts
        (the prober calls it when a verdict changes); True if the status changed. Called under
        the same one-operation-per-Pod rule as `observe`."""
        instance = self.last_instance
        if instance is None or self.terminal or self.runs.finished or self.desired_status is None:
            return False
        if self.runs.stale(instance) or self._stale_containers(instance):
            return False  # facts from before a restart we asked for: they say nothing of the new run
        if self._by_container(instance):
            return self._recompute_containers(instance, now=now, at=at, rules=rules)
        if (
            instance.state is InstanceState.TERMINATED
            or self.runs.due is not None
            and self.runs.due.step is Step.REPLACE
        ):
            return False  # waiting for a replacement: no container to be ready
        run, verdicts = self._view(at), self._judge()
        desired = status.status_from_instance(self._latest(), instance, now=now, run=run, verdicts=verdicts)
        changed, self.desired_status = desired != self.desired_status, desired
        return changed

    # -- an instance that reports container facts: each container's own runs ------------------
    def _by_container(self, instance: Instance) -> bool:
        return instance.state is not InstanceState.TERMINATED and containerstatus.uses_container_facts(
            self.pod, instance
        )

    def _stale_containers(self, instance: Instance) -> bool:
        """Facts read before a container restart we asked for."""
        return any(c.name in self.containers and self.containers[c.name].stale_run(c.runs) for c in instance.containers)

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
            runs = self.containers[name] = Runs.from_status(old, policy=policy)
            return runs
        return None

    def _observe_containers(self, instance: Instance, *, now: datetime, at: float, rules: Rules) -> None:
        """Each container's start and end under its own policy. App containers first: a
        sidecar that stops once every app container is done does not run again."""
        facts = {c.name: c for c in instance.containers}
        apps_done = True
        names_in_order = [str(c.get("name")) for c in containerstatus.app_containers(self.pod)]
        apps = len(names_in_order)
        names_in_order += [str(c.get("name")) for c in containerstatus.init_containers(self.pod)]
        for index, name in enumerate(names_in_order):
            runs, fact = self.container_runs(name), facts.get(name)
            if runs is None or fact is None:
                apps_done = apps_done and index >= apps
                continue
            if fact.state is not ContainerState.WAITING and fact.runs > 0 and fact.runs not in runs.started_runs:
                # A short run may have ended between two lists: it started all the same.
                runs.started_runs.add(fact.runs)
                self.say("Normal", names.EVENT_STARTED, f"Started container {name}")
            if fact.state is ContainerState.TERMINATED:
                if index >= apps and apps_done and runs.policy == "Always":
                    runs.stop()  # a sidecar stopped after the app containers finished
                else:
                    self._end_container(runs, ending_of_container(fact, now=now), at=at, rules=rules)
            if index < apps:
                apps_done = apps_done and fact.state is ContainerState.TERMINATED and runs.finished

    def _end_container(self, runs: Runs, ending: Ending, *, at: float, rules: Rules) -> None:
        runs.end(ending, seen_at=at, in_place=True, bills=False, policy=rules.backoff)
        if not rules.in_place and runs.due is not None:
            # No restart in place: the whole instance is replaced (vnode.lifecycle), when this
            # container's own policy and back-off say so (the Pod's policy may not: a sidecar).
            self.runs.ended, self.runs.ended_seen_at = ending, at
            self.runs.due, runs.due = Due(Step.REPLACE, runs.due.at), None

    def _recompute_containers(self, instance: Instance, *, now: datetime, at: float, rules: Rules) -> bool:
        """The status from the container facts; a terminal phase finishes the Pod."""
        views = {name: self._view(at, runs, name) for name, runs in self.containers.items()}
        desired = containerstatus.status_from_containers(self._latest(), instance, now=now, views=views,
                                                         verdicts=self._judge())  # fmt: skip
        changed, self.desired_status = desired != self.desired_status, desired
        if desired["phase"] in ("Succeeded", "Failed"):
            self.runs.finished = True
            for runs in self.containers.values():
                runs.stop()
            if rules.billing(instance):
                self.runs.due = Due(Step.RELEASE, at)
        for name, view in views.items():
            runs = self.containers[name]
            if view.waiting is not None and not runs.backoff_told:
                runs.backoff_told = True
                self.say(
                    "Warning", names.EVENT_BACKOFF, f"Back-off restarting failed container {name} in pod {self.pod_ref}"
                )
        return changed

    def adopted(self, instance: Instance) -> None:
        """An instance found again: its runs, and each container's, were told before."""
        self.runs.awaiting_run = instance.runs
        self.runs.started_runs.add(instance.runs)
        for fact in instance.containers:
            runs = self.container_runs(fact.name)
            if runs is not None:
                runs.awaiting_run = fact.runs
                runs.started_runs.add(fact.runs)

    def replaced(self, *, policy: BackoffPolicy, cause: Ending | None) -> None:
        """A new instance replaced the old one (`cause`: the Pod's run that ended): every
        container that ran there has restarted (`runs.replace_all`), its run count afresh."""
        replace_all(self.containers, cause, policy=policy)

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
        self.desired_status = status.lost_status(self._latest(), now=now, message=gone, run=self._view(at))

    def _wait_for_replacement(self, now: datetime, at: float) -> bool:
        self.desired_status = status.replacing_status(self._latest(), now=now, run=self._view(at))
        self._note_backoff(at)
        return True

    def _view(self, at: float, runs: Runs | None = None, container: str = "") -> status.RunView:
        runs = runs or self.runs
        again = runs.ended is not None and not runs.finished
        waiting = runs.waiting_message(container or self.container, self.pod_ref, at)
        last = runs.ended.terminated() if again and waiting is not None and runs.ended else runs.last
        return status.RunView(restarts=runs.restarts, last=last, again=again, waiting=waiting)

    def _note_start(self, instance: Instance) -> None:
        if instance.state is InstanceState.RUNNING and instance.runs not in self.runs.started_runs:
            self.runs.started_runs.add(instance.runs)
            self.say("Normal", names.EVENT_STARTED, f"Started container {self.container}")

    def _note_backoff(self, at: float) -> None:
        if self._view(at).waiting is not None:
            message = f"Back-off restarting failed container {self.container} in pod {self.pod_ref}"
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
        entry.adopted(instance)  # its start was told before the restart
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
