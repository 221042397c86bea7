"""The AWS user-data run for real on this machine: a temporary folder stands for the
instance's `/`, a fake `docker` (tests/providers/aws/fake_docker.py) and recorders for
`systemctl`, `service`, `mount` and `shutdown` come first on PATH, and `bash` runs the script.

The boundary: no Docker engine here, so each "container" is a local process the fake starts.
Imported by tests/providers/aws and tests/providers/ssh; nothing here is a test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from providers.aws.keys import generate_key_pair
from providers.aws.userdata import Boot, render_script
from providers.base import PodSpec
from providers.shape import ContainerSpec, Mount, Volume

FAKE_DOCKER = Path(__file__).with_name("fake_docker.py")
RECORDERS = ("systemctl", "service", "mount", "shutdown")


@dataclass
class Vm:
    """The temporary "instance": its root, the fake docker's state, the recorders' log, and
    `order`, a file every container may append to (its path is each container's `ORDER`)."""

    root: Path
    docker: Path
    system_log: Path
    order: Path
    env: dict[str, str]

    def script(self, text: str) -> list[str]:
        path = self.root.parent / "user-data.sh"
        path.write_text(text)
        return ["bash", str(path)]

    def run(self, text: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(self.script(text), env=self.env, capture_output=True, timeout=120)

    def start(self, text: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.script(text), env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def docker_command(self) -> tuple[str, ...]:
        """How a login on this machine (the sshd's) runs the fake docker with this VM's state."""
        return ("env", f"FAKE_DOCKER_STATE={self.docker}", sys.executable, str(FAKE_DOCKER))

    def calls(self) -> list[list[str]]:
        return [json.loads(line) for line in (self.docker / "calls.jsonl").read_text().splitlines()]

    def file(self, path: str) -> Path:
        return Path(f"{self.root}{path}")

    def console(self) -> bytes:
        return self.file("/dev/console").read_bytes()


@contextmanager
def temporary_vm(folder: Path) -> Iterator[Vm]:
    """A Vm in `folder`; on the way out, kills any container process a failed test left running."""
    if shutil.which("bash") is None or shutil.which("ssh-keygen") is None:
        pytest.skip("the user-data needs bash and ssh-keygen")
    root, docker, tools = folder / "root", folder / "docker", folder / "bin"
    for path in (root / "dev", docker, tools):
        path.mkdir(parents=True)
    system_log = folder / "system.log"
    (tools / "docker").write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE_DOCKER} "$@"\n')
    for name in RECORDERS:
        (tools / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {system_log}\n')
    for tool in tools.iterdir():
        tool.chmod(0o755)
    env = dict(os.environ, PATH=f"{tools}:{os.environ['PATH']}", FAKE_DOCKER_STATE=str(docker))
    try:
        yield Vm(root, docker, system_log, folder / "order", env)
    finally:
        for pid_file in docker.glob("*.pid"):
            if pid_file.with_suffix(".code").exists():
                continue  # ended and reaped: the pid may be another process's by now
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def sh(script: str, *, mounts: tuple[Mount, ...] = (), sidecar: bool = False, name: str) -> ContainerSpec:
    """A container whose program is `sh -c script`."""
    return ContainerSpec(name, image=f"repo/{name}:1", command=("sh", "-c", script), mounts=mounts, sidecar=sidecar)


def pod_of(*, init: tuple[ContainerSpec, ...], apps: tuple[ContainerSpec, ...]) -> PodSpec:
    first = apps[0]
    return PodSpec(
        namespace="ml", name="server", uid="u-1", container=first.name, image=first.image, command=first.command,
        containers=apps, init_containers=init, restart_policy="Never",
    )  # fmt: skip


def render(
    vm: Vm, pod: PodSpec, volumes: tuple[Volume, ...] = (), *, env: Mapping[str, Mapping[str, str]] | None = None
) -> str:
    """The Pod's script for this Vm: each container's env is `ORDER`, `WHO` (its name) and `env[name]`."""
    boot = Boot(
        claim="ml-server-abc", ssh_user="nebula-no-such-user", authorized_keys=(generate_key_pair("a").public_line,),
        host_key=generate_key_pair().private_openssh, gpus=False, terminate_on_exit=True, shutdown_delay=0,
    )  # fmt: skip
    names = [spec.name for spec in (*pod.init_containers, *pod.app_containers())]
    envs = {name: {"ORDER": str(vm.order), "WHO": name, **(env or {}).get(name, {})} for name in names}
    first = pod.app_containers()[0].name
    return render_script(pod, envs[first], boot, container_env=envs, volumes=volumes, root=str(vm.root))


def runs_of(vm: Vm) -> list[list[str]]:
    return [argv for argv in vm.calls() if argv[0] == "run"]


def name_of(argv: list[str]) -> str:
    return argv[argv.index("--name") + 1]
