"""Restart in place: run a local instance's workload again from its start, in the same
folder, with the same command, working directory and env (the 0600 env file provision wrote).

Called by `LocalProvider.restart`. The instance's launch lock is held from the check that
the workload ended until the new supervisor owns that very lock (passed to it as an open
descriptor), so however many threads or processes restart at once, one new workload starts
and every other caller finds it running (InvalidRequest). Never signals a process.
Invariant: concurrent restarts start one workload
(tests/providers/local/test_local_restart.py::test_concurrent_restarts_from_threads_and_processes_start_one_workload).
Tests: tests/providers/local/test_local_restart.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import BinaryIO

from providers import base
from providers.errors import InvalidRequest, NotFound, Unavailable
from providers.local import folder, launch, runs, status
from providers.local.reader import FolderReader

LOCK_WAIT = 10.0  # seconds an ended run's supervisor may take to exit and free the lock
LOCK_POLL = 0.01
ENDED = frozenset({base.InstanceState.SUCCEEDED, base.InstanceState.FAILED})


def run_again(
    reader: FolderReader,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Start the next run of the instance `reader` reads; returns its number once its
    supervisor recorded itself. NotFound (gone), InvalidRequest (not ended), Unavailable
    (the lock stayed taken, or the launch failed: the committed run is then launched by the
    next observer, as an interrupted launch is). OSError for the caller to translate."""
    lock = _lock_once_ended(reader, clock=clock, sleep=sleep)
    try:
        check_ended(reader)  # again, holding the lock: a concurrent restart may have won
        run = runs.rotate(reader.path)
        launch.start_supervisor(reader.path, lock=lock)
    finally:
        lock.close()
    return run


def check_ended(reader: FolderReader) -> None:
    """NotFound if the instance is gone, InvalidRequest unless its workload ended."""
    observation = reader.observe()
    instance = status.instance_from(observation) if observation is not None else None
    if instance is None:
        raise NotFound(f"no local instance {reader.instance_id}")
    if observation is not None and observation.terminate is not None:
        raise NotFound(f"{reader.label} is being terminated")
    if instance.state not in ENDED:
        raise InvalidRequest(f"{reader.label} is {instance.state.value}: only a workload that ended is restarted")


def _lock_once_ended(reader: FolderReader, *, clock: Callable[[], float], sleep: Callable[[float], None]) -> BinaryIO:
    """The launch lock, once the ended run's supervisor (which records the exit just before
    it lets go of the lock) has let go of it."""
    deadline = clock() + LOCK_WAIT
    while True:
        check_ended(reader)
        try:
            lock = folder.take_launch_lock(reader.path)
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise NotFound(f"no local instance {reader.instance_id}") from exc
        if lock is not None:
            return lock
        if clock() >= deadline:
            raise Unavailable(f"{reader.label} is still held by the supervisor of its ended run")
        sleep(LOCK_POLL)
