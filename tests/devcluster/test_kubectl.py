"""Real kubectl binaries (1.37, the image's 1.32, and 1.20 when `make tools` installed it) run a
scripted everyday session against an in-process DevCluster, each with a fresh HOME."""

from __future__ import annotations

import os
import re
import subprocess
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from devcluster import DevCluster
from kube.events import EventRecorder
from tests.support.factories import make_node, make_pod
from tests.support.fixtures import kube_for
from tests.support.polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
KUBECTLS = {
    "1.37": ROOT / ".venv" / "bin" / "kubectl",
    "1.32": Path("/usr/bin/kubectl"),
    "1.20": ROOT / ".tools" / "kubectl-1.20" / "usr" / "bin" / "kubectl",
}

POD = """apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels:
    tier: {tier}
spec:
  nodeSelector:
    disk: none
  containers:
  - name: main
    image: nginx:{tag}
"""

BOUND = """apiVersion: v1
kind: Pod
metadata:
  name: bound
spec:
  nodeName: n1
  containers:
  - name: main
    image: nginx:1.27
"""


class Kubectl:
    def __init__(self, binary: Path, kubeconfig: str, home: Path) -> None:
        self.binary = binary
        self.env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "KUBECONFIG": kubeconfig}

    def argv(self, *args: str) -> list[str]:
        return [str(self.binary), *args]

    def run(self, *args: str, ok: bool = True) -> str:
        done = subprocess.run(self.argv(*args), env=self.env, capture_output=True, text=True, timeout=120)
        if ok:
            assert done.returncode == 0, f"kubectl {' '.join(args)} failed: {done.stderr}"
        return done.stdout

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(*args), env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )


def kubectl_for(version: str, cluster: DevCluster, tmp_path: Path) -> Kubectl:
    """kubectl `version` (a key of KUBECTLS) on `cluster`, with a HOME of its own; the test is
    skipped when that binary is not installed."""
    binary = KUBECTLS[version]
    if not binary.exists():
        pytest.skip(f"kubectl {version} is not installed at {binary} (run `make tools`)")
    home = tmp_path / "home"
    home.mkdir()
    assert cluster.kubeconfig_path
    return Kubectl(binary, cluster.kubeconfig_path, home)


@pytest.fixture(params=sorted(KUBECTLS))
def kubectl(request: Any, cluster: DevCluster, tmp_path: Path) -> Kubectl:
    return kubectl_for(request.param, cluster, tmp_path)


def _pod(cluster: DevCluster, name: str) -> dict[str, Any] | None:
    return cluster.store.get("/pods", "default", name)


