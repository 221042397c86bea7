"""End to end over SSH, as a user runs it: kubectl -> the embedded API server -> a Runner on the
AWS provider (EC2 on moto) -> instances that boot (tests/providers/aws/ec2_vms.py): each runs
the user-data it was sent, verbatim, in a mount namespace of its own with its own sshd on its
own address, and the provider reaches it as it reaches a real VM: SSH with the operator key,
the claim's host key checked, `sudo -n docker logs/exec/stop`. The one stand-in on the VM is
`docker` (no Docker engine here: each container is a local process).

The model-server Pod of issue 14 (tests/support/rigs/modelserver.py): each step is checked as kubectl
shows it, under the AWS rule that a restart of any container is a new instance
(docs/providers/aws.md, "Capabilities"): nothing is reported that did not happen (I9)."""

from __future__ import annotations

import os
import pwd
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from moto import mock_aws

from kube import names
from kube.client import path_for
from tests.providers.aws.ec2_vms import VmHost, booting_vms
from tests.providers.aws.moto_ec2 import make_provider, moto_instance, serve_consoles
from tests.support.pods import get_pod
from tests.support.polling import wait_for
from tests.support.rigs.modelserver import Shaped, model_server_pod, shaped_cluster
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.server import Listeners

POD = "model-server-ssh"
STEP = 60.0  # each step may boot an instance: a new VM, its sshd, its containers


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def download_once(store: Path) -> str:
    """The init container's script. The model comes from outside the instance (its store
    stands for the download's source), so its first fetch fails in the first instance and
    the next instance's succeeds; the emptyDir is new in every instance."""
    attempted = store / "attempted"
    return (
        f"if [ ! -f {attempted} ]; then touch {attempted}; echo download failed; exit 1; fi; "
        "echo downloaded; echo weights-v1 > /data/model"
    )


@pytest.fixture(scope="module")
def over_ssh(
    tmp_path_factory: pytest.TempPathFactory, registry: HandlerRegistry, server: Listeners
) -> Iterator[tuple[Shaped, VmHost, Path]]:
    folder = tmp_path_factory.mktemp("ssh-shaped")
    store = folder / "store"
    store.mkdir()
    user, port = pwd.getpwuid(os.getuid()).pw_name, _free_port()
    kubeconfig = str(folder / "kubeconfig")
    with mock_aws(), pytest.MonkeyPatch.context() as patch:
        serve_consoles(patch)
        with booting_vms(folder / "vms", region="us-east-1", ssh_port=port, ssh_user=user) as host:
            provider = make_provider(ssh=True, ssh_port=port, ssh_user=user, poll_interval=0.2, connect_timeout=5)
            with shaped_cluster(provider, kubeconfig, registry=registry, server=server, pod=POD) as shaped:
                yield shaped, host, store


