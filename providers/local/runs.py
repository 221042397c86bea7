"""The runs of one local container: how many times its workload started, which records are
the current run's, and the rotation that makes room for the next run (restart in place).
`path` is a container's folder (`folder.container_folder`; the instance folder for a
single-container instance).

Called by `restart` (rotate, holding the launch lock), by the supervisor's launcher
(`finish_rotation`, holding the lock) and by the folder reader (`current`). Never starts or
signals a process; every change of the folder is made with the launch lock held.

Rule for a rotation: link the ended run's log and index into `PREVIOUS_DIR` (replacing the
one before), then write `RUNS_FILE` with the next number: that write is the commit. From
then on the records of the older run are stale and read as absent, so the instance reads as
a launch not yet begun (resumed by whoever sees it next, as an interrupted launch is), and
`finish_rotation` (run again by every launcher) removes them and gives the new run an empty
log. A crash at any step leaves either the ended run (restart may be asked again) or the
next run waiting for its launch; never two workloads, never a lost log.
Tests: tests/providers/local/test_local_restart.py.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from providers.local import folder

RUN_RECORDS = (
    folder.LAUNCH_FILE,
    folder.RUN_FILE,
    folder.EXIT_FILE,
    folder.LAUNCH_ERROR_FILE,
    folder.SPAWN_FILE,
    folder.STOP_FILE,
)
LOGS = (folder.LOG_FILE, folder.LOG_INDEX_FILE)


def current(path: Path) -> int:
    """The number of the current run: 1 + the restarts committed so far."""
    record = folder.read_json(path / folder.RUNS_FILE)
    runs = record.get("runs") if isinstance(record, dict) else None
    return runs if isinstance(runs, int) and runs >= 1 else 1


def run_of(record: Mapping[str, Any]) -> int:
    """The run a record belongs to (records made before restarts existed: run 1)."""
    run = record.get("run", 1)
    return run if isinstance(run, int) else 1


def of_run(record: Any, run: int) -> dict[str, Any] | None:
    """`record` if it is a record of run `run`, else None (absent, torn or stale)."""
    return record if isinstance(record, dict) and run_of(record) == run else None


def rotate(path: Path) -> int:
    """Keep the ended run's output as the previous one and commit the next run; returns its
    number. Call with the launch lock held, once the workload ended."""
    run = current(path)
    fresh = path / f".previous-{uuid.uuid4().hex[:8]}"
    fresh.mkdir()
    for name in LOGS:
        try:
            os.link(path / name, fresh / name)
        except FileNotFoundError:
            (fresh / name).touch()
    _replace_previous(path, fresh)
    folder.write_json_atomic(path / folder.RUNS_FILE, {"runs": run + 1})
    finish_rotation(path)
    return run + 1


def _replace_previous(path: Path, fresh: Path) -> None:
    previous = path / folder.PREVIOUS_DIR
    grave = path / f".gone-previous-{uuid.uuid4().hex[:8]}"
    try:
        os.rename(previous, grave)
    except FileNotFoundError:
        pass
    os.rename(fresh, previous)
    shutil.rmtree(grave, ignore_errors=True)


def finish_rotation(path: Path) -> None:
    """Remove the records of runs before the current one and give the current run its own
    empty log where it still shares the previous run's. Idempotent; a no-op on a folder
    that was never restarted. Call with the launch lock held."""
    run = current(path)
    for name in RUN_RECORDS:
        record = folder.read_json(path / name)
        if isinstance(record, dict) and run_of(record) < run:
            (path / name).unlink(missing_ok=True)
    previous = path / folder.PREVIOUS_DIR
    for name in LOGS:
        if _same_file(path / name, previous / name):
            empty = path / f".{name}.{uuid.uuid4().hex}.tmp"
            empty.touch()
            os.replace(empty, path / name)


def _same_file(one: Path, other: Path) -> bool:
    try:
        return os.path.samefile(one, other)
    except FileNotFoundError:
        return False
