"""Read one container folder: its records (the current run's only) and whether its
processes live, as a `status.Observation`; and every container of an instance, in Pod order.

Used by the provider (get, list, logs, attach, exec, stop) and by `restart`. Reads the folders
and /proc; never writes, never signals.
Tests: tests/providers/local/test_local.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from providers.local import folder, pids, pod, runs, sequence, stamp, status


class FolderReader:
    """One container folder (`path`) of the instance in `instance` (default: `path`, the
    folder of a single-container instance), read afresh at every call."""

    def __init__(self, path: Path, *, owner_key: str, instance: Path | None = None) -> None:
        self.path = path
        self.instance_path = instance or path
        self.owner_key = owner_key
        self.instance_id = folder.instance_id_for(owner_key, self.instance_path.name)

    @property
    def label(self) -> str:
        """How an error names what this folder holds: `instance <id>`, or `container 'x' of instance <id>`."""
        if self.path == self.instance_path:
            return f"instance {self.instance_id}"
        return f"container {self.path.name!r} of instance {self.instance_id}"

    def containers(self) -> list[sequence.Entry]:
        """Every container of the instance, in Pod order (the instance record's list)."""
        return sequence.entries(self.instance_path, self.record_of_instance(folder.SPEC_FILE))

    def record_of_instance(self, name: str) -> dict[str, Any] | None:
        data = folder.read_json(self.instance_path / name)
        return data if isinstance(data, dict) else None

    def container(self, entry: sequence.Entry) -> FolderReader:
        return FolderReader(entry.folder, owner_key=self.owner_key, instance=self.instance_path)

    def observe_containers(self) -> list[pod.Seen] | None:
        """Every container as it is now, in Pod order; None once the instance is gone."""
        entries = self.containers()
        seen = []
        for entry in entries:
            observation = self.container(entry).observe()
            if observation is None:
                return None
            seen.append(
                pod.Seen(entry.name, entry.kind, observation, sequence.may_start(entries, entry.name), entry.folder)
            )
        return seen

    def record(self, name: str) -> dict[str, Any] | None:
        data = folder.read_json(self.path / name)
        return data if isinstance(data, dict) else None

    def runs(self) -> int:
        return runs.current(self.path)

    def run_record(self, name: str, run: int) -> dict[str, Any] | None:
        """The record `name` of run `run`; None when absent or of another run."""
        return runs.of_run(folder.read_json(self.path / name), run)

    def supervisor(self, run: int) -> pids.ProcessIdentity | None:
        """Run `run`'s supervisor, as its launcher recorded it."""
        return _supervisor_in(self.run_record(folder.LAUNCH_FILE, run))

    def workload(self, run: int) -> pids.ProcessIdentity | None:
        """The leader of run `run`'s workload group, as its supervisor recorded it."""
        return _workload_in(self.run_record(folder.RUN_FILE, run))

    def supervisor_alive(self, run: int) -> bool:
        return _supervisor_lives(self.run_record(folder.LAUNCH_FILE, run))

    def workload_alive(self, run: int) -> bool:
        return _workload_lives(self.run_record(folder.RUN_FILE, run))

    def exit_code(self, run: int) -> int | None:
        """Run `run`'s recorded exit code; None while it has none."""
        code = (self.run_record(folder.EXIT_FILE, run) or {}).get("exit_code")
        return code if isinstance(code, int) else None

    def finished(self, run: int) -> bool:
        """Run `run` will write no more output: it exited, a later run began, or nothing lives."""
        if not self.path.exists() or self.runs() != run or self.run_record(folder.EXIT_FILE, run) is not None:
            return True
        return not (self.supervisor_alive(run) or self.workload_alive(run))

    def observe(self) -> status.Observation | None:
        """What the folder says now; None once it is gone.

        Read in the order the supervisor writes, backwards: the identities first, then
        whether they live, then the exit record. A supervisor records the exit and only then
        exits, so a run that ends while it is read shows its exit; read the other way round
        it would look gone without one (FAILED, exit code unknown). A restart committed
        meanwhile (the run number moved) is read again, as the new run."""
        while True:
            run = self.runs()
            spec = self.record(folder.SPEC_FILE)
            try:
                mtime = self.path.stat().st_mtime
            except FileNotFoundError:
                return None
            launch = self.run_record(folder.LAUNCH_FILE, run)
            started = self.run_record(folder.RUN_FILE, run)
            supervisor_alive, workload_alive = _supervisor_lives(launch), _workload_lives(started)
            # Spawned but not yet recorded: running already, as containerd reports a started task.
            started = started or self.run_record(folder.SPAWN_FILE, run)
            ended = self.run_record(folder.EXIT_FILE, run)
            launch_error = self.run_record(folder.LAUNCH_ERROR_FILE, run)
            terminate = self.record_of_instance(folder.TERMINATE_FILE)
            if self.runs() == run:
                break
        created = (spec or {}).get("created_at")
        return status.Observation(
            instance_id=self.instance_id,
            claim=self.instance_path.name,
            created_at=stamp.datetime_from_stamp(created)
            if isinstance(created, str)
            else datetime.fromtimestamp(mtime, UTC),
            spec=spec,
            launch=launch,
            run=started,
            exit=ended,
            terminate=terminate,
            supervisor_alive=supervisor_alive,
            workload_alive=workload_alive,
            launch_error=launch_error,
            runs=run,
        )


def _supervisor_in(launch: dict[str, Any] | None) -> pids.ProcessIdentity | None:
    """The supervisor a launch record names."""
    return pids.ProcessIdentity.from_json((launch or {}).get("supervisor"))


def _workload_in(started: dict[str, Any] | None) -> pids.ProcessIdentity | None:
    """The workload group leader a run record names."""
    return pids.ProcessIdentity.from_json((started or {}).get("workload"))


def _supervisor_lives(launch: dict[str, Any] | None) -> bool:
    identity = _supervisor_in(launch)
    return identity is not None and pids.is_alive(identity)


def _workload_lives(started: dict[str, Any] | None) -> bool:
    leader = _workload_in(started)
    return leader is not None and pids.group_alive(leader)
