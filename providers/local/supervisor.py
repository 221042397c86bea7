"""The supervisor: `python -m providers.local.supervisor <container folder> [<lock fd>]`.

Started by `launch.start_supervisor`, one per container of an instance; detaches into its
own session so it outlives the manager, waits until its container may start
(`providers.local.sequence`), runs one run of the container as its child (in its own process
group), appends its output to the container's log with an index of arrival times, and records
the exit code (from the group leader's wait status: its own code, or 128+N for death by
signal N), each record stamped with the run's number. Its spawn record is written just before
the workload is spawned, so the container reads RUNNING before its code runs (as containerd
reports a started task), never WAITING while it runs; the run record (the leader's identity)
follows the spawn.

Rule for a stop: the container's stop record (`stop_container`, or the sidecars' stop) gives
a kill time (`kill_at`, wall clock); the supervisor sends TERM to the group at once and KILL
at that time; a kill time already past sends KILL alone (grace <= 0). A later stop record
with an earlier kill time moves the KILL earlier. The instance's terminate record (or SIGTERM
to the supervisor) kills a container that was stopped at once, and gives one nobody stopped
the `grace_period` window (the orphan sweep). After an app container ended it stops the
sidecars once the sequence says so. Never logs the env.
Tests: tests/providers/local/test_local.py, tests/providers/local/test_local_stop.py.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import BinaryIO

from providers.local import folder, pids, runs, sequence, stamp

DRAIN_AFTER_EXIT = 2.0  # seconds to drain output of leftovers once the workload exited
START_POLL = 0.05  # seconds between looks at whether a waiting container may start


class OutputRecorder:
    """Appends output to the log as it comes, byte for byte, and before each chunk an
    index entry saying where it starts and when it arrived (`folder.INDEX_ENTRY`), so a
    reader that finds a byte in the log also finds its time."""

    def __init__(self, log: BinaryIO, index: BinaryIO) -> None:
        self._log = log
        self._index = index
        self._size = log.seek(0, os.SEEK_END)

    def feed(self, data: bytes) -> None:
        if not data:
            return
        self._index.write(folder.INDEX_ENTRY.pack(self._size, time.time_ns()))
        self._index.flush()
        self._log.write(data)
        self._log.flush()
        self._size += len(data)


class Supervisor:
    """One workload's life: start, pump output, forward termination, record the exit."""

    def __init__(self, path: Path, spec: Mapping[str, object], env: Mapping[str, str], *, run: int = 1) -> None:
        self.path = path
        self.instance = folder.instance_folder(path)
        self.name = str(spec.get("container") or "")
        self.kind = str(spec.get("kind") or sequence.APP)
        self.run_number = run
        self.argv = [str(a) for a in spec["argv"]]  # type: ignore[attr-defined]
        self.cwd = str(spec["cwd"])
        self.grace = float(spec["grace_period"])  # type: ignore[arg-type]
        self.env = dict(env)
        self.stdin = bool(spec.get("stdin"))
        self.terminate_asked = False
        self.terminate_seen: float | None = None  # when this supervisor first saw terminate
        self.term_sent = False
        self.killed = False
        self.child: subprocess.Popen[bytes] | None = None
        self.leader: pids.ProcessIdentity | None = None

    def on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.terminate_asked = True

    def run(self) -> None:
        if not self._wait_for_start():
            return  # terminated before it started: nothing to run, nothing to record
        with open(self.path / folder.LOG_FILE, "ab") as log, open(self.path / folder.LOG_INDEX_FILE, "ab") as index:
            recorder = OutputRecorder(log, index)
            reader, writer = os.pipe()
            stdin = self._open_stdin()
            started_at = stamp.now_stamp()
            record = {"started_at": started_at, "run": self.run_number}
            folder.write_json_atomic(self.path / folder.SPAWN_FILE, record)  # RUNNING from here on
            try:
                self.child = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL if stdin is None else stdin,
                    stdout=writer,
                    stderr=writer,
                    cwd=self.cwd,
                    env={**self.env, "PWD": self.cwd},
                    process_group=0,
                )
            except OSError as exc:
                os.close(writer)
                os.close(reader)
                if stdin is not None:
                    os.close(stdin)
                recorder.feed(f"nebula: cannot start {self.argv[0]!r}: {exc.strerror}\n".encode())
                self._record_exit(127 if isinstance(exc, FileNotFoundError) else 126)
                return
            os.close(writer)
            # stdin stays open here too: the workload never sees EOF when an attachment ends.
            self.leader = pids.identify(self.child.pid) or pids.ProcessIdentity(self.child.pid, 0)
            self._record_run(started_at, self.leader)
            self._pump(reader, recorder)
        self._record_exit(pids.exit_code_from_returncode(self.child.wait()))

    def _record_run(self, started_at: str, leader: pids.ProcessIdentity) -> None:
        supervisor = pids.identify(os.getpid())
        record = {
            "supervisor": supervisor.as_json() if supervisor else None,
            "workload": leader.as_json(),
            "started_at": started_at,
            "run": self.run_number,
        }
        folder.write_json_atomic(self.path / folder.RUN_FILE, record)

    def _terminating(self) -> bool:
        return self.terminate_asked or (self.instance / folder.TERMINATE_FILE).exists()

    def _containers(self) -> list[sequence.Entry]:
        return sequence.entries(self.instance, folder.read_json(self.instance / folder.SPEC_FILE))

    def _wait_for_start(self) -> bool:
        """Wait until the container may start; False if the instance is terminated meanwhile."""
        while not self._terminating():
            if sequence.may_start(self._containers(), self.name):
                return True
            time.sleep(START_POLL)
        return False

    def _open_stdin(self) -> int | None:
        """The workload's stdin: a FIFO in the folder (read-write, so it never reports EOF
        and opening it never blocks), or None for /dev/null."""
        if not self.stdin:
            return None
        fifo = self.path / folder.STDIN_FIFO
        if not fifo.exists():
            os.mkfifo(fifo, 0o600)
        return os.open(fifo, os.O_RDWR)

    def _pump(self, reader: int, recorder: OutputRecorder) -> None:
        assert self.child is not None
        exited_at: float | None = None
        pipe_open = True
        while True:
            self._enforce_termination()
            if exited_at is None and self.child.poll() is not None:
                exited_at = time.monotonic()
                self._kill_group()  # leftovers of the workload go with it, as in a container
                self.killed = True  # nothing more to signal: a later stop's KILL is moot
            if exited_at is not None and (not pipe_open or time.monotonic() - exited_at > DRAIN_AFTER_EXIT):
                break
            if not pipe_open:
                time.sleep(0.05)
                continue
            ready, _, _ = select.select([reader], [], [], 0.1)
            if ready:
                data = os.read(reader, 65536)
                if data:
                    recorder.feed(data)
                else:
                    pipe_open = False
        os.close(reader)

    def _enforce_termination(self) -> None:
        kill_at = self._kill_at()
        if kill_at is None or self.killed:
            return
        if time.time() >= kill_at:
            self._kill_group()
            self.killed = True
        elif not self.term_sent:
            self._signal(signal.SIGTERM)
            self.term_sent = True

    def _kill_at(self) -> float | None:
        """When the group gets KILL (wall clock), from the stops asked for (the rule for a
        stop); None while none was."""
        stop = runs.of_run(folder.read_json(self.path / folder.STOP_FILE), self.run_number)
        stop_at = sequence.kill_time(stop, default_grace=self.grace) if stop is not None else None
        if not self._terminating():
            return stop_at
        if self.terminate_seen is None:
            self.terminate_seen = time.time()
        # Terminate after a stop: what still runs is killed; nobody stopped it: the grace period.
        window = self.terminate_seen + (0.0 if stop is not None else self.grace)
        return window if stop_at is None else min(window, stop_at)

    def _signal(self, signum: signal.Signals) -> None:
        if self.leader is not None:
            try:
                os.killpg(self.leader.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def _kill_group(self) -> None:
        self._signal(signal.SIGKILL)

    def _record_exit(self, code: int) -> None:
        record = {"exit_code": code, "finished_at": stamp.now_stamp(), "run": self.run_number}
        folder.write_json_atomic(self.path / folder.EXIT_FILE, record)
        if self.kind == sequence.APP:
            spec = folder.read_json(self.instance / folder.SPEC_FILE)
            containers = sequence.entries(self.instance, spec)
            if sequence.sidecars_may_stop(containers, str((spec or {}).get("restart_policy") or "Always")):
                sequence.stop_sidecars(containers, grace=self.grace)


def main(argv: list[str]) -> int:
    """Take the launch lock (or use the one a restart holds, passed as fd `argv[2]`), finish
    a committed rotation, detach (double fork), record the supervisor's identity, then
    supervise. Exits 0 without running anything when another supervisor has the instance
    or the current run's workload already started."""
    path = Path(argv[1])
    # Inherited by the fork, so the supervisor holds the lock for life.
    lock = os.fdopen(int(argv[2]), "ab") if len(argv) > 2 else folder.take_launch_lock(path)
    if lock is None:
        return 0
    runs.finish_rotation(path)
    if any((path / name).exists() for name in (folder.RUN_FILE, folder.SPAWN_FILE, folder.EXIT_FILE)):
        return 0  # an earlier supervisor started this run's workload: never run it twice
    run = runs.current(path)
    child = os.fork()
    if child:
        identity = pids.identify(child) or pids.ProcessIdentity(child, 0)
        folder.write_json_atomic(path / folder.LAUNCH_FILE, {"supervisor": identity.as_json(), "run": run})
        os._exit(0)
    os.setsid()
    spec = folder.read_json(path / folder.SPEC_FILE)
    env = folder.read_json(path / folder.ENV_FILE)
    if not isinstance(spec, dict) or not isinstance(env, dict):
        print(f"nebula supervisor: no instance records in {path}", file=sys.stderr)
        return 1
    supervisor = Supervisor(path, spec, env, run=run)
    signal.signal(signal.SIGTERM, supervisor.on_sigterm)
    supervisor.run()
    lock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