def test_the_model_server_pod_over_ssh_on_ec2_reports_each_step(over_ssh: tuple[Shaped, VmHost, Path]) -> None:
    shaped, host, store = over_ssh
    kube = shaped.kube
    pod = dict(model_server_pod("aws", download=download_once(store)),
               metadata={"name": POD, "labels": {names.ACCELERATOR_LABEL: "h100"}})  # fmt: skip
    pod["spec"]["containers"][1]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}  # the second container's
    kube.create(path_for("pods", namespace="default"), pod)

    def instance() -> str:
        return str(((get_pod(kube, POD) or {}).get("metadata") or {}).get("annotations", {}).get(
            names.INSTANCE_ID_ANNOTATION, ""))  # fmt: skip

    # The ConfigMap does not exist: no instance is launched, and the Pod says why.
    missing = 'MountVolume.SetUp failed for volume "config" : configmap "greeting" not found'
    wait_for(lambda: missing in shaped.events(names.EVENT_FAILED_MOUNT), what="the FailedMount Event")
    assert host.vms == {} and shaped.status()["phase"] == "Pending"
    wait_for(lambda: shaped.row()[1:3] == ["0/2", "Init:0/1"], what="kubectl to show Init:0/1")

    # Created later: the first instance runs the init container, which fails; its restart is
    # the next instance, where it succeeds, and only then do the app containers start.
    kube.create(path_for("configmaps", namespace="default"),
                {"metadata": {"name": "greeting"}, "data": {"greeting": "hello from the config"}})  # fmt: skip
    wait_for(lambda: shaped.container("download").get("restartCount") == 1, STEP, what="the init container restarted")
    wait_for(lambda: "terminated" in (shaped.container("download").get("state") or {}), STEP, what="the init done")
    assert shaped.container("download")["state"]["terminated"]["exitCode"] == 0
    assert shaped.container("download")["lastState"]["terminated"]["exitCode"] == 1
    first, second = host.booted()[:2]
    wait_for(lambda: first.halted, what="the first instance halted (terminated)")
    # The Pod's effective request (8 GPUs, all asked by its second container) chose the type.
    assert {moto_instance(f"us-east-1/{vm.ec2_id}").instance_type for vm in (first, second)} == {"p5.48xlarge"}
    assert all("--gpus" in argv for argv in second.docker_calls() if argv[0] == "run")
    assert b"download failed" in first.file("/var/log/nebula/download.log").read_bytes()
    assert not first.file("/var/log/nebula/server.log").exists()  # nothing ran after the failed init container
    assert shaped.kubectl("logs", POD, "-c", "download").stdout == "downloaded\n"  # read over SSH
    previous = shaped.kubectl("logs", POD, "-c", "download", "--previous")
    assert previous.returncode != 0 and "the previous run was a different VM" in previous.stderr

    # Then both app containers run; Ready waits for the server's readiness probe (exec over SSH).
    wait_for(lambda: "running" in (shaped.container("metrics").get("state") or {}), STEP, what="metrics running")
    wait_for(lambda: "running" in (shaped.container("server").get("state") or {}), STEP, what="server running")
    assert host.vm(instance()) is second
    assert shaped.condition("Initialized") == "True" and shaped.status()["phase"] == "Running"
    assert shaped.condition("Ready") == "False" and shaped.container("server")["ready"] is False
    wait_for(lambda: shaped.row()[1:3] == ["1/2", "Running"], what="kubectl to show 1/2 Running")
    shaped.serves_each_container()  # logs -c and exec -c over SSH, each into its Docker container

    # A failing liveness probe stops its container (docker stop over SSH), and its restart is
    # a new instance: every container runs again there, and Ready waits for the probe again.
    shaped.fails_liveness()
    wait_for(lambda: shaped.container("metrics").get("restartCount", 0) >= 1, STEP, what="metrics restarted")
    assert shaped.container("metrics")["lastState"]["terminated"]["exitCode"] == 143  # SIGTERM from docker stop
    wait_for(lambda: host.vm(instance()) not in (first, second), STEP, what="the replacement instance")
    wait_for(lambda: second.halted, what="the second instance halted (terminated)")
    wait_for(lambda: "running" in (shaped.container("metrics").get("state") or {}), STEP, what="metrics running again")
    wait_for(lambda: "running" in (shaped.container("server").get("state") or {}), STEP, what="server running again")
    assert shaped.condition("Ready") == "False"  # a new emptyDir: /data/ready is not there
    assert shaped.kubectl("exec", POD, "-c", "server", "--", "touch", "/data/ready").returncode == 0
    wait_for(lambda: shaped.condition("Ready") == "True", what="Ready again")
    assert shaped.row()[1:3] == ["2/2", "Running"]

    # The new instance ran every container again, and each says so: the init container from
    # its completion, the server killed by the replacement (137), metrics from its own end.
    download, server = shaped.container("download"), shaped.container("server")
    assert (download["restartCount"], download["lastState"]["terminated"]["reason"]) == (2, "Completed")
    assert server["restartCount"] == 1 and server["lastState"]["terminated"]["exitCode"] == 137
    assert server["lastState"]["terminated"]["message"] == "killed: the instance was replaced"
    assert shaped.row()[3] == "2"  # RESTARTS, as printPod sums the app containers'
