"""The order of an instance's containers: which one may start now, and when the sidecars stop.

Read by the supervisor (before it starts its container, and after an app container ended) and
by the folder reader (a container held by an init container reads as waiting). Reads records
only, never /proc; writes nothing but the sidecars' stop records. Never applies a restart
policy beyond the one rule below: restarting a container is the vnode's call.

Rule for a start: an init container starts once every init container before it succeeded
(its current run exited 0) and every native sidecar before it started; the app containers
start together once every init container passed so. So a failed init container holds every
container after it until it is restarted and succeeds.
Rule for the sidecars: once every app container's current run ended and none will run again
under the Pod's restart policy (Never: all ended; OnFailure: all ended with 0; Always: never),
each running sidecar is asked to stop (its supervisor sends TERM, then KILL after the grace).
Invariant: a failed init container holds the app containers until it is restarted and succeeds
(tests/providers/local/test_local_containers.py::test_a_failing_init_container_holds_the_app_containers_until_it_is_restarted_and_succeeds).
Tests: tests/providers/local/test_local_containers.py.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from providers.local import folder, runs, stamp

INIT, SIDECAR, APP = "init", "sidecar", "app"


@dataclass(frozen=True)
class Entry:
    """One container of an instance: its name, its kind (INIT, SIDECAR or APP) and its folder."""

    name: str
    kind: str
    folder: Path


def entries(path: Path, spec: Mapping[str, Any] | None) -> list[Entry]:
    """Every container of the instance in `path`, in Pod order (init containers first), from
    the instance record `spec`; a folder made before several containers is its one app container."""
    listed = (spec or {}).get("containers")
    if not isinstance(listed, list) or not listed:
        return [Entry(str((spec or {}).get("container") or ""), APP, path)]
    found: list[Entry] = []
    first_app = True
    for item in listed:
        name, kind = str(item.get("name", "")), str(item.get("kind", APP))
        found.append(Entry(name, kind, folder.container_folder(path, name, first_app=kind == APP and first_app)))
        first_app = first_app and kind != APP
    return found


def _current(container: Path, name: str) -> dict[str, Any] | None:
    return runs.of_run(folder.read_json(container / name), runs.current(container))


def exit_code(container: Path) -> int | None:
    """The exit code of the container's current run; None while it has none."""
    code = (_current(container, folder.EXIT_FILE) or {}).get("exit_code")
    return code if isinstance(code, int) else None


def ever_started(container: Path) -> bool:
    """The container's workload was started at least once (a restart means it was)."""
    if runs.current(container) > 1:
        return True
    return _current(container, folder.RUN_FILE) is not None or _current(container, folder.EXIT_FILE) is not None


def may_start(containers: Sequence[Entry], name: str) -> bool:
    """Whether container `name` may start now (the rule for a start)."""
    for entry in containers:
        if entry.name == name or entry.kind == APP:
            return True
        if entry.kind == SIDECAR and not ever_started(entry.folder):
            return False
        if entry.kind == INIT and exit_code(entry.folder) != 0:
            return False
    return True


def sidecars_may_stop(containers: Sequence[Entry], restart_policy: str) -> bool:
    """Every app container ended and none will run again under `restart_policy`."""
    if restart_policy not in ("Never", "OnFailure"):
        return False
    codes = [exit_code(entry.folder) for entry in containers if entry.kind == APP]
    if any(code is None for code in codes):
        return False
    return restart_policy == "Never" or all(code == 0 for code in codes)


def request_stop(container: Path, *, grace: float) -> None:
    """Ask the container's current run to stop: TERM now, KILL `grace` seconds from now (at
    once for `grace <= 0`). Asked again, the earlier of the two kill times holds: a shorter
    grace shortens the wait, a longer one never lengthens it."""
    run = runs.current(container)
    kill_at = time.time() + max(0.0, grace)
    current = _current(container, folder.STOP_FILE)
    if current is None:
        record = {"run": run, "grace": grace, "requested_at": stamp.now_stamp(), "kill_at": kill_at}
    elif kill_time(current, default_grace=grace) <= kill_at:
        return
    else:
        record = {**current, "kill_at": kill_at}
    folder.write_json_atomic(container / folder.STOP_FILE, record)


def kill_time(stop: Mapping[str, Any], *, default_grace: float) -> float:
    """When a stop record's run gets KILL (wall-clock seconds): its `kill_at`, else (a record
    written before kill times) its request time plus its grace."""
    kill_at = stop.get("kill_at")
    if isinstance(kill_at, int | float) and not isinstance(kill_at, bool):
        return float(kill_at)
    grace = stop.get("grace")
    seconds = float(grace) if isinstance(grace, int | float) and not isinstance(grace, bool) else default_grace
    asked = stop.get("requested_at")
    at = stamp.datetime_from_stamp(asked).timestamp() if isinstance(asked, str) else time.time()
    return at + max(0.0, seconds)


def stop_sidecars(containers: Sequence[Entry], *, grace: float) -> None:
    """Ask every sidecar whose current run runs (started, not ended) to stop."""
    for entry in containers:
        if entry.kind == SIDECAR and _current(entry.folder, folder.RUN_FILE) and exit_code(entry.folder) is None:
            request_stop(entry.folder, grace=grace)
