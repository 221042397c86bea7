"""Create an instance folder and start its supervisors: the effects behind `provision`, and
the `Launcher` that keeps one launch in flight per container folder in this process.

Called by `LocalProvider`: `provision` creates the folder and launches every container of it;
`get` and `list` resume, in the background, a container whose launch an earlier process began
and never finished. The folder is prepared under a hidden temporary name (volumes, then one
folder per container: `folder.container_folder`) and renamed into place, so the rename is the
atomic claim (I1); the supervisor's launch lock keeps one workload across processes. Secret env
values go to 0600 files and nowhere else (I4). A failure of a resumed launch is recorded in
that container's folder, so the instance reports it.
Tests: tests/providers/local/test_local.py.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

from providers import base
from providers.errors import InvalidRequest, ProviderError, Unavailable
from providers.local import folder, runs, sequence, stamp, volumes
from providers.shape import ContainerSpec

SUPERVISOR_START_TIMEOUT = 30.0
_PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds `providers/`


def workload_argv(container: ContainerSpec) -> list[str]:
    """command + args; args alone are shell text run by `sh -c` (joined by spaces)."""
    if container.command:
        return [*container.command, *container.args]
    if container.args:
        return ["sh", "-c", " ".join(container.args)]
    raise InvalidRequest(
        f"container {container.name!r} has neither command nor args: the local provider runs the "
        "container's command on this machine and cannot use the image's entrypoint"
    )


def containers_in_order(pod: base.PodSpec) -> list[tuple[ContainerSpec, str]]:
    """Every container of the Pod with its kind (`sequence.INIT`, `SIDECAR`, `APP`), in Pod order."""
    inits = [(c, sequence.SIDECAR if c.sidecar else sequence.INIT) for c in pod.init_containers]
    return [*inits, *((c, sequence.APP) for c in pod.app_containers())]


def check_request(pod: base.PodSpec, request: base.ProvisionRequest, *, gpus: int = 0) -> None:
    """InvalidRequest for what this machine can never serve (`gpus`: the GPUs the node declares)."""
    if not folder.is_claim(request.claim):
        raise InvalidRequest(f"claim {request.claim!r} is not a DNS label")
    wanted = max(pod.gpu_count, 1 if pod.accelerator else 0)
    if wanted and not gpus:
        raise InvalidRequest("the local provider has no accelerators")
    if wanted > gpus:
        raise InvalidRequest(f"the local provider has {gpus} GPUs (option 'gpus'); the Pod asks for {wanted}")
    if request.capacity_type not in (None, base.Tier.ON_DEMAND):
        raise InvalidRequest("the local provider serves only the OnDemand tier")
    if request.region not in (None, "local"):
        raise InvalidRequest(f"the local provider has no region {request.region!r} (only 'local')")
    ordered = [container for container, _ in containers_in_order(pod)]
    names = [container.name for container in ordered]
    several = len(ordered) > 1
    for container in ordered:
        if several and not (folder.is_claim(container.name) and names.count(container.name) == 1):
            raise InvalidRequest(f"container name {container.name!r} is not a DNS label unique in the Pod")
        workload_argv(container)
    volumes.check_mounts(ordered, request.volumes)


def workload_env(env: Mapping[str, str], home: Path) -> dict[str, str]:
    """The container's env: PATH and LANG from here, HOME, the Pod's env, then NEBULA_ROOT."""
    values = {
        "PATH": os.environ.get("PATH") or os.defpath,
        "HOME": str(home),
        "LANG": os.environ.get("LANG") or "C.UTF-8",
    }
    values.update(env)
    values.update(volumes.root_env(home / folder.ROOT_DIR))
    return values


def create_instance(
    root: Path, pod: base.PodSpec, request: base.ProvisionRequest, *, grace_period: float
) -> Path | None:
    """The new instance folder, or None if one already exists for the claim."""
    final = root / request.claim
    if final.exists():
        return None
    root.mkdir(parents=True, exist_ok=True)
    temp = root / f".new-{request.claim}-{uuid.uuid4().hex[:8]}"
    temp.mkdir(mode=0o700)
    try:
        _prepare(temp, final, pod, request, grace_period=grace_period)
        os.rename(temp, final)
    except OSError as exc:
        shutil.rmtree(temp, ignore_errors=True)
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
            return None  # another caller won the claim between our check and rename
        raise
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return final


def _prepare(
    temp: Path, final: Path, pod: base.PodSpec, request: base.ProvisionRequest, *, grace_period: float
) -> None:
    """Fill the instance folder `temp` (renamed to `final` once ready): the volumes, then each
    container's folder with its record, its 0600 env and its empty log."""
    ordered = containers_in_order(pod)
    volumes.materialise(temp, [container for container, _ in ordered], request.volumes)
    listing = [{"name": container.name, "kind": kind} for container, kind in ordered]
    first_app = True
    for container, kind in ordered:
        is_first, first_app = kind == sequence.APP and first_app, first_app and kind != sequence.APP
        shown = volumes.rewritten(container, final / folder.ROOT_DIR)
        record: dict[str, object] = {
            "claim": request.claim,
            "container": container.name,
            "kind": kind,
            "argv": workload_argv(shown),
            "cwd": _working_dir(shown.working_dir, temp=temp, final=final),
            "grace_period": grace_period,
            "created_at": stamp.now_stamp(),
            "pod": f"{pod.namespace}/{pod.name}",
            "image": container.image,
            # The container's `stdin: true`: the workload then reads a FIFO that
            # `kubectl attach -i` writes to; otherwise /dev/null.
            "stdin": container.stdin,
            "mounts": volumes.mount_paths(container),  # `exec` rewrites its command as the container's
        }
        if is_first:
            record.update(containers=listing, restart_policy=pod.restart_policy)
        unit = folder.container_folder(temp, container.name, first_app=is_first)
        unit.mkdir(parents=True, exist_ok=True, mode=0o700)
        env = workload_env(request.env_for(container.name), final)
        folder.write_json_atomic(unit / folder.SPEC_FILE, record)
        folder.write_json_atomic(unit / folder.ENV_FILE, env, mode=0o600)
        (unit / folder.LOG_FILE).touch()
        (unit / folder.LOG_INDEX_FILE).touch()


