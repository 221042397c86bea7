"""The on-disk layout of one local instance: `<state_dir>/local/<owner key>/<claim>/`.

Owned by the provider (creates, marks, rotates, removes) and the supervisor (writes run,
exit and the log). Every record is written atomically (temp file + rename) so a reader
never sees half a record. The env file holds secret values: mode 0600, never logged.
An instance id names its owner and its claim, so it leads back to exactly one folder.
Tests: tests/providers/local/test_local.py.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import struct
import uuid
from pathlib import Path
from typing import Any, BinaryIO

INSTANCE_ID_PREFIX = "local-"
_CLAIM = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_ID_PARTS = 3  # `<cluster>.<alias>.<claim>`: three DNS labels, so no part holds a dot

SPEC_FILE = "instance.json"  # claim, argv, cwd, grace period, created_at (written by provision)
ENV_FILE = "env.json"  # the workload's env, mode 0600 (exec reuses it after a restart)
RUNS_FILE = "runs.json"  # how many times the workload was started (written by restart; absent: 1)
LAUNCH_FILE = "launch.json"  # the supervisor's identity (written by the launcher)
LAUNCH_LOCK_FILE = "supervisor.lock"  # flock held by the one supervisor for its whole life
LAUNCH_ERROR_FILE = "launch-error.json"  # why resuming an interrupted launch failed (written by the provider)
RUN_FILE = "run.json"  # the workload's identity and started_at (written by the supervisor)
EXIT_FILE = "exit.json"  # exit code and finished_at (written by the supervisor)
TERMINATE_FILE = "terminate.json"  # terminate was asked, and when
LOG_FILE = "output.log"  # the workload's stdout and stderr, byte for byte as they came
LOG_INDEX_FILE = "output.idx"  # per received chunk, written before it: INDEX_ENTRY
INDEX_ENTRY = struct.Struct("<QQ")  # the chunk's offset in LOG_FILE, its arrival (ns since the epoch)
SUPERVISOR_LOG_FILE = "supervisor.log"  # the supervisor's own stderr
STDIN_FIFO = "stdin.fifo"  # the workload's stdin, only when the Pod asked for one (kubectl attach -i)
PREVIOUS_DIR = "previous"  # the LOG_FILE and LOG_INDEX_FILE of the run before the current one
SPAWN_FILE = "spawn.json"  # the workload is being spawned: started_at (the supervisor, just before it spawns)
STOP_FILE = "stop.json"  # stop this container's current run (stop_container, or sidecars after the app containers)
CONTAINERS_DIR = "containers"  # one folder per container other than the first app container
VOLUMES_DIR = "volumes"  # the Pod's volumes, one folder each, materialised before any container starts
ROOT_DIR = "root"  # the instance's root: each mount path appears under it (`providers.local.volumes`)
# LAUNCH_FILE, RUN_FILE, EXIT_FILE, LAUNCH_ERROR_FILE, SPAWN_FILE and STOP_FILE carry `"run": <number>` (absent: 1);
# one of an older run than RUNS_FILE says is stale (see `providers.local.runs`).
#
# A container's records, log and lock (the names above from SPEC_FILE to STOP_FILE, less
# TERMINATE_FILE) are kept in its own folder: the first app container's is the instance folder
# itself (the layout of a single-container instance), every other's `CONTAINERS_DIR/<name>/`.
# TERMINATE_FILE is the instance's, in the instance folder only.


def is_claim(text: str) -> bool:
    """A claim is a DNS label, which also makes it a safe single path component."""
    return bool(_CLAIM.match(text))


def instance_id_for(owner_key: str, claim: str) -> str:
    """`local-<cluster>.<alias>.<claim>`: unique across owners sharing a machine."""
    return f"{INSTANCE_ID_PREFIX}{owner_key}.{claim}"


def parse_instance_id(instance_id: str) -> tuple[str, str] | None:
    """(owner key, claim) of a local instance id, or None if it is not a local instance id
    (ids of the layout before owners, `local-<claim>`, included)."""
    if not instance_id.startswith(INSTANCE_ID_PREFIX):
        return None
    parts = instance_id[len(INSTANCE_ID_PREFIX) :].split(".")
    if len(parts) != _ID_PARTS or not all(is_claim(part) for part in parts):
        return None
    cluster, alias, claim = parts
    return f"{cluster}.{alias}", claim


def claim_of(instance_id: str) -> str | None:
    """The claim inside a local instance id of any owner, or None if it is not one."""
    parsed = parse_instance_id(instance_id)
    return parsed[1] if parsed else None


def container_folder(path: Path, name: str, *, first_app: bool) -> Path:
    """The folder of container `name` of the instance in `path` (a container name is a DNS label)."""
    return path if first_app else path / CONTAINERS_DIR / name


def instance_folder(container: Path) -> Path:
    """The instance folder a container folder belongs to."""
    return container.parent.parent if container.parent.name == CONTAINERS_DIR else container


def write_json_atomic(path: Path, data: Any, *, mode: int = 0o644) -> None:
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def read_json(path: Path) -> Any:
    """The decoded record, or None if it does not exist (or was torn by a crash)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError, UnicodeDecodeError):
        return None


def remove_folder(folder: Path) -> None:
    """Delete an instance folder; rename first so no reader sees it half-deleted."""
    grave = folder.with_name(f".gone-{folder.name}-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(folder, grave)
    except FileNotFoundError:
        return
    shutil.rmtree(grave, ignore_errors=True)


def take_launch_lock(folder: Path) -> BinaryIO | None:
    """The instance's launch lock (`LAUNCH_LOCK_FILE`), or None while someone else holds it.
    A supervisor holds it for its whole life; whoever deletes the folder holds it meanwhile."""
    handle = open(folder / LAUNCH_LOCK_FILE, "ab")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def remove_unsupervised(folder: Path) -> None:
    """Delete an instance folder unless a supervisor, or a launcher about to fork one, holds
    the launch lock of one of its containers (then it stays, for a later look). The locks are
    held across the deletion, so no launcher can start a workload in a folder being deleted."""
    held: list[BinaryIO] = []
    try:
        for container in [folder, *sorted((folder / CONTAINERS_DIR).glob("*"))]:
            lock = take_launch_lock(container)
            if lock is None:
                return
            held.append(lock)
        remove_folder(folder)
    except (FileNotFoundError, NotADirectoryError):
        return  # already gone
    finally:
        for lock in held:
            lock.close()
