"""What a user types for Jobs, with real kubectl 1.37: `create job` (sent in protobuf),
`get jobs` (the server-side Table, -o wide too), `describe job`, `wait --for=condition=complete`,
and a refused manifest's field error."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from devcluster import DevCluster
from tests.support.clients.rawhttp import Raw
from tests.support.polling import wait_for

KUBECTL = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "kubectl"
PODS = "/api/v1/namespaces/default/pods"

ALWAYS = """apiVersion: batch/v1
kind: Job
metadata:
  name: always
spec:
  template:
    spec:
      containers:
      - name: main
        image: busybox
"""


class Kubectl:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def __call__(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(KUBECTL), *args], env=self.env, capture_output=True, text=True, timeout=120)
        if ok:
            assert done.returncode == 0, f"kubectl {' '.join(args)} failed: {done.stderr}"
        return done

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(KUBECTL), *args], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )


@pytest.fixture
def kubectl(cluster: DevCluster, tmp_path: Path) -> Kubectl:
    if not KUBECTL.exists():
        pytest.skip(f"kubectl 1.37 is not installed at {KUBECTL}")
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "KUBECONFIG": str(cluster.kubeconfig_path),
    }

    return Kubectl(env)


def test_kubectl_create_get_describe_and_wait(kubectl: Kubectl, cluster: DevCluster, raw: Raw) -> None:
    created = kubectl("create", "job", "hello", "--image=busybox", "--", "sh", "-c", "exit 0")
    assert created.stdout.strip() == "job.batch/hello created"
    header, row = kubectl("get", "jobs").stdout.splitlines()
    assert header.split() == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert row.split()[:3] == ["hello", "Running", "0/1"]
    wide_header, wide_row = kubectl("get", "jobs", "-o", "wide").stdout.splitlines()
    assert wide_header.split()[5:] == ["CONTAINERS", "IMAGES", "SELECTOR"]
    assert wide_row.split()[5:7] == ["hello", "busybox"]
    assert wide_row.split()[7].startswith("batch.kubernetes.io/controller-uid=")
    (pod,) = wait_for(lambda: raw.json("GET", f"{PODS}?labelSelector=job-name%3Dhello")[1]["items"], what="the Pod")
    assert pod["spec"]["containers"][0]["command"] == ["sh", "-c", "exit 0"]
    assert pod["spec"]["restartPolicy"] == "Never"
    waiter = kubectl.start("wait", "--for=condition=complete", "job/hello", "--timeout=60s")
    try:
        wait_for(lambda: cluster.request_log.count(verb="watch", resource="jobs") >= 1, what="kubectl wait's watch")
        assert waiter.poll() is None  # still waiting: the Job is not complete
        path = f"{PODS}/{pod['metadata']['name']}"

        def succeed() -> bool:  # as the kubelet: read fresh, retry on a conflict with the scheduler
            current = raw.json("GET", path)[1]
            body = dict(current, status={**current["status"], "phase": "Succeeded"})
            return raw.json("PUT", f"{path}/status", body)[0] == 200

        wait_for(succeed, what="the Pod Succeeded")
        out, err = waiter.communicate(timeout=60)
    finally:
        waiter.kill()
    assert waiter.returncode == 0 and out.strip() == "job.batch/hello condition met", err
    assert kubectl("get", "jobs", "--no-headers").stdout.split()[:3] == ["hello", "Complete", "1/1"]
    described = kubectl("describe", "job", "hello").stdout
    for line in ("Completion Mode:  NonIndexed", "Backoff Limit:    6", "1 Succeeded / 0 Failed"):
        assert line in described, described
    assert f"Created pod: {pod['metadata']['name']}" in described
    assert "Completed" in described and "job-controller" in described


def test_kubectl_prints_the_field_error_of_a_refused_job(kubectl: Kubectl, tmp_path: Path) -> None:
    path = tmp_path / "always.yaml"
    path.write_text(ALWAYS)
    refused = kubectl("create", "-f", str(path), ok=False)
    assert refused.returncode == 1
    assert 'spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never"' in (
        refused.stderr
    )
    assert kubectl("get", "jobs").stdout == "" and "No resources found" in kubectl("get", "jobs").stderr
