"""The first hour of a newcomer, on `make run`'s own command line: the recipes of the docs run
as written with real kubectl against the embedded cluster and the local provider.

One `make run` (its command line read from the Makefile with `make -n`, on free ports, in a
fresh folder) serves every step: a NodePool and an opted-in Pod placed and Running, a Job of 3
completions Complete, a Job whose Pod exits 1 Failed as the Job controller says it, a
Deployment scaled to 3 on the virtual node, `kubectl create token default`, a Pod without an
image refused with kubectl's field error, and Ctrl-C that leaves no process of any Pod behind.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.clients.kubectl import KUBECTL_IMAGE
from tests.support.devrun import dev_run
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
MARK = "NEBULA_FIRST_HOUR_MARK"  # an env var every Pod of this test carries, to find its processes


def make_run_argv() -> list[str]:
    """`make run`'s command, as make would run it: the embedded cluster on a free port, this
    interpreter as the virtualenv's (bootstrap is taken as done: `-o` the install stamp)."""
    shown = subprocess.run(
        ["make", "-s", "-n", "-o", ".venv/.installed", "run", f"PY={sys.executable}", "DEV_ADDR=127.0.0.1:0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    lines = [line for line in shown.stdout.splitlines() if "runvnode" in line]
    assert len(lines) == 1, shown.stdout
    argv = shlex.split(lines[0])
    return [str(ROOT / arg) if arg == "manage.py" else arg for arg in argv]


@dataclass
class Run:
    process: subprocess.Popen[bytes]
    folder: Path
    kubeconfig: Path
    mark: str

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [KUBECTL_IMAGE, "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, manifest: str) -> None:
        self.kubectl("apply", "-f", "-", stdin=manifest)

    def log(self) -> str:
        return (self.folder / "run.log").read_text(errors="replace")


def pod_processes(mark: str) -> list[int]:
    """Every process on this machine whose environment carries this test's mark."""
    found = []
    needle = f"{MARK}={mark}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    folder = tmp_path_factory.mktemp("first-hour")
    argv = make_run_argv() + ["--console-addr", "127.0.0.1:0", "--metrics-addr", ""]
    started: Run | None = None
    try:
        with dev_run(folder, argv) as process:
            started = Run(process, folder, folder / ".nebula" / "kubeconfig", uuid.uuid4().hex)
            wait_for(lambda: "Nebula is running" in started.log(), 90, 0.1, what="make run's banner")
            started.apply(POOL)
            yield started
    finally:
        for pid in pod_processes(started.mark if started else "-"):  # a failed test must leak no process
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass


POOL = """
apiVersion: nebula.io/v1alpha1
kind: NodePool
metadata: {name: default}
spec:
  providers: [{name: local}]
"""


def env_block(run: Run) -> str:
    return f"[{{name: {MARK}, value: '{run.mark}'}}]"


def test_a_nodepool_and_an_opted_in_pod_are_placed_and_running(run: Run) -> None:
    run.apply(
        f"""
apiVersion: v1
kind: Pod
metadata:
  name: placed
  labels: {{nebula.io/enabled: "true", nebula.io/pool: default}}
spec:
  containers:
    - name: main
      image: busybox
      env: {env_block(run)}
      command: [sh, -c, 'for i in 1 2 3; do echo hello $i; sleep 1; done; sleep 3600']
"""
    )
    run.kubectl("wait", "--for=jsonpath={.status.phase}=Running", "pod/placed", "--timeout=90s")
    pod = run.get("pod", "placed")
    assert pod["spec"]["nodeName"] == "nebula-local"
    events = run.get("events", "--field-selector", "involvedObject.name=placed")["items"]
    assert "Placed" in {event["reason"] for event in events}, [e["reason"] for e in events]


def job(run: Run, name: str, *, completions: int, script: str, backoff_limit: int = 6) -> str:
    return f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: {name}}}
spec:
  completions: {completions}
  parallelism: {completions}
  backoffLimit: {backoff_limit}
  template:
    metadata:
      labels: {{nebula.io/enabled: "true", nebula.io/pool: default}}
    spec:
      restartPolicy: Never
      containers:
        - name: main
          image: busybox
          env: {env_block(run)}
          command: [sh, -c, '{script}']
"""


def conditions(obj: Any) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def test_a_job_of_three_completions_completes_with_three_succeeded(run: Run) -> None:
    run.apply(job(run, "three", completions=3, script="echo done"))
    run.kubectl("wait", "--for=condition=Complete", "job/three", "--timeout=120s")
    status = run.get("job", "three")["status"]
    assert status["succeeded"] == 3 and status.get("failed", 0) == 0, status
    assert conditions({"status": status})["Complete"]["status"] == "True"
    shown = run.kubectl("get", "job", "three").stdout
    assert "Complete" in shown and "3/3" in shown, shown


def test_a_job_whose_pod_exits_1_with_backoff_limit_1_fails_as_the_controller_says(run: Run) -> None:
    run.apply(job(run, "fails", completions=1, script="exit 1", backoff_limit=1))
    run.kubectl("wait", "--for=condition=Failed", "job/fails", "--timeout=180s")
    failed = conditions(run.get("job", "fails"))["Failed"]
    assert failed["status"] == "True"
    assert failed["reason"] == "BackoffLimitExceeded"
    assert failed["message"] == "Job has reached the specified backoff limit"
    assert run.get("job", "fails")["status"]["failed"] == 2  # the first Pod and one retry


def test_kubectl_scale_deploy_to_3_runs_3_pods_on_the_virtual_node(run: Run) -> None:
    run.apply(
        f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      nodeSelector: {{nebula.io/provider: local}}
      tolerations: [{{key: nebula.io/provider, operator: Exists}}]
      containers:
        - name: main
          image: busybox
          env: {env_block(run)}
          command: [sh, -c, 'sleep 3600']
"""
    )
    run.kubectl("scale", "deploy", "web", "--replicas=3")

    def running() -> list[Any] | None:
        pods = run.get("pods", "-l", "app=web")["items"]
        up = [p for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
        return up if len(up) == 3 else None

    pods = wait_for(running, 90, 0.5, what="3 Running Pods of deploy/web")
    assert {p["spec"]["nodeName"] for p in pods} == {"nebula-local"}
    shown = run.kubectl("get", "deploy", "web").stdout
    assert "3/3" in shown, shown


def test_kubectl_create_token_default_gives_a_token_the_cluster_accepts(run: Run) -> None:
    token = run.kubectl("create", "token", "default").stdout.strip()
    assert token.count(".") == 2, token[:20]
    # The server knows the token as the ServiceAccount, which RBAC lets list no Pods; a made-up
    # token is not known at all (docs/devcluster.md: only the review endpoints authenticate).
    as_default = run.kubectl("auth", "can-i", "list", "pods", "--token", token, check=False)
    assert (as_default.returncode, as_default.stdout.strip()) == (1, "no"), as_default
    made_up = run.kubectl("auth", "can-i", "list", "pods", "--token", token[:-4] + "abcd", check=False)
    assert "Unauthorized" in made_up.stderr, made_up


def test_a_pod_without_an_image_gets_kubectls_field_error(run: Run) -> None:
    refused = run.kubectl(
        "apply",
        "-f",
        "-",
        stdin="apiVersion: v1\nkind: Pod\nmetadata: {name: noimage}\nspec: {containers: [{name: main}]}\n",
        check=False,
    )
    assert refused.returncode != 0
    assert 'The Pod "noimage" is invalid: spec.containers[0].image: Required value' in refused.stderr, refused.stderr
    assert run.kubectl("get", "pod", "noimage", check=False).returncode != 0  # nothing was stored


def test_zz_ctrl_c_leaves_no_process_of_any_pod(run: Run) -> None:
    """Last in this module (it ends the shared `make run`): every Pod's processes are gone,
    a server holding a port among them."""
    run.apply(
        f"""
apiVersion: v1
kind: Pod
metadata: {{name: server}}
spec:
  nodeSelector: {{nebula.io/provider: local}}
  tolerations: [{{key: nebula.io/provider, operator: Exists}}]
  containers:
    - name: main
      image: python
      env: {env_block(run)}
      command: [{sys.executable}, -m, http.server, --bind, 127.0.0.1, "0"]
    - name: sleeper
      image: busybox
      env: {env_block(run)}
      command: [sh, -c, 'sleep 3600']
"""
    )
    run.kubectl("wait", "--for=condition=Ready", "pod/server", "--timeout=90s")
    assert len(pod_processes(run.mark)) >= 2
    run.process.send_signal(signal.SIGINT)
    assert run.process.wait(90) == 0, run.log()[-3000:]
    assert pod_processes(run.mark) == [], run.log()[-3000:]
