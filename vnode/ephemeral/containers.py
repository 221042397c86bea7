"""Ephemeral containers (`kubectl debug`): each one a new process in the Pod's instance,
started through the provider's `Executor`, kept for attach and logs, and reported in
`status.ephemeralContainerStatuses` as a kubelet reports them.

The Handler calls `Ephemerals.sync` when a tracked Pod's spec changes, `overlay` before a
status write and `forget` when the Pod goes; the kubelet API (through `vnode.phases.serving`)
calls `attach` and `logs`. Never restarts an ephemeral container (a kubelet does not);
never writes to the API itself: changes are queued for the pod controller's flush.
Tests: tests/vnode/test_ephemeral.py, tests/vnode/kubelet/test_debug.py
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kube import names
from kube.times import rfc3339
from providers import errors
from providers.base import Executor, InstanceId, LogOptions, Process, Provider
from vnode.ephemeral import budget as output_budget
from vnode.ephemeral.streams import Attachment, Fanout, LogReader
from vnode.model.containerstatus import UNLOCATED
from vnode.model.tracking import Tracked

logger = logging.getLogger(__name__)
JsonDict = dict[str, Any]
CREATING = "ContainerCreating"
NOT_SUPPORTED = "EphemeralContainersNotSupported"
LOST = UNLOCATED  # the kubelet's reason for a container it lost track of
# Fields an ephemeral container may set that a process started through `Executor` cannot
# honour (it runs in its target's context): said in a Warning Event, never dropped silently (I9).
_UNSERVED = ("env", "envFrom", "workingDir", "volumeMounts", "volumeDevices", "securityContext")


@dataclass
class EphemeralRun:
    """What is known of one ephemeral container; changed under `Ephemerals`' lock."""

    name: str
    image: str
    waiting: str = CREATING
    message: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    reason: str = ""
    fanout: Fanout | None = field(default=None, repr=False)
    previous: JsonDict | None = None  # a final status written before this manager started

    def status(self, instance_id: str) -> JsonDict:
        """One V1ContainerStatus, as the kubelet writes it for an ephemeral container."""
        if self.previous is not None:
            return dict(self.previous)
        state: JsonDict
        if self.exit_code is not None:
            terminated: JsonDict = {"exitCode": self.exit_code, "reason": self.reason}
            if self.started_at is not None:
                terminated["startedAt"] = rfc3339(self.started_at)
            if self.finished_at is not None:
                terminated["finishedAt"] = rfc3339(self.finished_at)
            if self.message:
                terminated["message"] = self.message
            state = {"terminated": terminated}
        elif self.started_at is not None:
            state = {"running": {"startedAt": rfc3339(self.started_at)}}
        else:
            waiting: JsonDict = {"reason": self.waiting}
            if self.message:
                waiting["message"] = self.message
            state = {"waiting": waiting}
        out: JsonDict = {
            "name": self.name,
            "state": state,
            "lastState": {},
            "ready": False,
            "restartCount": 0,
            "image": self.image,
            "imageID": "",
        }
        if self.started_at is not None:
            out["containerID"] = f"nebula://{instance_id}/{self.name}"
        return out


