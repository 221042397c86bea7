"""`AwsProvider.usage`'s remote half for a several-container Pod: the roots `remote.usage_roots`
names (each container's `docker inspect` pid) read over SSH from a real sshd on loopback.

The "VM" is this machine, as in tests/providers/ssh/test_ssh_containers.py: the AWS user-data
runs under bash in a temporary root with the fake `docker`, whose containers are local processes.
"""

from __future__ import annotations

from pathlib import Path

from providers.aws import containers, remote
from providers.aws.userdata import CONTAINER
from providers.ssh.usage import read_usage
from tests.providers.aws.vm_script import pod_of, sh, temporary_vm
from tests.support.polling import wait_for
from tests.support.rigs.vnode import user_data_running
from tests.support.servers.sshd import Sshd

WAIT_FOR_STOP = 'until [ -e "$ORDER.stop" ]; do sleep 0.05; done'
BURN = 'i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo burned >> "$ORDER"; '
POD = pod_of(init=(), apps=(sh(BURN + WAIT_FOR_STOP, name="main"), sh(WAIT_FOR_STOP, name="side")))


def test_each_container_of_a_vm_is_measured_by_its_docker_pid_over_ssh(sshd: Sshd, tmp_path: Path) -> None:
    with temporary_vm(tmp_path) as vm:
        data = {"Tags": [{"Key": k, "Value": v} for k, v in containers.roster_tags(containers.roster(POD)).items()]}
        roots = remote.usage_roots(data, docker=vm.docker_command())
        with user_data_running(vm, POD):
            wait_for(lambda: b"burned" in (vm.order.read_bytes() if vm.order.exists() else b""), 60)
            readings = wait_for(lambda: (r := read_usage(sshd.target(), roots)) and len(r) == 2 and r, 30)
            assert readings["main"].cpu_core_nanoseconds > 0  # the loop's CPU
            assert readings["main"].working_set_bytes > 0 and readings["side"].working_set_bytes > 0
        assert read_usage(sshd.target(), roots) == {}  # ended: docker inspect says 0


def test_an_instance_of_one_container_is_measured_by_the_workload_containers_pid() -> None:
    roots = remote.usage_roots({"Tags": []}, docker=("docker",))
    assert roots == {"": "docker inspect -f '{{.State.Pid}}' " + CONTAINER}
