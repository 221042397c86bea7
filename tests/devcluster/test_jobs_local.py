"""Jobs end to end on `runvnode --dev-cluster --provider local` (what `make run` starts):
the Pods run for real as local processes on the virtual node; real kubectl applies the Jobs
and waits for their conditions."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.devrun import dev_run
from tests.support.polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = ROOT / ".venv" / "bin" / "kubectl"

JOBS = """apiVersion: batch/v1
kind: Job
metadata:
  name: three
spec:
  completions: 3
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {nebula.io/provider: local}
      tolerations: [{key: nebula.io/provider, operator: Exists, effect: NoSchedule}]
      containers:
      - {name: main, image: busybox, command: [sh, -c, "exit 0"]}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: fails
spec:
  backoffLimit: 1
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {nebula.io/provider: local}
      tolerations: [{key: nebula.io/provider, operator: Exists, effect: NoSchedule}]
      containers:
      - {name: main, image: busybox, command: [sh, -c, "exit 1"]}
"""


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    with dev_run(tmp_path) as process:
        yield process, tmp_path


def test_jobs_complete_and_fail_for_real_on_the_local_provider(
    manager: tuple[subprocess.Popen[bytes], Path],
) -> None:
    if not KUBECTL.exists():
        pytest.skip(f"kubectl 1.37 is not installed at {KUBECTL}")
    process, folder = manager
    kubeconfig = folder / ".nebula" / "kubeconfig"

    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [str(KUBECTL), "--kubeconfig", str(kubeconfig), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, env={"HOME": str(folder)})

    def node_ready() -> bool:
        shown = kubectl("get", "node", "nebula-local", "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}")
        return shown.stdout == "True"

    wait_for(lambda: kubeconfig.exists() and node_ready(), 90, 0.2, what="the node nebula-local Ready")
    manifest = folder / "jobs.yaml"
    manifest.write_text(JOBS)
    applied = kubectl("apply", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    done = kubectl("wait", "--for=condition=complete", "job/three", "--timeout=90s")
    assert done.stdout.strip() == "job.batch/three condition met", (done.stderr, (folder / "run.log").read_text())
    three = json.loads(kubectl("get", "job", "three", "-o", "json").stdout)
    assert three["status"]["succeeded"] == 3 and "failed" not in three["status"]
    pods = json.loads(kubectl("get", "pods", "-l", "job-name=three", "-o", "json").stdout)["items"]
    assert len(pods) == 3 and {p["status"]["phase"] for p in pods} == {"Succeeded"}
    assert {p["spec"]["nodeName"] for p in pods} == {"nebula-local"}
    # One failure, the real 10 s back-off, a second failure: past backoffLimit 1.
    failed = kubectl("wait", "--for=condition=failed", "job/fails", "--timeout=90s")
    assert failed.stdout.strip() == "job.batch/fails condition met", failed.stderr
    fails = json.loads(kubectl("get", "job", "fails", "-o", "json").stdout)
    conditions = [(c["type"], c["reason"], c["message"]) for c in fails["status"]["conditions"]]
    message = "Job has reached the specified backoff limit"
    assert conditions == [
        ("FailureTarget", "BackoffLimitExceeded", message),
        ("Failed", "BackoffLimitExceeded", message),
    ]
    assert fails["status"]["failed"] == 2 and "succeeded" not in fails["status"]
    listing = kubectl("get", "jobs").stdout.split("\n")
    assert listing[1].split()[:3] == ["fails", "Failed", "0/1"] and listing[2].split()[:3] == [
        "three",
        "Complete",
        "3/3",
    ]
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0
