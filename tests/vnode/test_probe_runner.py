"""The prober in a running virtual node: a Runner on the embedded cluster starts it, probes a
local Pod's container, tells failures with the kubelet's Events, turns readiness into the
Pod's Ready condition and restarts the container whose liveness probe fails."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kube import names
from kube.client import Kube, path_for
from providers.local import LocalProvider
from tests.support.factories import make_pod
from tests.support.pods import get_pod, phase_of
from tests.support.polling import wait_for
from vnode.runner import Runner


def messages(kube: Kube, name: str, reason: str) -> list[str]:
    events, _ = kube.list(path_for("events", namespace="default"))
    return [e["message"] for e in events if e["involvedObject"]["name"] == name and e["reason"] == reason]


def condition(kube: Kube, name: str, kind: str) -> str | None:
    pod = get_pod(kube, name) or {}
    found = [c["status"] for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == kind]
    return found[0] if found else None


def restarts(kube: Kube, name: str) -> int:
    statuses = ((get_pod(kube, name) or {}).get("status") or {}).get("containerStatuses") or [{}]
    return int(statuses[0].get("restartCount", 0))


def test_a_started_runner_probes_its_pods_readiness_drives_ready_and_liveness_restarts(
    kube: Kube, start_runner: Callable[..., Runner], tmp_path: Path
) -> None:
    provider = LocalProvider("box", {"state_dir": str(tmp_path / "state"), "grace_period": 1})
    runner = start_runner(provider)
    assert runner.handler.queue_flush == runner.pods.queue.add, "a changed verdict reaches the pod controller"
    flag, sick = tmp_path / "ready", tmp_path / "sick"
    readiness = {"exec": {"command": ["test", "-f", str(flag)]}, "periodSeconds": 1}
    liveness = {"exec": {"command": ["test", "!", "-f", str(sick)]}, "periodSeconds": 1, "failureThreshold": 1}
    pod = make_pod("probed", "box", command=("sleep", "300"), container={"readinessProbe": readiness,
                                                                         "livenessProbe": liveness})  # fmt: skip
    try:
        kube.create(path_for("pods", namespace="default"), pod)
        entry = wait_for(lambda: runner.handler.tracked("default/probed"), what="the Pod tracked")
        failed = f"Readiness probe failed: command 'test -f {flag}' exited with code 1"
        wait_for(lambda: failed in messages(kube, "probed", names.EVENT_UNHEALTHY), what="the Unhealthy Event")
        assert entry.probe_verdicts.ready == {"main": False}
        assert phase_of(kube, "probed") == "Running" and condition(kube, "probed", "Ready") == "False"
        flag.touch()
        wait_for(lambda: condition(kube, "probed", "Ready") == "True", what="Ready once the probe passes")
        sick.touch()
        killing = "Container main failed liveness probe, will be restarted"
        wait_for(lambda: killing in messages(kube, "probed", names.EVENT_KILLING), what="the Killing Event")
        sick.unlink()
        wait_for(lambda: restarts(kube, "probed") == 1, what="the container restarted")
        wait_for(lambda: condition(kube, "probed", "Ready") == "True", what="Ready again once the new run passes")
    finally:
        for instance in provider.list():
            provider.terminate(instance.id)
