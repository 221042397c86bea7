"""Create an instance folder and start its supervisor: the effects behind `provision`.

Called by `LocalProvider.provision` only. The folder is prepared under a hidden temporary
name and renamed into place, so the rename is the atomic claim (I1). Secret env values
go to a 0600 file and nowhere else (I4).
Tests: tests/providers/local/test_local.py.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import BinaryIO

from providers.base import PodSpec, ProvisionRequest, Tier
from providers.errors import InvalidRequest, Unavailable
from providers.local import folder, stamp

SUPERVISOR_START_TIMEOUT = 30.0
_PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds `providers/`


def workload_argv(pod: PodSpec) -> list[str]:
    """command + args; args alone are shell text run by `sh -c` (joined by spaces)."""
    if pod.command:
        return [*pod.command, *pod.args]
    if pod.args:
        return ["sh", "-c", " ".join(pod.args)]
    raise InvalidRequest(
        f"container {pod.container!r} has neither command nor args: the local provider runs the "
        "container's command on this machine and cannot use the image's entrypoint"
    )


def check_request(pod: PodSpec, request: ProvisionRequest) -> None:
    """InvalidRequest for what this machine can never serve."""
    if not folder.is_claim(request.claim):
        raise InvalidRequest(f"claim {request.claim!r} is not a DNS label")
    if pod.gpu_count or pod.accelerator:
        raise InvalidRequest("the local provider has no accelerators")
    if request.capacity_type not in (None, Tier.ON_DEMAND):
        raise InvalidRequest("the local provider serves only the OnDemand tier")
    if request.region not in (None, "local"):
        raise InvalidRequest(f"the local provider has no region {request.region!r} (only 'local')")


def workload_env(request: ProvisionRequest, home: Path) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH") or os.defpath,
        "HOME": str(home),
        "LANG": os.environ.get("LANG") or "C.UTF-8",
    }
    env.update(request.env)
    return env


def create_instance(root: Path, pod: PodSpec, request: ProvisionRequest, *, grace_period: float) -> Path | None:
    """The new instance folder, or None if one already exists for the claim."""
    final = root / request.claim
    if final.exists():
        return None
    root.mkdir(parents=True, exist_ok=True)
    temp = root / f".new-{request.claim}-{uuid.uuid4().hex[:8]}"
    temp.mkdir(mode=0o700)
    try:
        cwd = pod.working_dir if pod.working_dir and os.path.isdir(pod.working_dir) else str(final)
        spec = {
            "claim": request.claim,
            "argv": workload_argv(pod),
            "cwd": cwd,
            "grace_period": grace_period,
            "created_at": stamp.now_stamp(),
            "pod": f"{pod.namespace}/{pod.name}",
            "image": pod.image,
            # The container's `stdin: true`: the workload then reads a FIFO that
            # `kubectl attach -i` writes to; otherwise /dev/null.
            "stdin": pod.stdin,
        }
        folder.write_json_atomic(temp / folder.SPEC_FILE, spec)
        folder.write_json_atomic(temp / folder.ENV_FILE, workload_env(request, final), mode=0o600)
        (temp / folder.LOG_FILE).touch()
        (temp / folder.LOG_INDEX_FILE).touch()
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
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors,
            cwd=path, env=env, start_new_session=True, pass_fds=passed,
        )  # fmt: skip
    try:
        code = launcher.wait(timeout=SUPERVISOR_START_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        launcher.kill()
        launcher.wait()
        raise Unavailable(f"the supervisor for {path.name} did not start in time") from exc
    if code != 0:
        raise Unavailable(f"the supervisor for {path.name} failed to start (see {folder.SUPERVISOR_LOG_FILE})")
