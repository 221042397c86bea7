"""How Nebula reaches an AWS instance's workload: over SSH (the operator key, the claim's
host key from its tag) to `docker exec` and the stamped log file; else the serial console.
With several containers (the roster tags), each has its log file and Docker name.

Called by `AwsProvider.logs`, `exec`, `stop_container` and `usage`. Builds values only; the SSH work is
`providers.ssh`'s. Never logs a key.
Tests: tests/providers/aws/test_aws_boot.py, tests/providers/aws/test_aws_stop.py.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from providers.aws import containers, workload
from providers.aws.keys import KeyPair
from providers.aws.options import AwsOptions
from providers.aws.status import TAG_HOST_KEY, tags_of
from providers.aws.userdata import CONTAINER, EXIT_FILE, LOG_FILE
from providers.errors import NotFound
from providers.ssh import FileLog, SshTarget

WORKLOAD_LOG = FileLog(LOG_FILE, EXIT_FILE, stamped=True)


@dataclass(frozen=True)
class Reach:
    """Where one of the Pod's containers is on its instance: its log file, its Docker name,
    and the prefix its console lines carry (empty: the instance runs one container)."""

    log: FileLog
    docker_name: str
    console_prefix: bytes = b""


def reach(data: dict[str, Any], container: str, *, root: str = "") -> Reach:
    """The container `container` (empty: the first app container) of an instance; NotFound
    for a name its roster tags do not list. An instance of one container is that container.
    `root` stands for the instance's `/`, as in `userdata.render_script`."""
    entries = containers.roster_of(tags_of(data))
    if not entries:
        return Reach(FileLog(f"{root}{LOG_FILE}", f"{root}{EXIT_FILE}", stamped=True), CONTAINER)
    name = container or next((entry.name for entry in entries if entry.kind == "app"), "")
    if name not in {entry.name for entry in entries}:
        raise NotFound(f"the Pod has no container {name!r} on this instance")
    log = FileLog(f"{root}{workload.container_log(name)}", f"{root}{workload.container_exit(name)}", stamped=True)
    return Reach(log, workload.container_name(name), f"{name} ".encode())


DOCKER = ("sudo", "-n", "docker")  # as root: the login user has sudo on the AMI


def exec_argv(
    command: Sequence[str], *, tty: bool, stdin: bool, docker_name: str = CONTAINER, docker: Sequence[str] = DOCKER
) -> list[str]:
    """The command run over SSH: `docker exec` into the container named `docker_name`."""
    flags = (["-i"] if stdin else []) + (["-t"] if tty else [])
    return [*docker, "exec", *flags, docker_name, *command]


def usage_roots(data: dict[str, Any], *, docker: Sequence[str] = DOCKER) -> dict[str, str]:
    """For `providers.ssh.usage`: each container's name ("" for an instance of one) and the
    command printing the pid of its Docker container's first process."""
    entries = containers.roster_of(tags_of(data))
    names = {entry.name: workload.container_name(entry.name) for entry in entries} or {"": CONTAINER}
    inspect = [*docker, "inspect", "-f", "{{.State.Pid}}"]
    return {name: shlex.join([*inspect, docker_name]) for name, docker_name in names.items()}


def ssh_target(data: dict[str, Any], endpoint: str, options: AwsOptions, key: KeyPair) -> SshTarget:
    """Where to log in; the host key comes from the instance's tag (None: not verified)."""
    host_key = tags_of(data).get(TAG_HOST_KEY) or None
    return SshTarget(
        host=endpoint,
        port=options.ssh_port,
        username=options.ssh_user,
        private_key=key.private_openssh,
        host_key=host_key,
        connect_timeout=options.connect_timeout,
    )


def stop_command(docker_name: str, *, grace: float, docker: Sequence[str] = DOCKER) -> str:
    """The command run over SSH to stop one container as a kubelet kills it, which returns
    at once: a detached `docker stop -t <grace>` (SIGTERM to the container's main process,
    SIGKILL to all of it `grace` seconds later; whole seconds, rounded up), or `docker kill`
    (SIGKILL now) for a grace of 0. Docker's daemon keeps the timer; a second stop with a
    shorter grace kills sooner, a longer one never delays the first one's SIGKILL."""
    wait = max(0, math.ceil(grace))
    verb = ["stop", "-t", str(wait)] if wait else ["kill"]
    return f"nohup {shlex.join([*docker, *verb, docker_name])} > /dev/null 2>&1 < /dev/null & exit 0"