def test_kubectl_everyday_session(kubectl: Kubectl, cluster: DevCluster, tmp_path: Path) -> None:
    assert "v1.32.0-devcluster" in kubectl.run("version")
    assert kubectl.run("get", "--raw", "/healthz") == "ok"
    assert kubectl.run("get", "pods") == ""
    assert kubectl.run("get", "nodes") == ""
    cluster.resources.create(cluster.registry.lookup("", "v1", "nodes"), "", make_node("n1"))  # type: ignore[arg-type]
    assert "n1" in kubectl.run("get", "nodes")

    manifest = tmp_path / "pod.yaml"
    manifest.write_text(POD.format(name="p1", tier="front", tag="1.27"))
    assert "pod/p1 created" in kubectl.run("create", "-f", str(manifest))
    applied = tmp_path / "p2.yaml"
    applied.write_text(POD.format(name="p2", tier="front", tag="1.27"))
    assert "pod/p2 created" in kubectl.run("apply", "-f", str(applied))
    applied.write_text(POD.format(name="p2", tier="back", tag="1.28"))
    assert "pod/p2 configured" in kubectl.run("apply", "-f", str(applied))
    assert "pod/p2 unchanged" in kubectl.run("apply", "-f", str(applied))
    p2 = _pod(cluster, "p2")
    assert p2 is not None and p2["metadata"]["labels"] == {"tier": "back"}
    assert p2["spec"]["containers"][0]["image"] == "nginx:1.28"

    listing = kubectl.run("get", "pods")
    assert "p1" in listing and "p2" in listing and "Pending" in listing
    assert "name: p1" in kubectl.run("get", "pod", "p1", "-o", "yaml")
    assert "NODE" in kubectl.run("get", "pods", "-o", "wide")

    watcher = kubectl.start("get", "pods", "-w")
    lines = _collect(watcher)
    try:
        wait_for(lambda: any(line.startswith("p1 ") for line in lines), what="the listed p1 row")
        wait_for(lambda: cluster.request_log.count(verb="watch", resource="pods") >= 1, what="kubectl's watch")
        assert "pod/p1 labeled" in kubectl.run("label", "pod", "p1", "color=blue")
        wait_for(lambda: sum(line.startswith("p1 ") for line in lines) >= 2, what="the watched change to p1")
    finally:
        watcher.kill()
        watcher.communicate()
    assert _pod(cluster, "p1")["metadata"]["labels"]["color"] == "blue"  # type: ignore[index]
    assert "pod/p1 annotated" in kubectl.run("annotate", "pod", "p1", "note=hi")

    wait_for(lambda: _has_event(cluster, "p1"), what="the scheduler's FailedScheduling event")
    described = kubectl.run("describe", "pod", "p1")
    assert "Name:" in described and "FailedScheduling" in described

    assert "created" in kubectl.run("create", "secret", "generic", "s1", "--from-literal=k=v")
    secret = cluster.store.get("/secrets", "default", "s1")
    assert secret is not None and secret["data"] == {"k": "dg=="} and secret["type"] == "Opaque"
    assert "created" in kubectl.run("create", "configmap", "c1", "--from-literal=a=b")
    assert cluster.store.get("/configmaps", "default", "c1")["data"] == {"a": "b"}  # type: ignore[index]

    assert "namespace/team created" in kubectl.run("create", "namespace", "team")
    assert "serviceaccount/robot created" in kubectl.run("create", "serviceaccount", "robot", "-n", "team")
    assert cluster.store.get("/serviceaccounts", "team", "robot") is not None
    assert "team" in kubectl.run("get", "namespaces")

    assert "deleted" in kubectl.run("delete", "pod", "p1")
    assert _pod(cluster, "p1") is None

    bound = tmp_path / "bound.yaml"
    bound.write_text(BOUND)
    kubectl.run("create", "-f", str(bound))
    deleting = kubectl.start("delete", "pod", "bound")
    try:
        wait_for(
            lambda: (_pod(cluster, "bound") or {}).get("metadata", {}).get("deletionTimestamp"), what="Terminating"
        )
        assert "Terminating" in kubectl.run("get", "pod", "bound")
        assert deleting.poll() is None, "kubectl delete must wait while the Pod is Terminating"
        pods = cluster.registry.lookup("", "v1", "pods")
        assert pods is not None
        cluster.resources.delete(pods, "default", "bound", {"gracePeriodSeconds": 0})
        out, err = deleting.communicate(timeout=60)
    finally:
        deleting.kill()
        deleting.communicate()
    assert deleting.returncode == 0, err
    assert "deleted" in out


def _collect(process: subprocess.Popen[str]) -> list[str]:
    """Lines of the process's stdout, appended by a reader thread as they arrive."""
    lines: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _has_event(cluster: DevCluster, pod: str) -> bool:
    events, _ = cluster.store.list_objects("/events", "default")
    return any(e["involvedObject"]["name"] == pod and e["reason"] == "FailedScheduling" for e in events)


def test_kubectl_describe_shows_a_counted_event_as_x_count_over_its_age(kubectl: Kubectl, cluster: DevCluster) -> None:
    """kubectl describe reads core/v1 Events and prints a repeat as `<last> (x5 over <first>)`."""
    pods = cluster.registry.lookup("", "v1", "pods")
    assert pods is not None
    pod = cluster.resources.create(pods, "default", make_pod("counted", spec={"schedulerName": "none"}))
    started = datetime.now(UTC) - timedelta(minutes=3)
    stamps = iter([started] + [started + timedelta(minutes=3)] * 4)
    recorder = EventRecorder(kube_for(cluster), component="nebula-gpu", inline=True, now=lambda: next(stamps))
    for _ in range(5):
        recorder.pod(pod, "Warning", "ProvisionRetrying", "no capacity in any zone")
    recorder.flush()
    described = kubectl.run("describe", "pod", "counted")
    assert re.search(r"Warning\s+ProvisionRetrying\s+\S+ \(x5 over 3m\d*s?\)\s+nebula-gpu\s+no capacity", described)
    asked = [r.path for r in cluster.request_log if r.resource == "events" and r.verb == "list"]
    assert "/api/v1/namespaces/default/events" in asked
