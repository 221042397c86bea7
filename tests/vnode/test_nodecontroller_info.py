"""The node's `status.nodeInfo`, filled as a kubelet fills it (vnode.nodecontroller.node_info):
Nebula's version as the kubelet version and the container runtime, the machine's architecture by
GOARCH's names, its kernel, OS image and ids; `kubectl get nodes -o wide` shows them."""

from __future__ import annotations

import platform
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path

from devcluster import DevCluster
from kube.client import Kube, path_for
from providers.fake import FakeProvider
from tests.support.clients.kubectl import KUBECTL_137
from tests.support.polling import wait_for
from vnode import nodecontroller
from vnode.runner import Runner

ROOT = Path(__file__).resolve().parents[2]


def test_node_info_names_nebula_and_the_machine() -> None:
    info = nodecontroller.node_info()
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert info["kubeletVersion"] == f"v{version}-nebula"
    assert info["containerRuntimeVersion"] == f"nebula://{version}"
    assert info["operatingSystem"] == "linux" and info["kernelVersion"] == platform.release()
    assert info["architecture"] == {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), info["architecture"])
    boot_id = Path("/proc/sys/kernel/random/boot_id")
    assert info["bootID"] == (boot_id.read_text().strip() if boot_id.exists() else "")
    machine_id = Path("/etc/machine-id")
    if machine_id.exists():
        assert info["machineID"] == machine_id.read_text().strip()


def test_kubectl_get_nodes_wide_shows_the_node_info(
    cluster: DevCluster, kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    start_runner(FakeProvider("gpu", {"cloud": cloud_name}))
    node = wait_for(lambda: kube.list(path_for("nodes"), fieldSelector="metadata.name=nebula-gpu")[0])
    assert node[0]["status"]["nodeInfo"] == nodecontroller.node_info()
    assert cluster.kubeconfig_path is not None
    command = [KUBECTL_137, "--kubeconfig", cluster.kubeconfig_path, "get", "node", "nebula-gpu", "-o", "wide"]
    shown = subprocess.run([*command, "--no-headers"], capture_output=True, text=True, timeout=60, check=True).stdout
    info = nodecontroller.node_info()
    for value in (info["kubeletVersion"], info["kernelVersion"], info["containerRuntimeVersion"], "127.0.0.1"):
        assert value in shown, (value, shown)
    assert (info["osImage"] or "<unknown>") in shown
