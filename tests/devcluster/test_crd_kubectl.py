"""kubectl 1.37 against the devcluster with the shipped NodePool CRD: `kubectl get nodepools`
prints the CRD's printer columns (priority-1 ones only with `-o wide`, and in watches), and
`kubectl explain` reads the CRD's schema from the OpenAPI v3 documents."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from pathlib import Path

import pytest

from devcluster import DevCluster
from tests.support.clients.kubectl import KUBECTL_137
from tests.support.clients.rawhttp import Raw
from tests.support.fixtures import ROOT
from tests.support.polling import wait_for

POOL = """apiVersion: nebula.io/v1alpha1
kind: NodePool
metadata:
  name: gpu
spec:
  strategy: LowestPrice
  providers:
  - name: aws
    regions: [us]
  - name: gcp
"""
STATUS = {
    "status": {
        "observedGeneration": 1,
        "candidateCount": 6,
        "placedCount": 2,
        "providerNames": "aws,gcp",
        "spend": {"hourly": "$19.20/h", "today": "$12.34", "month": "$200.10", "budget": "$20.00/h, $300.00/day"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "Valid", "message": "6 candidates"}],
    }
}


class Kubectl:
    def __init__(self, cluster: DevCluster, home: Path) -> None:
        if not Path(KUBECTL_137).exists():
            pytest.skip(f"kubectl 1.37 is not installed at {KUBECTL_137}")
        assert cluster.kubeconfig_path
        self.argv = [KUBECTL_137, "--kubeconfig", cluster.kubeconfig_path]
        self.env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}

    def run(self, *args: str, input: str | None = None) -> str:
        done = subprocess.run(
            [*self.argv, *args], input=input, env=self.env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, f"kubectl {' '.join(args)} failed: {done.stderr}"
        return done.stdout

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*self.argv, *args], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )


@pytest.fixture
def kubectl(cluster: DevCluster, tmp_path: Path) -> Kubectl:
    tool = Kubectl(cluster, tmp_path)
    tool.run("apply", "-f", str(ROOT / "deploy" / "crds" / "nodepool.yaml"))
    assert "nodepool.nebula.io/gpu created" in tool.run("apply", "-f", "-", input=POOL)
    return tool


def rows(output: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in output.splitlines() if line.strip()]


def test_get_nodepools_prints_the_crd_columns_and_wide_adds_the_priority_one_column(kubectl: Kubectl) -> None:
    header, row = rows(kubectl.run("get", "nodepools"))
    assert header == ["NAME", "STRATEGY", "PROVIDERS", "READY", "PLACED", "SPEND/H", "TODAY", "MONTH", "BUDGET", "AGE"]
    assert row[:2] == ["gpu", "LowestPrice"] and re.fullmatch(r"\d+s", row[-1])  # no status yet: empty cells
    kubectl.run("patch", "nodepool", "gpu", "--subresource=status", "--type=merge", "-p", json.dumps(STATUS))
    header, row = rows(kubectl.run("get", "np"))
    assert row[:9] == [
        "gpu",
        "LowestPrice",
        "aws,gcp",
        "True",
        "2",
        "$19.20/h",
        "$12.34",
        "$200.10",
        "$20.00/h, $300.00/day",
    ]
    header, row = rows(kubectl.run("get", "nodepools", "-o", "wide"))
    assert header[:6] == ["NAME", "STRATEGY", "PROVIDERS", "READY", "PLACED", "CANDIDATES"]
    assert row[:6] == ["gpu", "LowestPrice", "aws,gcp", "True", "2", "6"]


def test_a_watch_prints_each_change_with_the_crd_columns(kubectl: Kubectl) -> None:
    watcher = kubectl.start("get", "nodepools", "-w")
    lines: list[str] = []

    def read() -> None:
        assert watcher.stdout is not None
        lines.extend(watcher.stdout)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_for(lambda: any(line.startswith("gpu ") for line in lines), what="the listed pool")
        kubectl.run("patch", "nodepool", "gpu", "--subresource=status", "--type=merge", "-p", json.dumps(STATUS))
        wait_for(lambda: any("aws,gcp" in line for line in lines), what="the watched status change")
    finally:
        watcher.kill()
        watcher.communicate()
    changed = next(line for line in lines if "aws,gcp" in line)
    assert rows(changed)[0][:5] == ["gpu", "LowestPrice", "aws,gcp", "True", "2"]


def test_explain_prints_the_crd_schema_descriptions_from_openapi_v3(kubectl: Kubectl, raw: Raw) -> None:
    spec = kubectl.run("explain", "nodepool.spec")
    assert "GROUP:      nebula.io" in spec and "KIND:       NodePool" in spec and "VERSION:    v1alpha1" in spec
    assert "Where Pods of this pool may run and how the candidates are ordered." in spec
    assert re.search(r"providers\s+<\[\]Object> -required-", spec)
    assert "enum: Ordered, LowestPrice" in spec
    providers = kubectl.run("explain", "nodepool.spec.providers")
    assert re.search(r"name\s+<string> -required-\n\s+A registered provider's alias", providers)
    assert "group tokens (us, eu, ap)" in providers
    status = kubectl.run("explain", "nodepool.status.placedCount")
    assert "Pods placed through this pool that have not finished" in status
    asked = [line.path for line in raw.cluster.request_log if line.path.startswith("/openapi/v3")]
    assert "/openapi/v3" in asked and "/openapi/v3/apis/nebula.io/v1alpha1" in asked


def test_the_v3_index_lists_only_served_crd_group_versions_and_its_hash_follows_the_crd(
    kubectl: Kubectl, raw: Raw
) -> None:
    status, index = raw.json("GET", "/openapi/v3")
    assert status == 200 and list(index["paths"]) == ["apis/nebula.io/v1alpha1"]
    url = index["paths"]["apis/nebula.io/v1alpha1"]["serverRelativeURL"]
    status, document = raw.json("GET", url)
    assert status == 200 and document["openapi"].startswith("3.")
    schema = document["components"]["schemas"]["io.nebula.v1alpha1.NodePool"]
    assert schema["x-kubernetes-group-version-kind"] == [
        {"group": "nebula.io", "kind": "NodePool", "version": "v1alpha1"}
    ]
    assert raw.json("GET", "/openapi/v3/api/v1")[0] == 404
    assert raw.json("GET", "/openapi/v3/apis/nebula.io/v2")[0] == 404
    crd = raw.cluster.store.get("apiextensions.k8s.io/customresourcedefinitions", "", "nodepools.nebula.io")
    assert crd is not None
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"] = "Changed."
    kubectl.run("apply", "-f", "-", input=json.dumps(crd))
    _, changed = raw.json("GET", "/openapi/v3")
    assert changed["paths"]["apis/nebula.io/v1alpha1"]["serverRelativeURL"] != url
