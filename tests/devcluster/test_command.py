"""`manage.py devcluster` in its own process: kubectl sessions against it, SIGTERM exits 0,
a malformed --addr is a clear CommandError."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
KUBECTLS = {"1.37": ROOT / ".venv" / "bin" / "kubectl", "1.32": Path("/usr/bin/kubectl")}

POD = """apiVersion: v1
kind: Pod
metadata:
  name: p1
spec:
  nodeSelector: {disk: none}
  containers: [{name: main, image: nginx}]
"""

CRD = """apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: nodepools.nebula.inftyai.com}
spec:
  group: nebula.inftyai.com
  scope: Cluster
  names: {plural: nodepools, singular: nodepool, kind: NodePool, shortNames: [np]}
  versions: [{name: v1alpha1, served: true, storage: true}]
"""


@pytest.fixture
def command(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path, list[str]]]:
    kubeconfig = tmp_path / "kubeconfig"
    crd = tmp_path / "crd.yaml"
    crd.write_text(CRD)
    argv = [sys.executable, str(ROOT / "manage.py"), "devcluster", "--addr", "127.0.0.1:0"]
    argv += ["--kubeconfig", str(kubeconfig), "--crd", str(crd)]
    process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if line.startswith("try:"):
                break
        assert kubeconfig.exists(), "".join(lines) + (process.stderr.read() if process.stderr else "")
        yield process, kubeconfig, lines
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()


def _kubectl(binary: Path, kubeconfig: Path, home: Path, *args: str) -> str:
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    done = subprocess.run(
        [str(binary), "--kubeconfig", str(kubeconfig), *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def test_kubectl_sessions_against_the_command_then_sigterm_exits_0(
    command: tuple[subprocess.Popen[str], Path, list[str]], tmp_path: Path
) -> None:
    process, kubeconfig, lines = command
    assert lines[0].startswith("devcluster serving at https://127.0.0.1:")
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(POD)
    for version, binary in KUBECTLS.items():
        home = tmp_path / f"home-{version}"
        home.mkdir()

        def run(*args: str, binary: Path = binary, home: Path = home) -> str:
            return _kubectl(binary, kubeconfig, home, *args)

        assert "pod/p1 created" in run("create", "-f", str(manifest))
        assert "p1" in run("get", "pods")
        assert run("get", "np") == ""
        assert "pod/p1 labeled" in run("label", "pod", "p1", "a=b")
        assert "pod/p1 annotated" in run("annotate", "pod", "p1", "n=v")
        assert "a=b" in run("describe", "pod", "p1")
        assert "deleted" in run("delete", "pod", "p1")
    process.send_signal(signal.SIGTERM)
    wait_for(lambda: process.poll() is not None, timeout=30, what="the command to exit")
    assert process.returncode == 0


def test_a_malformed_addr_is_a_clear_error(tmp_path: Path) -> None:
    argv = [
        sys.executable,
        str(ROOT / "manage.py"),
        "devcluster",
        "--addr",
        "localhost",
        "--kubeconfig",
        str(tmp_path / "k"),
    ]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "--addr must be HOST:PORT" in done.stderr


def test_the_kubeconfig_is_written_only_after_the_crds_load(tmp_path: Path) -> None:
    """A client that waits for the kubeconfig (bench/sync.py --gated, the install rig) must find
    the CRDs served: so a --crd that cannot load leaves no kubeconfig behind at all."""
    kubeconfig = tmp_path / "kubeconfig"
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: x}\n")
    argv = [sys.executable, str(ROOT / "manage.py"), "devcluster", "--addr", "127.0.0.1:0"]
    argv += ["--kubeconfig", str(kubeconfig), "--crd", str(bad)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert f"cannot load --crd {bad}" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_the_kubeconfig_is_owner_readable_and_whole(
    command: tuple[subprocess.Popen[str], Path, list[str]], tmp_path: Path
) -> None:
    """It holds the admin's bearer token; it is written to a temporary file and renamed, so no
    reader sees half of it and no temporary file stays behind."""
    _, kubeconfig, _ = command
    assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crd.yaml", "kubeconfig"]
    assert "token:" in kubeconfig.read_text()
