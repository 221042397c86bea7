"""Stopping a Pod's containers as a kubelet does: preStop hooks inside the grace, SIGTERM, SIGKILL at the grace's end.

One stop path for every reason a running Pod's containers stop: a graceful delete (the
teardown), an `activeDeadlineSeconds` that ran out or a budget stop (the lifecycle) and a failed liveness probe
(the prober, through `kill_container`). The hooks run on a thread of their own (an exec
through the provider's `Executor`, an HTTP GET to the instance, a sleep), each bounded by the
grace; then every running container gets the provider's `stop_container` with the grace that is
left (the provider kills what still runs at its end); the teardown or lifecycle terminates the
instance once the containers ended or the grace and one poll have passed. Never deletes a Pod,
never terminates an instance itself.
Tests: tests/vnode/test_stopping.py.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import queue
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from kube import names
from kube.worker import Retry
from providers import errors
from providers.base import ContainerStopper, Executor, Instance, InstanceState
from providers.shape import ContainerState
from vnode.model import assess, containerstatus
from vnode.model.probespec import ExecAction, InvalidProbe
from vnode.model.stopping import Hook, SleepAction, Stop, Why, grace_left, pre_stop
from vnode.model.tracking import Tracked
from vnode.phases.context import PhaseContext
from vnode.probing import probes

logger = logging.getLogger(__name__)
FIRST_LOOK = 0.25  # seconds after the SIGTERM before the first look; the looks then double
HOOK_LOOK = 0.2  # seconds between looks while the preStop hooks run
EVENT_FAILED_PRE_STOP = "FailedPreStopHook"
EVENT_NO_GRACEFUL_STOP = "GracefulStopNotSupported"  # the provider cannot signal one container (no SSH)
MAX_HOOK_WORKERS = 16  # preStop hooks run at once per provider; more wait their turn (within their grace)
KILLED = 137  # the exit a kubelet reports of a container its SIGKILL ended
_ENDED = frozenset({InstanceState.SUCCEEDED, InstanceState.FAILED, InstanceState.TERMINATED})


class HookPool:
    """At most `workers` daemon threads run preStop hooks, started as work comes; the rest wait
    in the queue (one entry per hook of a Pod being stopped, so no more than the tracked Pods'
    containers). A hook that waited past its Pod's grace is skipped by its job."""

    def __init__(self, workers: int = MAX_HOOK_WORKERS) -> None:
        self.workers = workers
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self._jobs: queue.Queue[Callable[[], None]] = queue.Queue()
        self._idle = 0

    def submit(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)
        with self.lock:
            if self._idle:
                self._idle -= 1  # an idle worker takes it
                return
            if len(self.threads) >= self.workers:
                return  # it waits for the first worker free
            thread = threading.Thread(target=self._work, name=f"prestop {len(self.threads)}", daemon=True)
            self.threads.append(thread)
        thread.start()

    def _work(self) -> None:
        while True:
            with self.lock:
                self._idle += 1
            job = self._jobs.get()
            try:
                job()
            except Exception:
                logger.exception("preStop hook failed unexpectedly")


def killed(instance: Instance, *, at: datetime) -> Instance:
    """`instance` with what still runs ended by SIGKILL (137, `Error`), as the terminate that
    follows leaves it: the final status a Pod is written with when its grace ran out unseen."""
    containers = tuple(
        dataclasses.replace(c, state=ContainerState.TERMINATED, exit_code=KILLED, exit_reason="Error", finished_at=at)
        if c.state is ContainerState.RUNNING
        else c
        for c in instance.containers
    )
    if instance.state in _ENDED:
        return dataclasses.replace(instance, containers=containers)
    return dataclasses.replace(
        instance,
        state=InstanceState.FAILED,
        containers=containers,
        exit_code=KILLED,
        exit_reason="Error",
        finished_at=at,
    )


