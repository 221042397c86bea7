"""The manifests proven by what they render (issue 15): each overlay is rendered, installed on
the embedded API server as docs/deploy.md installs it (its shell steps run as written:
tests/support/deploy_steps.py), and the manager's Pod template is run as its kubelet would run
it on the `Dockerfile`'s image (the exact argv, env, mounts; tests/support/kubelet.py). An
opted-in Pod is then admitted through the webhook by the console Service (TLS verified with the
Service's name against the caBundle), gated, placed, Running, and `kubectl logs` reads it.

dev: the local provider and SQLite in the emptyDir. production: AWS EC2 on moto, its instances
booted (tests/providers/aws/ec2_vms.py), PostgreSQL from the Secret nebula-database, and the
certificate cert-manager's self-signed Issuer would make, its CA injected as its CA injector would.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.deploy_manifests import find, manager_container, render
from tests.support.deploy_steps import doc_block, run_step
from tests.support.install import POD_IP, Install, installed
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow

Obj = dict[str, Any]
KIND = "From an empty cluster to `kubectl logs` (kind)"
GATE_TOLERATION = {"key": "nebula.io/provider", "operator": "Exists", "effect": "NoSchedule"}


def without_apply_k(block: str) -> str:
    """Step 6 without its `kubectl apply -k`: `Install.apply_served` applies what the embedded
    API server serves of the same render (tests/support/install.py names what it skips)."""
    kept = [line for line in block.splitlines() if not line.startswith("kubectl apply -k ")]
    assert len(kept) < len(block.splitlines()), "step 6 no longer applies the overlay"
    return "\n".join(kept)


def node_ready(install: Install, node: str) -> Obj | None:
    found = install.kubectl("get", "node", node, "-o", "json", check=False)
    if found.returncode != 0:
        return None
    status = json.loads(found.stdout)["status"]
    ready = {c["type"]: c["status"] for c in status.get("conditions", [])}.get("Ready") == "True"
    return status if ready else None


def events_of(install: Install, pod: str) -> list[Obj]:
    listed = json.loads(install.kubectl("get", "events", "-o", "json").stdout)["items"]
    return [e for e in listed if e.get("involvedObject", {}).get("name") == pod]


def check_the_opted_in_pod(install: Install, *, node: str, step_8: str, steps: Path, timeout: float) -> str:
    """Steps 8 and 9: the Pod is admitted (the webhook's toleration), placed (placement's
    nodeSelector and Placed Event, the gate gone), Running on `node`; `kubectl logs` reads it."""
    run_step(install, step_8, cwd=steps, env={"KUBECTL_WAIT_TIMEOUT": str(timeout)})
    pod = install.get("pod", "hello", "default")
    assert GATE_TOLERATION in pod["spec"]["tolerations"], "the webhook did not admit it"
    assert not pod["spec"].get("schedulingGates"), "placement did not lift its gate"
    assert pod["spec"]["nodeName"] == node
    assert pod["spec"]["nodeSelector"] == {"nebula.io/provider": node.removeprefix("nebula-")}
    assert [e for e in events_of(install, "hello") if e["reason"] == "Placed"], "no Placed Event"
    assert pod["status"]["phase"] == "Running"
    wait_for(lambda: "hello 3" in install.kubectl("logs", "hello").stdout, timeout, what="the Pod's third line")
    return run_step(install, doc_block(KIND, 9), cwd=steps).stdout


def with_wait_timeout(block: str) -> str:
    """`kubectl wait`'s 30 s default is a kind cluster's; a loaded test machine gets the test's."""
    return re.sub(r"^kubectl wait ", 'kubectl wait --timeout="${KUBECTL_WAIT_TIMEOUT}s" ', block, flags=re.M)


# -- dev ---------------------------------------------------------------------------------------
def test_the_dev_overlay_installs_as_documented_and_runs_an_opted_in_pod(tmp_path: Path) -> None:
    rendered = render("dev")
    steps = tmp_path / "steps"
    with installed(tmp_path) as install:
        run_step(install, doc_block(KIND, 4), cwd=steps)  # the namespace and the console's key
        run_step(install, doc_block(KIND, 5), cwd=steps)  # openssl: the CA, the certificate, its Secret
        install.apply_served(rendered)
        run_step(install, without_apply_k(doc_block(KIND, 6)), cwd=steps)  # the caBundle patch
        webhook = install.get("mutatingwebhookconfiguration", "nebula-placement")
        assert webhook["webhooks"][0]["clientConfig"]["caBundle"]
        install.register_endpoint(rendered, find(rendered, "Service", "nebula-console"))

        manager = install.run_pod(rendered, install.pod_facts(rendered))
        assert manager_container(rendered)["args"][-1] == "--provider=local"
        status = wait_for(lambda: node_ready(install, "nebula-local"), 60, what="nebula-local Ready")
        assert {"type": "InternalIP", "address": POD_IP} in status["addresses"]
        served = check_the_opted_in_pod(
            install, node="nebula-local", step_8=with_wait_timeout(doc_block(KIND, 8)), steps=steps, timeout=60
        )
        assert "hello 1" in served and "from inside" in served
        assert manager.process.poll() is None, install.log("manager")