def _working_dir(working_dir: str | None, *, temp: Path, final: Path) -> str:
    """`working_dir` if it is a folder (one under the instance is looked for in `temp`, where
    it is being made), else the instance folder."""
    if not working_dir:
        return str(final)
    inside = os.path.relpath(working_dir, final) if working_dir.startswith(f"{final}/") else None
    probe = temp / inside if inside is not None else Path(working_dir)
    return working_dir if probe.is_dir() else str(final)


def start_supervisor(path: Path, *, lock: BinaryIO | None = None) -> None:
    """Run the supervisor, which detaches; returns once it recorded its identity. With
    `lock` (the instance's launch lock, held by the caller), the supervisor takes over that
    very lock, so no other launcher can slip in between the caller and the supervisor."""
    env = {
        "PATH": os.environ.get("PATH") or os.defpath,
        "PYTHONPATH": str(_PROJECT_ROOT),
        "LANG": os.environ.get("LANG") or "C.UTF-8",
    }
    argv = [sys.executable, "-P", "-m", "providers.local.supervisor", str(path)]
    passed = (lock.fileno(),) if lock is not None else ()
    argv += [str(fd) for fd in passed]
    with open(path / folder.SUPERVISOR_LOG_FILE, "ab") as errors:
        launcher = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errors,
            cwd=path,
            env=env,
            start_new_session=True,
            pass_fds=passed,
        )
    try:
        code = launcher.wait(timeout=SUPERVISOR_START_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        launcher.kill()
        launcher.wait()
        raise Unavailable(f"the supervisor for {path.name} did not start in time") from exc
    if code != 0:
        raise Unavailable(f"the supervisor for {path.name} failed to start (see {folder.SUPERVISOR_LOG_FILE})")


class Launcher:
    """The container folders this provider object is launching now."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._launching: set[Path] = set()

    def begin(self, container: Path) -> bool:
        """Mark `container` as being launched by this object; False if it already is."""
        with self._lock:
            if container in self._launching:
                return False
            self._launching.add(container)
            return True

    def _end(self, container: Path) -> None:
        with self._lock:
            self._launching.discard(container)

    def launch(self, instance: Path, containers: Sequence[Path], *, every: Sequence[Path]) -> None:
        """Start the supervisors of `containers` (begun with `begin`) of the instance in
        `instance`, whose container folders are `every`; if none of those ever recorded a
        supervisor, drop the folder so a retry starts afresh. Raises what the launch raised."""
        try:
            for container in containers:
                start_supervisor(container)
        except BaseException:
            if not any((each / folder.LAUNCH_FILE).exists() for each in every):
                folder.remove_unsupervised(instance)
            raise
        finally:
            for container in containers:
                self._end(container)

    def resume(self, container: Path) -> None:
        """Launch, in the background, a container whose launch an earlier process began and
        never finished; a failure is recorded in its folder."""
        if not self.begin(container):
            return

        def resume() -> None:
            try:
                start_supervisor(container)
            except (ProviderError, OSError) as exc:
                message = str(exc) if isinstance(exc, ProviderError) else exc.strerror or type(exc).__name__
                try:
                    record = {"message": message, "run": runs.current(container)}
                    folder.write_json_atomic(container / folder.LAUNCH_ERROR_FILE, record)
                except OSError:
                    pass  # the folder went away: the instance is gone anyway
            finally:
                self._end(container)

        threading.Thread(target=resume, name=f"local-launch-{container.name}", daemon=True).start()
