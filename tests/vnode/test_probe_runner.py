"""The prober in a running virtual node: a Runner on the embedded cluster starts it, probes a
local Pod's container, and tells failures with the kubelet's Events through the recorder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kube import names
from kube.client import Kube, path_for
from providers.local import LocalProvider
from tests.support.factories import make_pod
from tests.support.polling import wait_for
from vnode.runner import Runner


def messages(kube: Kube, name: str, reason: str) -> list[str]:
    events, _ = kube.list(path_for("events", namespace="default"))
    return [e["message"] for e in events if e["involvedObject"]["name"] == name and e["reason"] == reason]


def test_a_started_runner_probes_its_pods_and_tells_a_failed_probe_as_unhealthy(
    kube: Kube, start_runner: Callable[..., Runner], tmp_path: Path
) -> None:
    provider = LocalProvider("box", {"state_dir": str(tmp_path / "state"), "grace_period": 1})
    runner = start_runner(provider)
    assert runner.handler.queue_flush == runner.pods.queue.add, "a changed verdict reaches the pod controller"
    flag = tmp_path / "ready"
    readiness = {"exec": {"command": ["test", "-f", str(flag)]}, "periodSeconds": 1}
    liveness = {"exec": {"command": ["false"]}, "periodSeconds": 1, "failureThreshold": 1}
    pod = make_pod("probed", "box", command=("sleep", "300"), container={"readinessProbe": readiness,
                                                                         "livenessProbe": liveness})  # fmt: skip
    try:
        kube.create(path_for("pods", namespace="default"), pod)
        entry = wait_for(lambda: runner.handler.tracked("default/probed"), what="the Pod tracked")
        failed = f"Readiness probe failed: command 'test -f {flag}' exited with code 1"
        wait_for(lambda: failed in messages(kube, "probed", names.EVENT_UNHEALTHY), what="the Unhealthy Event")
        assert entry.probe_ready == {"main": False}
        # The local provider cannot stop one container: the liveness failure is told, not acted on.
        cannot = "Container main failed liveness probe and cannot be restarted: the provider cannot stop one container"
        wait_for(lambda: cannot in messages(kube, "probed", names.EVENT_UNHEALTHY), what="the liveness Event")
        flag.touch()
        wait_for(lambda: entry.probe_ready == {"main": True}, what="the readiness probe to pass")
    finally:
        for instance in provider.list():
            provider.terminate(instance.id)
