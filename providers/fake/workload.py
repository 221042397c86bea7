"""The containers of one fake instance and their life from the clock: init containers in
order, native sidecars started in their place and kept running, then every app container
at once; a failed init container holds the sequence until it is restarted.

Owned by `InstanceRecord` (mutated only under the cloud's lock, serialised in the state
file). It applies no restart policy, except the one a kubelet leaves to the node: sidecars
stop once the app containers ended and none will run again under the Pod's policy.
Never holds env values or volume contents: files are known by path and mode only.
Tests: tests/providers/fake/test_fake_containers.py.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from providers.fake.scenario import ContainerScript, Scenario
from providers.shape import ContainerFacts, ContainerSpec, ContainerState, Volume

KILLED = 137  # the exit code of a container killed (stop_container's grace spent, terminate), as SIGKILL reports it


@dataclass(frozen=True)
class Run:
    """One run of a container: when it started and stopped (None: still running)."""

    started_at: float
    stopped_at: float | None


@dataclass
class ContainerRecord:
    """One container of an instance. `runs` counts its starts (0: never started)."""

    name: str
    init: bool = False
    sidecar: bool = False
    state: ContainerState = ContainerState.WAITING
    started_at: float | None = None
    stopped_at: float | None = None
    exit_code: int | None = None
    runs: int = 0
    previous_started_at: float | None = None  # the run before the current one (restart)
    previous_stopped_at: float | None = None
    term_at: float | None = None  # stop_container sent SIGTERM to the current run then
    kill_at: float | None = None  # ... and SIGKILL comes then (the end of the grace)
    files: list[tuple[str, int]] = field(default_factory=list)  # (absolute path, mode) it sees

    @property
    def running(self) -> bool:
        return self.state is ContainerState.RUNNING

    def start(self, at: float) -> None:
        """Run again from `at`; a run that ended becomes the previous one."""
        if self.started_at is not None:
            self.previous_started_at, self.previous_stopped_at = self.started_at, self.stopped_at
        self.state = ContainerState.RUNNING
        self.started_at, self.stopped_at, self.exit_code = at, None, None
        self.term_at = self.kill_at = None
        self.runs += 1

    def stop(self, at: float, grace: float) -> None:
        """SIGTERM at `at` (none for `grace <= 0`) and SIGKILL `grace` seconds later; asked
        again, the earlier SIGKILL holds. A no-op unless it runs."""
        if not self.running:
            return
        kill_at = at + max(0.0, grace)
        self.kill_at = kill_at if self.kill_at is None else min(self.kill_at, kill_at)
        if self.term_at is None and grace > 0:
            self.term_at = at

    def end(self, script: ContainerScript) -> tuple[float, int] | None:
        """When and with which code the current run ends by itself or by the stop asked for
        (the earliest of its scripted exit, its SIGTERM reaction and the SIGKILL); None if
        nothing ends it."""
        ends: list[tuple[float, int]] = []
        if script.run_seconds is not None and self.started_at is not None:
            ends.append((self.started_at + script.run_seconds, script.exit_code))
        if self.term_at is not None and script.sigterm.seconds is not None:
            ends.append((self.term_at + script.sigterm.seconds, script.sigterm.exit_code))
        if self.kill_at is not None:
            ends.append((self.kill_at, KILLED))
        return min(ends, key=lambda end: end[0]) if ends else None

    def finish(self, at: float, code: int) -> None:
        """It exited with `code` at `at` (a no-op unless it runs)."""
        if self.running:
            self.state, self.stopped_at, self.exit_code = ContainerState.TERMINATED, at, code

    def set_file(self, path: str, *, present: bool) -> None:
        """Put a file at `path` (mode 0644) or remove it; what its scripted exec sees."""
        kept = [(p, m) for p, m in self.files if p != path]
        self.files = sorted(kept + [(path, 0o644)]) if present else kept

    def run(self, *, previous: bool) -> Run | None:
        """The current run, or the one before it; None if there is none."""
        if previous:
            return None if self.previous_started_at is None else Run(self.previous_started_at, self.previous_stopped_at)
        return None if self.started_at is None else Run(self.started_at, self.stopped_at)

    def facts(self) -> ContainerFacts:
        ended = self.state is ContainerState.TERMINATED
        return ContainerFacts(
            name=self.name,
            state=self.state,
            init=self.init,
            started_at=None if self.state is ContainerState.WAITING else _datetime(self.started_at),
            finished_at=_datetime(self.stopped_at) if ended else None,
            exit_code=self.exit_code if ended else None,
            exit_reason=exit_reason(self.exit_code) if ended else "",
            message=f"exited with code {self.exit_code}" if ended else "",
            runs=self.runs,
        )

    def key(self) -> tuple[object, ...]:
        return (self.state, self.started_at, self.stopped_at, self.exit_code, self.runs)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["state"] = self.state.value
        data["files"] = [[path, mode] for path, mode in self.files]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ContainerRecord:
        values = dict(data)
        values["state"] = ContainerState(values.get("state", "waiting"))
        values["files"] = [(str(path), int(mode)) for path, mode in values.get("files") or ()]
        return cls(**values)


def exit_reason(code: int | None) -> str:
    """The kubelet's word for an exit: Completed for 0, Error otherwise."""
    return "" if code is None else "Completed" if code == 0 else "Error"