class Ephemerals:
    """Thread-safe: sync runs on pod workers, process ends on pump threads."""

    def __init__(
        self,
        provider: Provider,
        *,
        now: Callable[[], datetime],
        changed: Callable[[str], None],
        pulls_images: Callable[[], bool],
        several_containers: Callable[[], bool],
        budget: output_budget.OutputBudget | None = None,
    ) -> None:
        self._provider = provider
        # Kept output is bounded per process, across every provider's Ephemerals (I7).
        self.budget = budget if budget is not None else output_budget.PROCESS_BUDGET
        self._now = now
        self._changed = changed
        self._pulls_images = pulls_images
        self._several = several_containers
        self._lock = threading.Lock()
        self._runs: dict[str, dict[str, EphemeralRun]] = {}

    def sync(self, entry: Tracked) -> None:
        """Start every ephemeral container of the Pod's spec not seen yet (once: never again).
        A finished Pod starts none, as a kubelet starts none in a terminal Pod."""
        phase = (entry.pod.get("status") or {}).get("phase")
        if entry.instance_id is None or entry.terminal or phase in ("Succeeded", "Failed"):
            return
        spec = entry.pod.get("spec") or {}
        wanted = [c for c in spec.get("ephemeralContainers") or [] if isinstance(c, Mapping) and c.get("name")]
        for container in wanted:
            name = str(container["name"])
            with self._lock:
                runs = self._runs.setdefault(entry.key, {})
                if name in runs:
                    continue
                run = runs[name] = EphemeralRun(name, str(container.get("image", "")))
            before = _reported_before(entry, name)
            if before is not None and {"running", "terminated"} & set(before.get("state") or {}):
                self._lost(run, before)  # (one shown waiting never ran: it starts as a new one)
            elif not isinstance(self._provider, Executor):
                self._refuse(entry, run)
            elif not self.budget.admit():
                self._too_many(entry, run)
            else:
                threading.Thread(
                    target=self._start, args=(entry, run, dict(container)), name=f"ephemeral {name}", daemon=True
                ).start()

    def _lost(self, run: EphemeralRun, before: JsonDict) -> None:
        """A container the status already shows started, from before this manager started:
        its process is gone with the old manager, and is not started again (I9)."""
        with self._lock:
            if "terminated" in (before.get("state") or {}):
                run.previous = before
                return
            run.exit_code, run.reason, run.finished_at = 137, LOST, self._now()
            run.message = "the manager restarted; this ephemeral container's process did not survive it"

    def _refuse(self, entry: Tracked, run: EphemeralRun) -> None:
        message = f"provider {self._provider.name!r} cannot run ephemeral containers: it cannot exec in its instances"
        with self._lock:
            run.waiting, run.message = NOT_SUPPORTED, message
        entry.say("Warning", names.EVENT_EPHEMERAL_FAILED, f'ephemeral container "{run.name}": {message}')
        self._changed(entry.key)

    def _too_many(self, entry: Tracked, run: EphemeralRun) -> None:
        """Not started: the process runs its most ephemeral containers already (I7). Never
        started later either: a kubelet does not start an ephemeral container twice."""
        message = (
            f"not started: this manager already runs {self.budget.max_running} ephemeral containers, "
            "its limit; start another once some have ended"
        )
        with self._lock:
            run.exit_code, run.reason, run.finished_at, run.message = 128, "StartError", self._now(), message
        entry.say("Warning", names.EVENT_EPHEMERAL_FAILED, f'ephemeral container "{run.name}": {message}')
        self._changed(entry.key)

    def _start(self, entry: Tracked, run: EphemeralRun, container: JsonDict) -> None:
        """On its own thread, admitted (`budget.admit`): exec the command in the target's (or
        first app container's) context. The place is given back when it ends or fails to start."""
        assert entry.instance_id is not None
        command = [str(part) for part in [*(container.get("command") or []), *(container.get("args") or [])]]
        tty, stdin = bool(container.get("tty")), bool(container.get("stdin"))
        if not command:
            command = ["sh"]  # an image's entrypoint is not known where images are not pulled
        if not self._pulls_images():
            entry.say(
                "Normal",
                names.EVENT_IMAGE_NOT_USED,
                f"{self._provider.name} does not pull container images; ephemeral container "
                f'"{run.name}" runs {command[0]!r} from the instance, image {run.image!r} is not used',
            )
        unserved = [f for f in _UNSERVED if container.get(f) not in (None, [], {}, "")]
        if unserved:
            entry.say(
                "Warning",
                names.EVENT_EPHEMERAL_UNSERVED,
                f'ephemeral container "{run.name}": {", ".join(unserved)} not applied; '
                "it runs with its target container's env, working directory and volumes",
            )
        target = str(container.get("targetContainerName") or entry.container)
        try:
            process = self._exec(entry.instance_id, command, tty=tty, stdin=stdin, target=target)
        except errors.ProviderError as exc:
            self.budget.discharge()
            with self._lock:
                run.exit_code, run.reason, run.finished_at = 128, "StartError", self._now()
                run.message = str(exc)
            entry.say("Warning", names.EVENT_EPHEMERAL_FAILED, f'ephemeral container "{run.name}": {exc}')
            self._changed(entry.key)
            return
        except BaseException:
            self.budget.discharge()
            raise
        with self._lock:  # one block: `forget` sees the Fanout (and releases it) or the run gone
            gone = self._runs.get(entry.key, {}).get(run.name) is not run or run.exit_code is not None
            if not gone:
                run.started_at = self._now()
                run.fanout = fanout = Fanout(
                    process,
                    tty=tty,
                    stdin_once=bool(container.get("stdinOnce")),
                    on_exit=lambda code: self._exited(entry.key, run, code),
                    budget=self.budget,
                    on_dropped=lambda lost, whole: self._dropped(entry, run.name, lost, whole),
                )
        if gone:  # the Pod went (or finished) while the exec was being started
            self.budget.discharge()
            process.close()
            return
        entry.say("Normal", names.EVENT_STARTED, f"Started ephemeral container {run.name}")
        fanout.start()
        self._changed(entry.key)

    def _exec(self, instance_id: str, command: list[str], *, tty: bool, stdin: bool, target: str) -> Process:
        executor = self._provider
        assert isinstance(executor, Executor)
        if self._several():
            return executor.exec(InstanceId(instance_id), command, tty=tty, stdin=stdin, container=target)
        return executor.exec(InstanceId(instance_id), command, tty=tty, stdin=stdin)

    def _exited(self, key: str, run: EphemeralRun, code: int) -> None:
        self.budget.discharge()  # once: the Fanout's last pump calls this once
        self._ended(key, run, code)

    def _ended(self, key: str, run: EphemeralRun, code: int) -> None:
        with self._lock:
            if run.exit_code is not None:
                return  # `stop` already said how it ended
            run.exit_code, run.finished_at = code, self._now()
            run.reason = "Completed" if code == 0 else "Error"
        self._changed(key)

    def _dropped(self, entry: Tracked, name: str, lost: int, whole: bool) -> None:
        """The budget dropped some of `name`'s output: said on its Pod (written by the next flush)."""
        limit = self.budget.limit
        if whole:
            message = (
                f'ephemeral container "{name}": its kept output ({lost} bytes) was dropped to stay within the '
                f"{limit} bytes kept for all ephemeral containers (NEBULA['EPHEMERAL_OUTPUT_BUDGET']); "
                "`kubectl logs` of it now says so"
            )
        else:
            message = (
                f'ephemeral container "{name}": its oldest output ({lost} bytes) was dropped to stay within the '
                f"{limit} bytes kept for all ephemeral containers (NEBULA['EPHEMERAL_OUTPUT_BUDGET']); "
                "its newest output is kept while it runs"
            )
        entry.say("Warning", names.EVENT_EPHEMERAL_OUTPUT_DROPPED, message)
        self._changed(entry.key)

    def overlay(self, entry: Tracked) -> None:
        """Put the ephemeral containers' statuses into the entry's desired status."""
        with self._lock:
            runs = list(self._runs.get(entry.key, {}).values())
            statuses = [run.status(str(entry.instance_id or "")) for run in runs]
        desired = entry.desired_status
        if not statuses or desired is None or desired.get("ephemeralContainerStatuses") == statuses:
            return
        entry.desired_status = {**desired, "ephemeralContainerStatuses": statuses}

    def known(self, key: str, name: str) -> bool:
        with self._lock:
            return name in self._runs.get(key, {})

    def target(self, entry: Tracked, name: str) -> str:
        """The container whose context an exec into the ephemeral container `name` uses."""
        for container in (entry.pod.get("spec") or {}).get("ephemeralContainers") or []:
            if isinstance(container, Mapping) and container.get("name") == name:
                return str(container.get("targetContainerName") or entry.container)
        return entry.container

    def attach(self, key: str, name: str) -> Attachment:
        """The running process of ephemeral container `name`; NotFound if it never started."""
        return self._fanout(key, name).attach()

    def logs(self, key: str, name: str, options: LogOptions) -> LogReader:
        """The kept output (stdout and stderr merged, newest 4 MiB within the process's budget);
        NotSupported for timestamps and since, which are not recorded for an ephemeral container;
        NotFound saying why once the budget dropped its output."""
        if options.timestamps or options.since is not None:
            raise errors.NotSupported(f'ephemeral container "{name}": timestamps and since are not kept for its output')
        try:
            return self._fanout(key, name).log_reader(
                follow=options.follow, tail_lines=options.tail_lines, limit_bytes=options.limit_bytes
            )
        except errors.NotFound as exc:
            raise errors.NotFound(f'ephemeral container "{name}": {exc}') from exc

    def _fanout(self, key: str, name: str) -> Fanout:
        with self._lock:
            run = self._runs.get(key, {}).get(name)
            fanout = run.fanout if run is not None else None
        if fanout is None:
            raise errors.NotFound(f'ephemeral container "{name}" has not started')
        return fanout

    def stop(self, key: str) -> None:
        """The Pod is terminal: kill its ephemeral processes (I10), which read as killed."""
        with self._lock:
            running = [r for r in self._runs.get(key, {}).values() if r.fanout is not None and r.exit_code is None]
            for run in running:
                run.exit_code, run.reason, run.finished_at = 137, "Error", self._now()
        for run in running:
            assert run.fanout is not None
            run.fanout.process.close()

    def close(self) -> None:
        """The Runner stops (shutdown, or its provider given to another replica): every Pod's
        ephemeral processes are closed and their kept output leaves the budget."""
        with self._lock:
            keys = list(self._runs)
        for key in keys:
            self.forget(key)

    def forget(self, key: str) -> None:
        """The Pod is gone (or going): close every ephemeral process it still runs and give
        back the memory of their kept output (the budget counts it no more)."""
        with self._lock:
            runs = self._runs.pop(key, {})
        for run in runs.values():
            if run.fanout is not None:
                try:
                    run.fanout.release()
                except OSError as exc:
                    logger.info("closing ephemeral container %s of %s: %s", run.name, key, exc)


def _reported_before(entry: Tracked, name: str) -> JsonDict | None:
    status = (entry.pod.get("status") or {}).get("ephemeralContainerStatuses") or []
    return next((dict(s) for s in status if isinstance(s, Mapping) and s.get("name") == name), None)
