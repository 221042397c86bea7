"""The kubectl binaries the tests drive (1.37 in the virtualenv: websocket exec, kustomize;
the image's /usr/bin/kubectl, 1.32; 1.20 in .tools: SPDY only) and the kubelet `Rig` that
runs them against a real Listeners.

Paths and a subprocess runner only; a test that needs a binary skips on its own if absent.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from devcluster import DevCluster
from vnode.kubelet.server import Listeners
from vnode.runner import Runner

ROOT = Path(__file__).resolve().parents[3]
KUBECTL_137 = str(ROOT / ".venv" / "bin" / "kubectl")
KUBECTL_IMAGE = "/usr/bin/kubectl"
KUBECTL_120 = str(ROOT / ".tools" / "kubectl-1.20" / "usr" / "bin" / "kubectl")


@dataclass
class Rig:
    """The kubelet's end-to-end setup: kubectl -> devcluster proxy -> Listeners -> local
    provider, with one Pod `pod` running (built by tests/vnode/kubelet/conftest.py::rig)."""

    cluster: DevCluster
    server: Listeners
    runner: Runner
    kubeconfig: str
    pod: str

    def kubectl(
        self, binary: str, *args: str, input: bytes | None = None, timeout: float = 60, websockets: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        env = dict(os.environ, KUBECONFIG=self.kubeconfig, HOME=str(Path(self.kubeconfig).parent))
        if not websockets:
            env["KUBECTL_REMOTE_COMMAND_WEBSOCKETS"] = "false"
        return subprocess.run(
            [binary, "--kubeconfig", self.kubeconfig, *args], input=input, capture_output=True, timeout=timeout, env=env
        )


def run_kubectl(kubeconfig: str, *args: str, binary: str = KUBECTL_137) -> subprocess.CompletedProcess[str]:
    """`binary --kubeconfig <kubeconfig> args...` with text output, a 60 s bound and a bare
    environment (HOME beside the kubeconfig, so kubectl's cache stays in the test's folder)."""
    home = str(Path(kubeconfig).parent)
    return subprocess.run(
        [binary, "--kubeconfig", kubeconfig, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"HOME": home, "PATH": "/usr/bin:/bin"},
    )