class Stopping:
    def __init__(self, context: PhaseContext) -> None:
        self._provider = context.provider
        self._stopper = context.provider if isinstance(context.provider, ContainerStopper) else None
        self._executor = context.provider if isinstance(context.provider, Executor) else None
        self._events = context.events
        self._monotonic = context.monotonic
        self._now = context.now
        self._rules = context.rules
        self._poll_interval = context.poll_interval
        self._hooks = HookPool()

    # -- a whole Pod ----------------------------------------------------------------------------
    def begin(self, entry: Tracked, why: Why, grace: float, *, message: str = "", reason: str = "") -> Stop:
        """Start stopping the Pod's running containers (once; a later call with a shorter grace
        moves the end closer). From now on nothing of the Pod runs again. `message`: what the
        Pod's status says of the stop (a budget's or an interruption's; `reason` an interruption's)."""
        now = self._monotonic()
        with entry.lock:
            stop = entry.stop
            if stop is not None:
                stop.shorten(grace, now)
                return stop
            stop = entry.stop = Stop(why, began=now, grace=grace, message=message, reason=reason)
            for runs in (entry.runs, *entry.containers.values()):
                runs.policy = "Never"  # what ends now is the last run (no restart during a stop)
                if runs.ended is not None:
                    runs.stop()
        running = self._running(entry)
        for name in running:
            self._events.pod(entry.pod, "Normal", names.EVENT_KILLING, f"Stopping container {name}")
        stop.told = bool(running)
        found = {name: self._hook(entry, name) for name in running} if grace > 0 else {}
        hooks = {name: hook for name, hook in found.items() if hook is not None}
        stop.hooks_ran = bool(hooks)
        if not hooks:
            stop.hooks_done.set()
            return stop
        left = [len(hooks)]  # hooks of this stop still to finish (under the pool's lock)

        def run(name: str, hook: Hook) -> None:
            try:
                timeout = stop.ends - self._monotonic()
                if timeout > 0:  # one queued behind a full pool past its grace is skipped
                    self._run_hook(entry, name, hook, timeout=timeout)
            finally:
                with self._hooks.lock:
                    left[0] -= 1
                    if not left[0]:
                        stop.hooks_done.set()

        for name, hook in hooks.items():
            self._hooks.submit(functools.partial(run, name, hook))
        return stop

    def advance(self, entry: Tracked) -> float | None:
        """Move the entry's stop on: seconds until it wants another look, or None once its
        containers ended (their final facts observed) or the grace and one poll have passed.
        Raises Retry when the provider could not be asked."""
        stop = entry.stop
        assert stop is not None
        now = self._monotonic()
        if not stop.hooks_done.is_set() and now < stop.ends:
            return min(HOOK_LOOK, stop.ends - now)
        remaining = stop.remaining(now)
        # Asked once; again only when a shorter grace (a later delete) moves the SIGKILL earlier:
        # every ask is a SIGTERM on some providers, and a trap that starts over never finishes.
        if stop.signalled_at is None or (stop.kill_by is not None and now + remaining < stop.kill_by - 0.5):
            running = self._running(entry)
            if not running:
                return None
            if not self._signal(entry, running, remaining):
                return None  # nothing could be asked to stop alone: terminate ends it whole
            stop.signalled_at, stop.kill_by = now, now + remaining
            if remaining <= 0:
                return None  # killed at once: terminate follows without a look
            stop.look_after = now + min(FIRST_LOOK, remaining)
            # One look right after the signal: most containers end on SIGTERM at once, and are
            # seen ended now rather than a FIRST_LOOK later (tests/vnode/test_one_pod_latency.py).
            if self._still_running(entry, at=now) is None:
                return None
            return stop.look_after - now
        if now < stop.look_after:
            return stop.look_after - now  # woken early (an Event, a status write): the look is not due
        instance = self._still_running(entry, at=now)
        if instance is None:
            return None
        assert stop.kill_by is not None
        if now >= stop.kill_by + self._poll_interval():
            logger.info(
                "%s: containers still running %.1fs after their grace; terminating", entry.key, now - stop.kill_by
            )
            with entry.lock:  # the terminate kills them: their end reads as a kubelet's SIGKILL
                assess.observe(entry, killed(instance, at=self._now()), now=self._now(), at=now, rules=self._rules())
            return None
        since = now - stop.signalled_at
        wait = max(FIRST_LOOK, min(since, self._poll_interval()))
        if now < stop.kill_by:
            wait = min(wait, stop.kill_by - now + 0.05)
        stop.look_after = now + wait
        return wait

    # -- one container (a failed liveness probe) ----------------------------------------------
    def kill_container(self, entry: Tracked, name: str, grace: float) -> None:
        """Stop one container as a kubelet kills it for a failed liveness probe: its preStop
        hook inside `grace`, then SIGTERM and SIGKILL at the grace's end. Runs the hook on the
        caller's thread (a probe worker). Raises ProviderError when it could not be stopped."""
        if self._stopper is None:
            raise errors.NotSupported("the provider cannot stop one container")
        began = self._monotonic()
        hook = self._hook(entry, name) if grace > 0 else None
        if hook is not None:
            self._run_hook(entry, name, hook, timeout=grace)
        left = grace_left(grace, self._monotonic() - began, hooks_ran=hook is not None)
        assert entry.instance_id is not None
        self._stopper.stop_container(entry.instance_id, name, grace=left)

    # -- the parts -------------------------------------------------------------------------------
    def _running(self, entry: Tracked) -> list[str]:
        """The containers that run, by the last facts: each container's where the instance
        reports them, else every app container while the instance runs."""
        instance = entry.last_instance
        if entry.instance_id is None or instance is None:
            return []
        if instance.containers:
            return [c.name for c in instance.containers if c.state is ContainerState.RUNNING]
        if instance.state is not InstanceState.RUNNING:
            return []
        return [str(c.get("name", "")) for c in containerstatus.app_containers(entry.pod)]

    def _hook(self, entry: Tracked, name: str) -> Hook | None:
        spec = self._container(entry.pod, name)
        if spec is None:
            return None
        try:
            return pre_stop(spec)
        except InvalidProbe as exc:
            self._events.pod(entry.pod, "Warning", EVENT_FAILED_PRE_STOP, f"PreStopHook failed: {exc}")
            return None

    def _run_hook(self, entry: Tracked, name: str, hook: Hook, *, timeout: float) -> None:
        if isinstance(hook, SleepAction):
            threading.Event().wait(min(hook.seconds, timeout))
            return
        assert entry.instance_id is not None
        if isinstance(hook, ExecAction):
            if self._executor is None:
                outcome = probes.Outcome(False, "the provider cannot run a command in the instance (no exec)")
            else:
                outcome = probes.run_exec(self._executor, entry.instance_id, name, hook.command, timeout=timeout)
        else:
            host = hook.host or self._host(entry)
            if hook.port is None:
                outcome = probes.Outcome(False, f"port {hook.port_name} not found")
            elif not host:
                outcome = probes.Outcome(False, "the instance has no address")
            else:
                outcome = probes.run_http(hook, host, timeout=timeout)
        if not outcome.ok:
            message = f"PreStopHook failed: {outcome.message}" if outcome.message else "PreStopHook failed"
            self._events.pod(entry.pod, "Warning", EVENT_FAILED_PRE_STOP, message)

    def _signal(self, entry: Tracked, running: list[str], grace: float) -> bool:
        """Ask the provider to stop each running container; False if it cannot stop one alone."""
        if self._stopper is None:
            return False  # terminate stops the instance as a whole
        assert entry.instance_id is not None
        instance = entry.last_instance
        if instance is not None and not instance.containers:
            running = [""]  # one workload: the provider's whole instance (its first app container)
        for name in running:
            try:
                self._stopper.stop_container(entry.instance_id, name, grace=grace)
            except errors.NotFound:
                continue  # gone, or ended meanwhile
            except errors.NotSupported as exc:  # e.g. RunPod without SSH: terminate ends it whole
                logger.info("%s: container %s cannot be stopped alone (%s); terminating", entry.key, name, exc)
                container = name or entry.container
                message = f"{self._provider.name} cannot stop container {container} gracefully ({exc}): terminating"
                self._events.pod(entry.pod, "Warning", EVENT_NO_GRACEFUL_STOP, message)
                return False
            except errors.Unavailable as exc:
                raise Retry(f"provider unreachable: {exc}", delay=exc.retry_after) from exc
            except errors.ProviderError as exc:
                raise Retry(f"stopping container {name} failed: {type(exc).__name__}: {exc}") from exc
        return True

    def _still_running(self, entry: Tracked, *, at: float) -> Instance | None:
        """Look at the instance: its facts while its containers still run; None once they ended
        (their final facts observed) or it is gone. Raises Retry when the provider could not be asked."""
        instance = self._look(entry)
        if instance is not None and not self._ended(instance):
            return instance
        if instance is not None:
            with entry.lock:
                assess.observe(entry, instance, now=self._now(), at=at, rules=self._rules())
        return None

    def _look(self, entry: Tracked) -> Instance | None:
        assert entry.instance_id is not None
        try:
            return self._provider.get(entry.instance_id)
        except errors.Unavailable as exc:
            raise Retry(f"provider unreachable: {exc}", delay=exc.retry_after) from exc
        except errors.ProviderError as exc:
            raise Retry(f"cannot read instance {entry.instance_id}: {exc}") from exc

    @staticmethod
    def _ended(instance: Instance) -> bool:
        if instance.state in _ENDED or instance.state is InstanceState.TERMINATING:
            return True
        if instance.containers:
            return all(c.state is not ContainerState.RUNNING for c in instance.containers)
        return False

    @staticmethod
    def _host(entry: Tracked) -> str:
        instance = entry.last_instance
        if instance is not None and instance.endpoint:
            return probes.host_of(instance.endpoint)
        return str((entry.pod.get("status") or {}).get("podIP") or "")

    @staticmethod
    def _container(pod: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
        spec = pod.get("spec") or {}
        for key in ("containers", "initContainers"):
            for container in spec.get(key) or []:
                if container.get("name") == name:
                    return container  # type: ignore[no-any-return]
        return None
