"""The prober: every tracked Pod's startup, readiness and liveness probes, run from the manager.

Built by the Handler, started and stopped by the Runner. One scheduler thread keeps a heap
of due times and hands due probes to a fixed pool of worker threads, so a slow probe delays
the others by at most the pool's bound and never the poll loop. Reads each Pod's container
facts from `Tracked.last_instance` (the poll loop's); writes the verdicts into
`Tracked.probe_verdicts`, each with the run it was made for (a new `Verdicts` each time, so
readers never see one change under them) and calls `on_change(entry)`; says `Unhealthy` and `Killing` through
the Event recorder; after a liveness (or startup) failure asks the provider's
`ContainerStopper` to stop the container (the vnode's restart policy runs it again).
Never writes a Pod's status itself.

Invariant: at most `workers` probes run at once; see
tests/vnode/test_probes.py::test_no_more_probes_run_at_once_than_the_pool_has_workers.
Tests: tests/vnode/test_probe_scheduling.py.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from kube import names
from providers import errors
from providers.base import ContainerStopper, Executor, Provider
from vnode.model.probespec import READINESS, STARTUP, InvalidProbe, Probe, probes_of
from vnode.model.probestate import ContainerProbes, RunId, view_of
from vnode.model.status import Verdicts
from vnode.model.tracking import Tracked, TrackedMap
from vnode.probing.probes import Outcome, Target, Watchdog, host_of, run_probe

logger = logging.getLogger(__name__)

DEFAULT_WORKERS = 16
RESYNC = 1.0  # seconds between two looks at the tracked map for Pods to probe (or no longer)
_Key = tuple[str, str, str]  # Pod key, uid, container


@dataclass
class _Pod:
    entry: Tracked
    containers: dict[str, ContainerProbes]
    generations: dict[tuple[str, str], int] = field(default_factory=dict)  # (container, kind) -> its place

    def current(self, item: _Due) -> ContainerProbes | None:
        """The container's probes if `item` is still its probe's place in the schedule."""
        if self.generations.get((item.key[2], item.kind), 0) != item.generation:
            return None
        return self.containers.get(item.key[2])


@dataclass
class _Due:
    """One probe's place in the schedule; `generation` changes when a new run reschedules it."""

    key: _Key
    kind: str
    generation: int


class PodEvents(Protocol):
    """What the prober needs of `kube.events.EventRecorder`."""

    def pod(self, pod: Mapping[str, Any], event_type: str, reason: str, message: str) -> None: ...


class ProbeStats:
    """What the bench and the console read: lag from due to started, recent runs only."""

    def __init__(self, keep: int = 100_000) -> None:
        self.lags: deque[float] = deque(maxlen=keep)
        self.runs = 0