def build_containers(
    init_containers: Sequence[ContainerSpec], app_containers: Sequence[ContainerSpec], volumes: Sequence[Volume]
) -> list[ContainerRecord]:
    """The containers of a new instance, init containers first, each with the volume files
    it sees at its mount paths (paths and modes; the contents are not kept)."""
    by_name = {v.name: v for v in volumes}
    made = [ContainerRecord(s.name, init=True, sidecar=s.sidecar, files=_files(s, by_name)) for s in init_containers]
    return made + [ContainerRecord(s.name, files=_files(s, by_name)) for s in app_containers]


def _files(spec: ContainerSpec, volumes: Mapping[str, Volume]) -> list[tuple[str, int]]:
    found: list[tuple[str, int]] = []
    for mount in spec.mounts:
        volume = volumes.get(mount.volume)
        for file in volume.files if volume is not None else ():
            if not mount.sub_path:
                found.append((posixpath.join(mount.path, file.path), file.mode))
            elif file.path == mount.sub_path:
                found.append((mount.path, file.mode))
            elif file.path.startswith(mount.sub_path.rstrip("/") + "/"):
                found.append((posixpath.join(mount.path, file.path[len(mount.sub_path.rstrip("/")) + 1 :]), file.mode))
    return sorted(found)


def advance(containers: Sequence[ContainerRecord], begun: float, now: float, scenario: Scenario, policy: str) -> None:
    """Apply what time alone causes up to `now`, the sequence having begun at `begun`:
    scripted exits, the next step of the init sequence, the app containers' start, and
    the sidecars' stop once the app containers are done for good."""
    progressed = True
    while progressed:
        progressed = False
        for container in containers:
            script = scenario.script_for(container.name, init=container.init, sidecar=container.sidecar)
            end = container.end(script) if container.running else None
            if end is not None and end[0] <= now:
                container.finish(*end)
                progressed = True
        step = _next_start(containers, begun)
        if step is not None and step[0] <= now:
            for container in step[1]:
                container.start(step[0])
            progressed = True
    _stop_sidecars(containers, policy)


def _next_start(containers: Sequence[ContainerRecord], begun: float) -> tuple[float, list[ContainerRecord]] | None:
    """When the next step of the sequence starts and what it starts; None while it is
    held (an init container runs or failed) or complete."""
    at = begun
    for container in (c for c in containers if c.init):
        if container.state is ContainerState.WAITING:
            return at, [container]
        if container.sidecar:
            at = max(at, container.started_at or at)
            continue
        if container.state is not ContainerState.TERMINATED or container.exit_code != 0:
            return None
        at = max(at, container.stopped_at or at)
    apps = [c for c in containers if not c.init]
    if all(c.state is ContainerState.WAITING for c in apps):
        return at, apps
    return None


def _stop_sidecars(containers: Sequence[ContainerRecord], policy: str) -> None:
    """Sidecars stop (exit 0, at the last app exit) once nothing else will run again under
    `policy`: Never, every app container ended or an init container failed; OnFailure,
    every app container ended 0; Always, never."""
    sidecars = [c for c in containers if c.sidecar and c.running]
    if not sidecars or policy == "Always":
        return
    apps = [c for c in containers if not c.init]
    failed_init = next((c for c in containers if c.init and not c.sidecar and _failed(c)), None)
    apps_done = all(c.state is ContainerState.TERMINATED for c in apps)
    if policy == "OnFailure":
        done = apps_done and all(c.exit_code == 0 for c in apps)
    else:
        done = apps_done or failed_init is not None
    if not done:
        return
    enders = apps if apps_done or failed_init is None else [failed_init]
    ended = [c.stopped_at for c in enders if c.stopped_at is not None]
    at = max(ended, default=max(s.started_at or 0.0 for s in sidecars))
    for sidecar in sidecars:
        sidecar.finish(max(at, sidecar.started_at or at), 0)


def _failed(container: ContainerRecord) -> bool:
    return container.state is ContainerState.TERMINATED and container.exit_code not in (0, None)


def summary(containers: Sequence[ContainerRecord]) -> tuple[str, int | None, float | None, float | None]:
    """The instance's view of its containers: "initializing", "running" or "ended"; the
    exit code once ended (the first non-zero to happen, else 0); the earliest start of
    the current runs; the last stop once ended."""
    begun = [c for c in containers if c.state is not ContainerState.WAITING]
    starts = [c.started_at for c in begun if c.started_at is not None]
    first_start = min(starts) if starts else None
    if any(c.running for c in containers):
        apps_started = any(c.state is not ContainerState.WAITING for c in containers if not c.init)
        return ("running" if apps_started else "initializing"), None, first_start, None
    failed = sorted((c for c in begun if c.exit_code), key=lambda c: c.stopped_at or 0.0)
    code = failed[0].exit_code if failed and failed[0].exit_code is not None else 0
    stops = [c.stopped_at for c in begun if c.stopped_at is not None]
    return "ended", code, first_start, max(stops) if stops else None


def _datetime(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)
