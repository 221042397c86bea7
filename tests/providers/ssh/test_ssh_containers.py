"""`logs -c` and `exec -c` of a several-container AWS Pod over SSH, to a real sshd on loopback.

The "VM" is this machine: the AWS user-data runs under bash in a temporary folder standing
for `/` (tests/providers/aws/vm_script.py), with a fake `docker` whose containers are local
processes (there is no Docker engine here). The per-container log files the script writes
are read over SSH with the provider's own choice of file (`remote.reach`, from the roster
tags a launch carries), and `docker exec` goes, over SSH, into the container it names.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from providers import errors
from providers.aws import containers, remote
from providers.base import LogOptions
from providers.ssh import open_log_stream, start_process
from tests.providers.aws.vm_script import Vm, pod_of, sh, temporary_vm
from tests.support.polling import read_to_end, wait_for
from tests.support.rigs.vnode import user_data_running
from tests.support.servers.sshd import Sshd

NOT_ENDED = containers.ContainerEvent("side")
WAIT_FOR_STOP = 'until [ -e "$ORDER.stop" ]; do sleep 0.05; done'
POD = pod_of(
    init=(sh("echo fetched", name="fetch"),),
    apps=(
        sh(f"echo main line 1; echo main line 2; {WAIT_FOR_STOP}; echo main done", name="main"),
        sh(f"echo side ready; {WAIT_FOR_STOP}; echo side done; exit 4", name="side"),
    ),
)


@dataclass
class Running:
    vm: Vm
    sshd: Sshd
    data: dict[str, Any]  # the instance as DescribeInstances shows it: its roster tags

    def log_of(self, container: str, options: LogOptions) -> bytes:
        where = remote.reach(self.data, container, root=str(self.vm.root))
        return read_to_end(open_log_stream(self.sshd.target(), where.log, options), 30)

    def exec(self, container: str, *command: str) -> tuple[int | None, bytes]:
        where = remote.reach(self.data, container, root=str(self.vm.root))
        argv = remote.exec_argv(command, tty=False, stdin=False, docker_name=where.docker_name,
                                docker=self.vm.docker_command())  # fmt: skip
        process = start_process(self.sshd.target(), argv, tty=False, stdin=False)
        try:
            output = read_to_end(process, 30, read=process.read_stdout)
            return process.wait(30), output
        finally:
            process.close()


@pytest.fixture
def running(sshd: Sshd, tmp_path: Path) -> Iterator[Running]:
    with temporary_vm(tmp_path) as vm, user_data_running(vm, POD):
        tags = containers.roster_tags(containers.roster(POD))
        wait_for(lambda: b"side ready" in _read(vm.file("/var/log/nebula/side.log")), 60)
        wait_for(lambda: b"main line 2" in _read(vm.file("/var/log/nebula/main.log")), 60)
        yield Running(vm, sshd, {"Tags": [{"Key": key, "Value": value} for key, value in tags.items()]})


def _read(path: Path) -> bytes:
    return path.read_bytes() if path.exists() else b""


def test_logs_c_reads_that_containers_own_log_over_ssh_and_the_first_app_container_by_default(
    running: Running,
) -> None:
    assert running.log_of("main", LogOptions()) == b"main line 1\nmain line 2\n"
    assert running.log_of("side", LogOptions()) == b"side ready\n"
    assert running.log_of("fetch", LogOptions()) == b"fetched\n"  # an init container's log stays
    assert running.log_of("", LogOptions(tail_lines=1)) == b"main line 2\n"
    stamped = running.log_of("side", LogOptions(timestamps=True))
    assert stamped.endswith(b"Z side ready\n") and stamped[10:11] == b"T"
    with pytest.raises(errors.NotFound):
        remote.reach(running.data, "nope")


def test_logs_c_follow_ends_when_that_container_exits(running: Running) -> None:
    where = remote.reach(running.data, "side", root=str(running.vm.root))
    stream = open_log_stream(running.sshd.target(), where.log, LogOptions(follow=True))
    try:
        first = bytearray()
        while len(first) < len(b"side ready\n"):
            first += stream.read()
        assert bytes(first) == b"side ready\n"
        Path(f"{running.vm.order}.stop").touch()
        rest = read_to_end(stream, 30)
    finally:
        stream.close()
    assert rest == b"side done\n"
    assert running.vm.file("/var/log/nebula/side.exit").read_text().strip() == "4"


def test_exec_c_runs_in_the_container_it_names_and_not_in_one_that_ended(running: Running) -> None:
    assert running.exec("side", "sh", "-c", 'echo "in $WHO"') == (0, b"in side\n")
    assert running.exec("main", "sh", "-c", 'echo "in $WHO"; exit 7') == (7, b"in main\n")
    code, _ = running.exec("fetch", "true")  # the init container has exited
    assert code == 1


def test_stopping_one_container_ends_it_with_sigterms_code_and_leaves_the_others_running(running: Running) -> None:
    where = remote.reach(running.data, "side", root=str(running.vm.root))
    command = remote.stop_command(where.docker_name, grace=5, docker=running.vm.docker_command())
    process = start_process(running.sshd.target(), command, tty=False, stdin=False)
    try:
        assert process.wait(60) == 0  # at once: the docker stop runs detached on the VM
    finally:
        process.close()
    # The script records the container's exit once docker stop has ended it.
    side = wait_for(lambda: containers.events_in(running.vm.console()).get("side", NOT_ENDED).exit_code, 30)
    assert side == 143
    assert running.vm.file("/var/log/nebula/side.exit").read_text().strip() == "143"  # written before the marker
    assert running.exec("main", "sh", "-c", 'echo "in $WHO"') == (0, b"in main\n")
