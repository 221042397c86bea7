"""`kubectl top pod` and `kubectl top node` end to end: real kubectl (1.20, the image's, 1.37)
-> the devcluster's metrics.k8s.io (which scrapes /metrics/resource) -> the kubelet listener ->
the local provider's /proc samples of a busy Pod (a CPU loop holding 48 MiB)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from devcluster import DevCluster
from providers.local import LocalProvider
from tests.support.clients.kubectl import KUBECTL_120, KUBECTL_137, KUBECTL_IMAGE, Rig
from tests.support.factories import make_pod
from tests.support.polling import wait_for
from tests.support.rigs.vnode import runner_with_pod
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.server import Listeners

# Busy 1/3 of the time (a few hundred millicores, not a whole core of the shared machine).
BUSY = (
    "import time\n"
    "held = b'x' * (48 << 20)\n"
    "while True:\n"
    "    end = time.monotonic() + 0.05\n"
    "    while time.monotonic() < end: pass\n"
    "    time.sleep(0.1)\n"
)


@pytest.fixture(scope="module")
def top_rig(tmp_path_factory: pytest.TempPathFactory, registry: HandlerRegistry, server: Listeners) -> Iterator[Rig]:
    folder = tmp_path_factory.mktemp("top")
    kubeconfig = str(folder / "kubeconfig")
    provider = LocalProvider("local", {"state_dir": str(folder / "state"), "grace_period": 1, "usage_interval": 0.5})
    with DevCluster(kubeconfig_path=kubeconfig, scheduler_interval=0.05, metrics_interval=1.0) as cluster:
        pod = make_pod("busy", "local", command=(sys.executable, "-c", BUSY), labels={"app": "busy"})
        with runner_with_pod(cluster, provider, registry, server.kubelet_port, pod) as (runner, _):
            yield Rig(cluster, server, runner, kubeconfig, "busy")


def _numbers(rig: Rig, binary: str, *args: str) -> tuple[int, int] | None:
    """CPU millicores and memory MiB of the one row `kubectl top ...` prints; None until shown."""
    done = rig.kubectl(binary, "top", *args)
    lines = done.stdout.decode().splitlines()
    if done.returncode != 0 or len(lines) != 2:
        return None
    columns = lines[1].split()
    cpu, memory = columns[1], columns[2] if args[0] == "pod" else columns[3]
    if not cpu.endswith("m") or not memory.endswith("Mi"):
        return None
    return int(cpu[:-1]), int(memory[:-2])


@pytest.mark.parametrize("binary", [KUBECTL_120, KUBECTL_IMAGE, KUBECTL_137], ids=["1.20", "image", "1.37"])
def test_kubectl_top_pod_and_node_show_a_busy_local_pods_usage(top_rig: Rig, binary: str) -> None:
    if not os.path.exists(binary):
        pytest.skip(f"{binary} is not installed")
    pod = wait_for(lambda: _numbers(top_rig, binary, "pod", "busy"), 60, 0.5, what="kubectl top pod numbers")
    assert pod[0] > 0 and pod[1] >= 40  # the loop spends CPU; 48 MiB are held
    node = wait_for(lambda: _numbers(top_rig, binary, "node", "nebula-local"), 60, 0.5, what="top node numbers")
    assert node[0] > 0 and node[1] >= 40
    listed = top_rig.kubectl(binary, "top", "pod", "-l", "app=busy", "-A")
    assert listed.returncode == 0 and b"busy" in listed.stdout, listed.stderr