class Prober:
    def __init__(
        self,
        provider: Provider,
        *,
        tracked: TrackedMap,
        events: PodEvents,
        on_change: Callable[[Tracked], None],
        kill: Callable[[Tracked, str, float], None] | None = None,
        workers: int = DEFAULT_WORKERS,
        resync: float = RESYNC,
        monotonic: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        submit: Callable[[Callable[[], None]], None] | None = None,
        spread: bool = True,
    ) -> None:
        """`submit` runs a job (tests pass one that runs it at once); None: the pool.
        `spread`: first probes within a period of `start` wait a random part of it."""
        self._provider = provider
        self._executor = provider if isinstance(provider, Executor) else None
        self._stopper = provider if isinstance(provider, ContainerStopper) else None
        # How a container is killed: the vnode's stop path (its preStop hook, then SIGTERM and
        # SIGKILL at the grace's end); by default the provider's stop_container alone.
        self._kill_container = kill or self._stop_container
        self._tracked = tracked
        self._events = events
        self._on_change = on_change
        self._workers = workers
        self._resync = resync
        self._monotonic = monotonic
        self._now = now
        self._submit = submit or self._enqueue
        self._spread = spread
        self._lock = threading.Lock()
        self._pods: dict[str, _Pod] = {}  # by uid
        self._unprobed: set[str] = set()  # uids with nothing to probe: none declared, or invalid (told once)
        self._heap: list[tuple[float, int, _Due]] = []
        self._seq = itertools.count()
        self._next_resync = float("-inf")
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._started_at: float | None = None  # monotonic, by `start`
        self._watchdog = Watchdog()  # every exec's timeout
        self.stats = ProbeStats()

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self._started_at = self._monotonic()
        self._watchdog.start()
        for index in range(self._workers):
            self._spawn(self._work, f"probe worker {index}")
        self._spawn(self._schedule, "probe scheduler")

    def stop(self, timeout: float = 5.0) -> list[threading.Thread]:
        """Stop scheduling; running probes end within their timeout. Returns threads still busy."""
        self._stop.set()
        self._wake.set()
        for _ in range(self._workers):
            self._jobs.put(None)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._watchdog.stop(max(0.0, deadline - time.monotonic()))
        return [thread for thread in self._threads if thread.is_alive()]

    def backlog(self) -> int:
        """Due probes waiting for a free worker."""
        return self._jobs.qsize()

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=f"{self._provider.name} {name}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _enqueue(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except Exception:  # a probe's bug must not take a worker away from the pool
                logger.exception("probe job failed")

    def _schedule(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # before the step: a push during it wakes the next wait
            wait = self.step()
            self._wake.wait(timeout=max(0.0, wait))

    # -- the schedule ----------------------------------------------------------------------
    def step(self) -> float:
        """Look at the tracked map if it is time, hand every due probe to `submit`; returns
        the seconds until the next thing is due."""
        at = self._monotonic()
        if at >= self._next_resync:
            self._next_resync = at + self._resync
            self.resync()
            at = self._monotonic()  # Pods just found are due now
        due: list[tuple[float, int, _Due]] = []
        with self._lock:
            while self._heap and self._heap[0][0] <= at:
                due.append(heapq.heappop(self._heap))
        for when, _, item in due:
            self._consider(item, at, when=when)
        with self._lock:
            first = self._heap[0][0] if self._heap else float("inf")
        return min(first, self._next_resync) - self._monotonic()

    def resync(self) -> None:
        """Start probing Pods newly tracked; forget Pods no longer tracked or finished."""
        live: set[str] = set()
        for entry in self._tracked.entries():
            if entry.terminal or entry.instance_id is None or entry.runs.finished or entry.terminate_asked:
                continue
            live.add(entry.uid)
            with self._lock:
                if entry.uid in self._pods or entry.uid in self._unprobed:
                    if entry.uid in self._pods:
                        self._pods[entry.uid].entry = entry
                    continue
            self._begin(entry)
        with self._lock:
            for uid in [uid for uid in self._pods if uid not in live]:
                del self._pods[uid]
            self._unprobed &= live

    def _begin(self, entry: Tracked) -> None:
        try:
            probes = probes_of(entry.pod)
        except InvalidProbe as exc:
            with self._lock:
                self._unprobed.add(entry.uid)
            self._events.pod(entry.pod, "Warning", names.EVENT_UNHEALTHY, f"probes not run: {exc}")
            return
        if not probes:
            with self._lock:
                self._unprobed.add(entry.uid)
            return
        by_container: dict[str, dict[str, Probe]] = {}
        for probe in probes:
            by_container.setdefault(probe.container, {})[probe.kind] = probe
        containers = {name: ContainerProbes(name, kinds) for name, kinds in by_container.items()}
        with self._lock:
            self._pods[entry.uid] = _Pod(entry, containers)
            at = self._monotonic()
            pod = self._pods[entry.uid]
            for name, state in containers.items():
                for kind in state.probed_kinds:
                    self._push(pod, (entry.key, entry.uid, name), kind, at + self._jitter(state.probes[kind]))
            changed = self._write(entry, containers.values())
        if changed:
            self._on_change(entry)

    def _jitter(self, probe: Probe) -> float:
        """As the kubelet does: within a period of the start (every Pod adopted at once), a
        first probe waits a random part of its period, so they do not all fall due together."""
        recent = self._spread and self._started_at is not None and self._monotonic() - self._started_at < probe.period
        return random.uniform(0.0, probe.period) if recent else 0.0

    def _push(self, pod: _Pod, key: _Key, kind: str, at: float, *, reschedule: bool = False) -> None:
        """Put a probe on the heap (under the lock); `reschedule` drops its earlier place."""
        generation = self._bump(pod, key, kind) if reschedule else pod.generations.get((key[2], kind), 0)
        heapq.heappush(self._heap, (at, next(self._seq), _Due(key, kind, generation)))
        if self._heap[0][0] == at:
            self._wake.set()  # due before whatever the scheduler waits for

    @staticmethod
    def _bump(pod: _Pod, key: _Key, kind: str) -> int:
        """A new place for the probe in the schedule: every earlier one is moot."""
        slot = (key[2], kind)
        pod.generations[slot] = pod.generations.get(slot, 0) + 1
        return pod.generations[slot]

    def _consider(self, item: _Due, at: float, *, when: float) -> None:
        """A probe is due: look at its container's facts, then run it or look again later."""
        with self._lock:
            pod = self._pods.get(item.key[1])
            state = pod.current(item) if pod is not None else None
            if pod is None or state is None:
                return  # no longer probed, or rescheduled by a new run
            entry = pod.entry
            view = view_of(entry.last_instance, state.container, first=entry.container, now=self._now())
            step = state.see(view, at=at)
            now_due = False  # a new run whose probe is due at once runs now, not a step later
            for kind, first in step.due.items():
                if kind == item.kind and first <= at:
                    item, now_due, when = _Due(item.key, kind, self._bump(pod, item.key, kind)), True, first
                else:
                    self._push(pod, item.key, kind, first, reschedule=True)
            runs = (now_due or not step.due) and state.active(item.kind)
            if not step.due and not runs:
                self._push(pod, item.key, item.kind, at + state.probes[item.kind].period)
            run, probe = state.run, state.probes[item.kind]
            changed = step.changed and self._write(entry, [state])
        if changed:
            self._on_change(entry)
        if runs:
            self._submit(lambda: self._run(item, probe, run, due=when, entry=entry))

    # -- one run ---------------------------------------------------------------------------
    def _run(self, item: _Due, probe: Probe, run: RunId | None, *, due: float, entry: Tracked) -> None:
        """Run the probe (on a worker), count its result, schedule its next run, then tell."""
        started = self._monotonic()
        with self._lock:
            self.stats.lags.append(started - due)
            self.stats.runs += 1
        watch = self._watchdog.watch if self._started_at is not None else None  # started: its watchdog runs
        outcome = run_probe(probe, self._target(entry), executor=self._executor, watch=watch)
        with self._lock:
            pod = self._pods.get(item.key[1])
            state = pod.current(item) if pod is not None else None
            if pod is None or state is None:
                return  # no longer probed, or a new run rescheduled it: this result is moot
            self._push(pod, item.key, item.kind, max(due + probe.period, self._monotonic()))
            if state.run != run or not state.active(probe.kind):
                return  # the run ended or was replaced while the probe ran
            step = state.record(probe.kind, outcome.ok)
            if step.changed and probe.kind == STARTUP and READINESS in state.probes:
                self._push(pod, item.key, READINESS, self._monotonic(), reschedule=True)  # the kubelet's manual trigger
            changed = step.changed and self._write(entry, [state])
        if not outcome.ok:
            self._tell_failure(entry, probe, outcome)
        if step.kill:
            self._kill(entry, probe)
        if changed:
            self._on_change(entry)

    def _target(self, entry: Tracked) -> Target:
        instance = entry.last_instance
        endpoint = instance.endpoint if instance is not None else None
        host = host_of(endpoint) if endpoint else str((entry.pod.get("status") or {}).get("podIP") or "")
        instance_id = entry.instance_id or (instance.id if instance is not None else None)
        assert instance_id is not None
        return Target(instance_id, host)

    def _tell_failure(self, entry: Tracked, probe: Probe, outcome: Outcome) -> None:
        verb = "errored" if outcome.errored else "failed"
        self._events.pod(entry.pod, "Warning", names.EVENT_UNHEALTHY, f"{probe.title} probe {verb}: {outcome.message}")

    def _kill(self, entry: Tracked, probe: Probe) -> None:
        """The kubelet's answer to a failed liveness (or startup) probe: stop the container
        with the probe's grace (else the Pod's); the restart policy then runs it again."""
        name = probe.container
        if self._stopper is None:
            why = "the provider cannot stop one container"
            message = f"Container {name} failed {probe.kind} probe and cannot be restarted: {why}"
            self._events.pod(entry.pod, "Warning", names.EVENT_UNHEALTHY, message)
            return
        message = f"Container {name} failed {probe.kind} probe, will be restarted"
        self._events.pod(entry.pod, "Normal", names.EVENT_KILLING, message)
        assert entry.instance_id is not None
        try:
            self._kill_container(entry, name, probe.grace)
        except errors.ProviderError as exc:
            logger.warning("could not stop container %s of %s: %s", name, entry.key, exc)
            self._events.pod(
                entry.pod, "Warning", names.EVENT_FAILED_KILL_POD, f"error killing container {name}: {exc}"
            )
            with self._lock:  # not stopped: let the probe count its failures again
                pod = self._pods.get(entry.uid)
                state = pod.containers.get(name) if pod is not None else None
                if state is not None:
                    state.held.discard(probe.kind)

    def _stop_container(self, entry: Tracked, name: str, grace: float) -> None:
        assert self._stopper is not None and entry.instance_id is not None
        self._stopper.stop_container(entry.instance_id, name, grace=grace)

    def _write(self, entry: Tracked, states: Iterable[ContainerProbes]) -> bool:
        """The verdicts onto the entry, each with the run it was made for (under the lock; a
        new Verdicts, so a reader holds the old one safely); True if one of them is new (the
        caller then calls `on_change`)."""
        old = entry.probe_verdicts
        ready, started, runs = dict(old.ready), dict(old.started), dict(old.runs)
        for state in states:
            if READINESS in state.probes:
                ready[state.container] = state.ready
            if STARTUP in state.probes:
                started[state.container] = state.started
            runs[state.container] = state.run
        new = Verdicts(ready=ready, started=started, runs=runs)
        if new == old:
            return False
        entry.probe_verdicts = new
        return True
