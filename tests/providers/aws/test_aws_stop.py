"""`AwsProvider.stop_container` end to end: an instance that boots (its user-data run verbatim
with its own sshd, tests/providers/aws/ec2_vms.py) is stopped over SSH by a detached
`docker stop -t <grace>` (`docker kill` for 0), which the fake docker delivers as Docker
does (SIGTERM to the main process, SIGKILL to the container after the grace). The call
returns once asked; the exit the kernel reported (the workload's own, 143, 137) then reads
in `get` from the console marker while EC2 still shows the machine running."""

from __future__ import annotations

import os
import pwd
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from moto import mock_aws

from providers.aws import AwsProvider
from providers.base import InstanceId, InstanceState
from tests.providers.aws.ec2_vms import VmHost, booting_vms
from tests.providers.aws.moto_ec2 import make_pod, make_provider, request_for, serve_consoles
from tests.providers.stopscenario import IGNORES, TRAPS, ask, ended
from tests.support.polling import wait_for

SEEN_SLACK = 15.0  # from the container's end to `get` showing it: the marker, a console read


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def booted(tmp_path: Path) -> Iterator[tuple[AwsProvider, VmHost]]:
    user, port = pwd.getpwuid(os.getuid()).pw_name, _free_port()
    with mock_aws(), pytest.MonkeyPatch.context() as patch:
        serve_consoles(patch)
        with booting_vms(tmp_path / "vms", region="us-east-1", ssh_port=port, ssh_user=user) as host:
            yield make_provider(ssh=True, ssh_port=port, ssh_user=user, poll_interval=0.2, connect_timeout=5), host


def started(aws: AwsProvider, host: VmHost, script: str) -> InstanceId:
    """An instance whose one container runs `script` and has printed `ready` (its trap is set)."""
    pod = make_pod(command=("sh", "-c", script))
    instance_id = aws.provision(pod, request_for(pod)).instance_id
    wait_for(lambda: (aws.get(instance_id) or pytest.fail("gone")).state is InstanceState.RUNNING, 60)
    log = lambda: host.vm(instance_id).file("/var/log/nebula/workload.log")  # noqa: E731
    wait_for(lambda: log().exists() and b" ready\n" in log().read_bytes(), 60, what="the workload ready")
    return instance_id


def test_a_workload_that_traps_sigterm_finishes_its_work_and_exits_with_its_own_143(
    booted: tuple[AwsProvider, VmHost],
) -> None:
    aws, host = booted
    instance_id = started(aws, host, TRAPS)
    asked = ask(aws, instance_id, "", 10)
    instance = ended(aws, instance_id, 10)  # before the grace's end: it was not killed
    assert time.time() - asked < 10
    assert (instance.exit_code, instance.exit_reason) == (143, "Error")
    assert b" checkpoint saved\n" in host.vm(instance_id).file("/var/log/nebula/workload.log").read_bytes()
    assert ["stop", "-t", "10", "nebula-workload"] in host.vm(instance_id).docker_calls()
    aws.stop_container(instance_id, "", grace=0)  # ended: success


def test_a_workload_that_ignores_sigterm_is_killed_with_137_at_the_end_of_its_grace(
    booted: tuple[AwsProvider, VmHost],
) -> None:
    aws, host = booted
    instance_id = started(aws, host, IGNORES)
    asked = ask(aws, instance_id, "", 1)
    instance = ended(aws, instance_id, 1 + SEEN_SLACK)
    assert instance.exit_code == 137 and time.time() - asked >= 1


def test_grace_zero_kills_at_once_even_after_a_longer_graceful_stop(booted: tuple[AwsProvider, VmHost]) -> None:
    aws, host = booted
    instance_id = started(aws, host, IGNORES)
    ask(aws, instance_id, "", 300)  # a graceful delete
    ask(aws, instance_id, "", 0)  # then a force delete: `docker kill`
    assert ended(aws, instance_id, SEEN_SLACK).exit_code == 137
    assert ["kill", "nebula-workload"] in host.vm(instance_id).docker_calls()
