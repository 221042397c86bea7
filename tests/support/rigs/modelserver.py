"""The model-server Pod of issue 14 and a view of it as kubectl and the API server show it,
for the end-to-end tests of Pod shapes (tests/vnode/kubelet/test_pod_shapes*_e2e.py).

The Pod: a download init container that fails once, a server whose readiness probe waits
for a file, a metrics container with a liveness probe, an emptyDir they share and a
configMap volume whose ConfigMap the test creates later. Nothing here is a test.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from devcluster import DevCluster
from kube import names
from kube.client import Kube, path_for
from providers.base import Provider
from tests.support.clients.kubectl import KUBECTL_137
from tests.support.fixtures import kube_for
from tests.support.pods import get_pod
from tests.support.polling import wait_for
from tests.support.rigs.runners import make_runner
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.server import Listeners
from vnode.model.runs import BackoffPolicy

FAST_BACKOFF = BackoffPolicy(initial=1.0, maximum=2.0, reset=600.0)  # restarts within the test's patience

POD = "model-server"
DOWNLOAD = (
    "if [ ! -f /data/attempted ]; then touch /data/attempted; echo download failed; exit 1; fi; "
    "echo downloaded; echo weights-v1 > /data/model"
)
SERVE = "cat /data/model; cat /config/greeting; echo; while true; do echo serving; sleep 0.3; done"
METRICS = "while true; do echo metrics tick; sleep 0.3; done"
# The probes' timeoutSeconds. Their commands run through stand-ins (over SSH, a Python
# `docker`) that a loaded machine can slow past the default 1 s, and a liveness probe that
# times out kills, as a kubelet's does: here the file fails a probe, never the clock.
PROBE_TIMEOUT = 10


def model_server_pod(provider: str = "local", *, download: str = DOWNLOAD) -> dict[str, Any]:
    """The Pod, bound by nodeSelector to the node of `provider`; `download` is the init
    container's script (by default it remembers its failed attempt in the shared emptyDir)."""
    data = {"name": "data", "mountPath": "/data"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POD, "namespace": "default"},
        "spec": {
            "nodeSelector": {names.PROVIDER_KEY: provider},
            "tolerations": [{"key": names.PROVIDER_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            "volumes": [{"name": "data", "emptyDir": {}}, {"name": "config", "configMap": {"name": "greeting"}}],
            "initContainers": [{"name": "download", "image": "busybox", "command": ["sh", "-c", download],
                                "volumeMounts": [data]}],
            "containers": [
                {"name": "server", "image": "busybox", "command": ["sh", "-c", SERVE],
                 "volumeMounts": [data, {"name": "config", "mountPath": "/config", "readOnly": True}],
                 "readinessProbe": {"exec": {"command": ["test", "-f", "/data/ready"]}, "periodSeconds": 1,
                                    "timeoutSeconds": PROBE_TIMEOUT}},
                {"name": "metrics", "image": "busybox", "command": ["sh", "-c", METRICS], "volumeMounts": [data],
                 "livenessProbe": {"exec": {"command": ["sh", "-c", "test ! -f /data/sick"]}, "periodSeconds": 1,
                                   "failureThreshold": 1, "timeoutSeconds": PROBE_TIMEOUT}},
            ],
        },
    }  # fmt: skip


@dataclass
class Shaped:
    cluster: DevCluster
    kube: Kube
    kubeconfig: str
    pod: str = "model-server"  # unique across the module: the kubelet registry finds Pods by key

    def kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [KUBECTL_137, "--kubeconfig", self.kubeconfig, *args], capture_output=True, text=True, timeout=60
        )

    def row(self) -> list[str]:
        """NAME READY STATUS RESTARTS AGE, as `kubectl get pod` prints them."""
        return self.kubectl("get", "pod", self.pod, "--no-headers").stdout.split()

    def status(self) -> dict[str, Any]:
        return dict((get_pod(self.kube, self.pod) or {}).get("status") or {})

    def container(self, name: str) -> dict[str, Any]:
        status = self.status()
        every = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
        return next((dict(s) for s in every if s.get("name") == name), {})

    def condition(self, kind: str) -> str | None:
        return next((c["status"] for c in self.status().get("conditions") or [] if c["type"] == kind), None)

    def events(self, reason: str) -> list[str]:
        items, _ = self.kube.list(path_for("events", namespace="default"))
        return [e["message"] for e in items if e["involvedObject"]["name"] == self.pod and e.get("reason") == reason]

    def serves_each_container(self) -> None:
        """Once both app containers run: `logs -c` and `exec -c` reach each one, in its own
        view of the volumes, and the Pod goes Ready (2/2) once the server's readiness probe
        passes, which the test's `exec` makes it do."""
        wait_for(lambda: "serving" in self.kubectl("logs", self.pod, "-c", "server").stdout, what="the server's log")
        server_log = self.kubectl("logs", self.pod, "-c", "server").stdout
        assert server_log.startswith("weights-v1\nhello from the config\n") and "metrics tick" not in server_log
        wait_for(lambda: "metrics tick" in self.kubectl("logs", self.pod, "-c", "metrics").stdout, what="its log")
        greeting = self.kubectl("exec", self.pod, "-c", "server", "--", "cat", "/config/greeting").stdout
        assert greeting == "hello from the config"
        assert self.kubectl("exec", self.pod, "-c", "metrics", "--", "cat", "/data/model").stdout == "weights-v1\n"
        assert self.kubectl("exec", self.pod, "-c", "server", "--", "touch", "/data/ready").returncode == 0
        wait_for(lambda: self.condition("Ready") == "True", what="Ready once the readiness probe passes")
        assert self.row()[1:3] == ["2/2", "Running"]

    def fails_liveness(self) -> None:
        """Make the metrics container's liveness probe fail; the kubelet's Events follow."""
        assert self.kubectl("exec", self.pod, "-c", "server", "--", "touch", "/data/sick").returncode == 0
        killing = "Container metrics failed liveness probe, will be restarted"
        wait_for(lambda: killing in self.events(names.EVENT_KILLING), what="the Killing Event")
        # Said first, but each Event is written by the recorder's flusher in its own time.
        failed = "Liveness probe failed:"
        wait_for(lambda: any(m.startswith(failed) for m in self.events(names.EVENT_UNHEALTHY)), what="Unhealthy")


@contextmanager
def shaped_cluster(
    provider: Provider, kubeconfig: str, *, registry: HandlerRegistry, server: Listeners, pod: str = POD
) -> Iterator[Shaped]:
    """An embedded cluster whose virtual node runs `provider` (a Runner with a short
    back-off), served by the kubelet API `server`; the view of the Pod named `pod`."""
    with DevCluster(kubeconfig_path=kubeconfig, scheduler_interval=0.05) as cluster:
        runner = make_runner(cluster, provider, kubelet_port=server.kubelet_port, backoff=FAST_BACKOFF)
        runner.start()
        registry.add(runner.handler)
        try:
            yield Shaped(cluster, kube_for(cluster), kubeconfig, pod=pod)
        finally:
            registry.remove(runner.handler)
            runner.stop(timeout=10)
