"""A Pod's runs: what an ended workload means under its `restartPolicy`, and the crash back-off.

Pure. `assess.observe` (vnode.model.assess) feeds it each instance's facts; it answers what the
Pod's container looks like (running, waiting in `CrashLoopBackOff`, terminated), whether the
Pod is now terminal, and what is due next (a restart in place, a replacement instance, or a
release of a finished instance that still bills), with the time it is due. Where the
provider reports container facts, each container has a `Runs` of its own under the policy
`container_policy` gives it. The pod controller carries the due step out; this module never
does I/O.

The back-off is the kubelet's (client-go `flowcontrol.Backoff` as `doBackOff` uses it): the
first restart after a run ends is at once; each later one waits `initial` seconds, doubling
to `maximum`; a run that lasted longer than `reset` seconds starts the count afresh.
Tests: tests/vnode/test_runs.py, tests/vnode/test_runs_containers.py.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kube.times import rfc3339
from providers.base import BillingStart, Instance, InstanceState
from providers.shape import ContainerFacts

JsonDict = dict[str, Any]
ENDED = frozenset({InstanceState.SUCCEEDED, InstanceState.FAILED})
GONE_EXIT_CODE = 137  # an instance that vanished: as a kubelet reports a container killed by SIGKILL


@dataclass(frozen=True)
class BackoffPolicy:
    initial: float = 10.0
    maximum: float = 300.0
    reset: float = 600.0


DEFAULT_BACKOFF = BackoffPolicy()


def restart_policy(pod: Mapping[str, Any]) -> str:
    """The Pod's `spec.restartPolicy`; the API server's default is Always."""
    return str((pod.get("spec") or {}).get("restartPolicy") or "Always")


def container_policy(pod_policy: str, *, init: bool, sidecar: bool) -> str:
    """The restart policy one container lives by: a native sidecar always restarts; an
    ordinary init container runs again only after a failure, and never under `Never`; an app
    container follows the Pod's."""
    if sidecar:
        return "Always"
    if init:
        return "Never" if pod_policy == "Never" else "OnFailure"
    return pod_policy


def runs_again(policy: str, exit_code: int | None) -> bool:
    """Does `policy` run the workload again after it ended with `exit_code` (None: unknown,
    which counts as a failure)?"""
    if policy == "Never":
        return False
    if policy == "OnFailure":
        return exit_code != 0
    return True


class Step(enum.Enum):
    RESTART = "run the workload again in the same instance"
    REPLACE = "terminate the instance, then provision the claim again (a restart)"
    RELEASE = "terminate the finished instance: it still bills"


@dataclass(frozen=True)
class Due:
    step: Step
    at: float  # monotonic seconds


@dataclass(frozen=True)
class Ending:
    """One run that ended: what `lastState.terminated` will say of it."""

    exit_code: int
    reason: str
    started_at: datetime | None
    finished_at: datetime
    message: str = ""
    run: int = 0  # the provider's number of the run that ended (0: not told)

    def terminated(self, container_id: str = "") -> JsonDict:
        result: JsonDict = {"exitCode": self.exit_code, "reason": self.reason, "finishedAt": rfc3339(self.finished_at)}
        if self.started_at is not None:
            result["startedAt"] = rfc3339(self.started_at)
        if self.message:
            result["message"] = self.message
        if container_id:
            result["containerID"] = container_id
        return result


def ending_of(instance: Instance, *, now: datetime, reason: str = "") -> Ending:
    """The run that `instance` reports ended (or that vanished with it)."""
    code = instance.exit_code
    if code is None:
        code = 0 if instance.state is InstanceState.SUCCEEDED else GONE_EXIT_CODE
    word = reason or instance.exit_reason or ("Completed" if code == 0 else "Error")
    message = instance.message if instance.state not in ENDED else ""
    return Ending(code, word, instance.started_at, instance.finished_at or now, message, run=instance.runs)


def ending_of_container(fact: ContainerFacts, *, now: datetime) -> Ending:
    """The run of one container that ended, as `lastState.terminated` will say of it."""
    code = fact.exit_code if fact.exit_code is not None else GONE_EXIT_CODE
    return Ending(
        code,
        fact.exit_reason or ("Completed" if code == 0 else "Error"),
        fact.started_at,
        fact.finished_at or now,
        fact.message,
        run=fact.runs,
    )


@dataclass(frozen=True)
class Rules:
    """What the provider's capabilities and the settings say about runs (vnode.model.runs)."""

    in_place: bool = False  # the provider restarts a workload in its instance
    bills: bool = True  # an instance whose workload ended still costs money
    backoff: BackoffPolicy = BackoffPolicy()
    starts: BillingStart = BillingStart.CREATED  # the fact a billing span opens at (vnode.model.billing)

    def billing(self, instance: Instance) -> bool:
        """Does `instance` still cost money (so a finished Pod's instance must be terminated)?"""
        if instance.state in (InstanceState.TERMINATING, InstanceState.TERMINATED):
            return False
        return self.bills or instance.state not in ENDED


DEFAULT_RULES = Rules()


@dataclass(slots=True)  # one per tracked Pod (and per container): no per-object __dict__
class Runs:
    """What the vnode knows of one Pod's runs. `restarts` and `last` start from the Pod's
    own status (so a restarted manager counts on); the back-off is in memory, as the
    kubelet's is."""

    policy: str = "Always"
    restarts: int = 0
    last: JsonDict | None = None  # lastState.terminated of the container
    ended: Ending | None = None  # the run that ended and waits for its restart
    ended_seen_at: float = 0.0  # monotonic: when the vnode saw it end
    backoff: float | None = None  # None: the next restart is at once
    backoff_from: float = 0.0  # monotonic: the ending the back-off was last advanced from
    awaiting_run: int = 0  # after an in-place restart: ignore facts of runs before this one
    due: Due | None = None
    finished: bool = False  # the Pod is terminal: nothing runs again
    released: bool = False  # a finished instance was terminated (it billed)
    # Runs whose `Started` Event was written; a tuple (a set costs 216 bytes per Pod, this few).
    started_runs: tuple[int, ...] = ()
    backoff_told: bool = False  # the `BackOff` Event of the ended run was written

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any]) -> Runs:
        statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
        first = statuses[0] if isinstance(statuses[0], Mapping) else {}
        return cls.from_status(first, policy=restart_policy(pod))

    @classmethod
    def from_status(cls, entry: Mapping[str, Any], *, policy: str) -> Runs:
        """One container's history as its `containerStatuses` entry tells it (restartCount, lastState)."""
        last = (entry.get("lastState") or {}).get("terminated")
        return cls(
            policy=policy,
            restarts=int(entry.get("restartCount") or 0),
            last=dict(last) if isinstance(last, Mapping) else None,
        )

    def stale(self, instance: Instance) -> bool:
        """Facts from before the restart we asked for (a list read before it)."""
        return self.stale_run(instance.runs)

    def stale_run(self, runs: int) -> bool:
        return runs < self.awaiting_run

    def end(self, ending: Ending, *, seen_at: float, in_place: bool, bills: bool, policy: BackoffPolicy) -> None:
        """A run ended: the Pod finishes, or the next run is due (at once, or after the back-off)."""
        if self.ended == ending:
            return
        self.ended, self.ended_seen_at = ending, seen_at
        if not runs_again(self.policy, ending.exit_code):
            self.finished = True
            self.due = Due(Step.RELEASE, seen_at) if bills else None
            return
        expired = self.backoff is None or seen_at - self.backoff_from > policy.reset
        wait = 0.0 if expired else (self.backoff or 0.0)
        self.due = Due(Step.RESTART if in_place else Step.REPLACE, seen_at + wait)

    def waiting_message(self, container: str, pod: str, now: float) -> str | None:
        """The CrashLoopBackOff message while the next run waits out its back-off, else None."""
        if self.ended is None or self.due is None or self.due.step is Step.RELEASE or self.due.at <= now:
            return None
        return f"back-off {_seconds(self.backoff or 0.0)} restarting failed container={container} pod={pod}"

    def restarted(self, *, new_run: int, policy: BackoffPolicy, of: tuple[Ending, float] | None = None) -> None:
        """The due restart was carried out (`new_run`: the run the provider now runs, or 1
        for a fresh instance). `of`: the ending restarted and when it was seen, taken before
        the call; if a poll has meanwhile seen the new run end too, that end stays recorded.
        A poll that told the restarted run's end again, otherwise (a detail the provider
        settled later), did not see a new run end: that later word is what `lastState` keeps,
        and nothing is due (else the run just started would be restarted at once)."""
        ending, at = of if of is not None else (self.ended, self.ended_seen_at)
        assert ending is not None
        if self.ended is not None and _same_run(self.ended, ending):
            ending = self.ended  # the later word on that run
        newer = self.ended is not None and self.ended != ending
        if self.backoff is None or at - self.backoff_from > policy.reset:
            self.backoff = policy.initial
        else:
            self.backoff = min(self.backoff * 2, policy.maximum)
        self.backoff_from = at
        self.restarts += 1
        self.last = ending.terminated()
        self.awaiting_run = new_run
        if not newer:
            self.ended, self.due, self.backoff_told = None, None, False

    def stop(self) -> None:
        """Nothing runs again (the Pod turned terminal, or a sidecar stopped after the app
        containers finished): no restart is due."""
        self.finished = True
        if self.due is not None and self.due.step is not Step.RELEASE:
            self.due = None

    def release_done(self) -> None:
        self.released, self.due = True, None


def replace_all(containers: Mapping[str, Runs], cause: Ending | None, *, policy: BackoffPolicy) -> None:
    """A new instance replaced the old one: every container that ran there restarts in it.
    One that ended on its own restarts from its own end (one that had completed too: the new
    instance runs the init containers again from the first, as a kubelet does in a new
    sandbox, and every app container); one still running was ended by the replacement: by
    `cause` when the instance itself went (lost, reclaimed), else killed for a sibling's
    restart (137, as a kubelet reports a container it killed). Each container's run count
    starts again in the new instance."""
    own = any(runs.ended is not None and not runs.finished for runs in containers.values())
    for runs in containers.values():
        if runs.ended is None and not runs.finished and runs.started_runs and cause is not None:
            killed = Ending(GONE_EXIT_CODE, "Error", None, cause.finished_at, "killed: the instance was replaced")
            runs.ended = killed if own else cause
        if runs.ended is not None:
            runs.finished = False
            runs.restarted(new_run=0, policy=policy)
        runs.awaiting_run = 0
        runs.started_runs = ()


def _same_run(one: Ending, other: Ending) -> bool:
    """Do two endings tell of one run (both numbered by the provider, with the same number)?"""
    return one.run > 0 and one.run == other.run


def _seconds(value: float) -> str:
    """Go's Duration text (`300ms`, `10s`, `5m0s`), as the kubelet's message has it."""
    if value < 1:
        return f"{round(value * 1000)}ms"
    total = round(value)
    if total < 60:
        return f"{total}s"
    minutes, seconds = divmod(total, 60)
    return f"{minutes}m{seconds}s"
