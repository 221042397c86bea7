"""End to end, as a user runs it: kubectl -> the embedded API server -> a Runner on the LOCAL
provider (and on the fake cloud over HTTP), for the model-server Pod of issue 14: a download
init container that fails once, a server whose readiness probe waits for a file, a metrics
container with a liveness probe, an emptyDir they share and a configMap volume whose ConfigMap is created later.

Each step is checked as kubectl shows it (STATUS, READY, logs -c, exec -c): nothing is
reported that did not happen (design I9)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kube import names
from kube.client import path_for
from providers.fake import FakeProvider
from providers.fake.client import FakeCloudClient
from providers.fake.server import start_server
from providers.local import LocalProvider
from tests.support.pods import get_pod
from tests.support.polling import wait_for
from tests.support.rigs.modelserver import POD, PROBE_TIMEOUT, Shaped, model_server_pod, shaped_cluster
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.server import Listeners


@pytest.fixture(scope="module")
def shaped(tmp_path_factory: pytest.TempPathFactory, registry: HandlerRegistry, server: Listeners) -> Iterator[Shaped]:
    folder = tmp_path_factory.mktemp("shaped")
    kubeconfig = str(folder / "kubeconfig")
    provider = LocalProvider("local", {"state_dir": str(folder / "state"), "grace_period": 1})
    try:
        with shaped_cluster(provider, kubeconfig, registry=registry, server=server) as shaped:
            yield shaped
    finally:
        for instance in provider.list():
            provider.terminate(instance.id)


def test_the_model_server_pod_runs_each_step_as_kubectl_reports_it(shaped: Shaped) -> None:
    kube = shaped.kube
    kube.create(path_for("pods", namespace="default"), model_server_pod())

    # The ConfigMap does not exist: nothing runs, and the Pod says why, as a kubelet does.
    missing = 'MountVolume.SetUp failed for volume "config" : configmap "greeting" not found'
    wait_for(lambda: missing in shaped.events(names.EVENT_FAILED_MOUNT), what="the FailedMount Event")
    assert shaped.status().get("phase", "Pending") == "Pending"
    wait_for(lambda: shaped.row()[1:3] == ["0/2", "Init:0/1"], what="Init:0/1")  # the status a kubelet writes first
    assert shaped.container("download")["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert shaped.condition("Initialized") == "False" and shaped.condition("PodScheduled") == "True"

    # Created later: the init container runs first, fails once, is restarted, then succeeds.
    kube.create(path_for("configmaps", namespace="default"),
                {"metadata": {"name": "greeting"}, "data": {"greeting": "hello from the config"}})  # fmt: skip
    wait_for(lambda: shaped.container("download").get("restartCount") == 1, what="the init container restarted")
    wait_for(lambda: "terminated" in (shaped.container("download").get("state") or {}), what="the init done")
    assert shaped.container("download")["state"]["terminated"]["exitCode"] == 0
    assert shaped.container("download")["lastState"]["terminated"]["exitCode"] == 1
    download_log = shaped.kubectl("logs", POD, "-c", "download").stdout
    assert download_log == "downloaded\n"
    assert shaped.kubectl("logs", POD, "-c", "download", "--previous").stdout == "download failed\n"

    # Then both app containers run; Ready waits for the server's readiness probe.
    wait_for(lambda: "running" in (shaped.container("metrics").get("state") or {}), what="metrics running")
    wait_for(lambda: "running" in (shaped.container("server").get("state") or {}), what="server running")
    assert shaped.condition("Initialized") == "True"
    assert shaped.status()["phase"] == "Running"
    assert shaped.condition("Ready") == "False" and shaped.container("server")["ready"] is False
    assert shaped.container("metrics")["ready"] is True  # no readiness probe: ready once running
    wait_for(lambda: shaped.row()[1:3] == ["1/2", "Running"], what="kubectl to show 1/2 Running")
    shaped.serves_each_container()

    # A failing liveness probe restarts its container, and only that one.
    shaped.fails_liveness()
    assert shaped.kubectl("exec", POD, "-c", "server", "--", "rm", "/data/sick").returncode == 0
    wait_for(lambda: shaped.container("metrics").get("restartCount", 0) >= 1, what="metrics restarted")
    wait_for(lambda: "running" in (shaped.container("metrics").get("state") or {}), what="metrics running again")
    assert shaped.container("server")["restartCount"] == 0
    assert "Started container metrics" in shaped.events(names.EVENT_STARTED)
    wait_for(lambda: shaped.condition("Ready") == "True", what="Ready again")


FAKE_SCENARIO: dict[str, Any] = {
    "poll_interval": 0.2,
    "offerings": [{"accelerator": None, "gpu_count": 0, "tier": "OnDemand", "region": "us-east-1",
                   "hourly_price": 0.1}],
    "workload": {"containers": {"download": {"run_seconds": None}}},  # runs until the test ends it
}  # fmt: skip


def fake_pod() -> dict[str, Any]:
    """The model server for the fake cloud, whose scripted shell answers `test -f PATH` from the
    files a control call puts in a container: readiness waits for /data/ready, liveness needs
    /data/alive (given once the metrics container runs)."""
    pod = model_server_pod()
    spec = pod["spec"]
    spec["nodeSelector"] = {names.PROVIDER_KEY: "cloud"}
    spec["containers"][1]["livenessProbe"] = {"exec": {"command": ["test", "-f", "/data/alive"]}, "periodSeconds": 1,
                                              "initialDelaySeconds": 1, "failureThreshold": 1,
                                              "timeoutSeconds": PROBE_TIMEOUT}  # fmt: skip
    return pod


@pytest.fixture
def over_http(tmp_path: Path, registry: HandlerRegistry, server: Listeners) -> Iterator[tuple[Shaped, FakeCloudClient]]:
    service = start_server(scenario=FAKE_SCENARIO)
    provider = FakeProvider("cloud", {"url": service.url})
    assert provider.client is not None
    kubeconfig = str(tmp_path / "kubeconfig")
    try:
        with shaped_cluster(provider, kubeconfig, registry=registry, server=server, pod="model-server-http") as shaped:
            yield shaped, provider.client
    finally:
        service.close()


def test_the_model_server_pod_on_the_fake_cloud_over_http_reports_each_step(
    over_http: tuple[Shaped, FakeCloudClient],
) -> None:
    shaped, cloud = over_http
    kube = shaped.kube
    kube.create(path_for("pods", namespace="default"), dict(fake_pod(), metadata={"name": shaped.pod}))
    missing = 'MountVolume.SetUp failed for volume "config" : configmap "greeting" not found'
    wait_for(lambda: missing in shaped.events(names.EVENT_FAILED_MOUNT), what="the FailedMount Event")
    kube.create(path_for("configmaps", namespace="default"),
                {"metadata": {"name": "greeting"}, "data": {"greeting": "hello"}})  # fmt: skip

    # The init container runs alone; the app containers wait for it, as kubectl says.
    wait_for(lambda: "running" in (shaped.container("download").get("state") or {}), what="download running")
    instance = (get_pod(kube, shaped.pod) or {})["metadata"]["annotations"][names.INSTANCE_ID_ANNOTATION]
    assert shaped.row()[1:3] == ["0/2", "Init:0/1"]
    assert shaped.container("server")["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert shaped.condition("Initialized") == "False"

    cloud.inject({"kind": "exit", "instance": instance, "container": "download", "code": 1})
    wait_for(lambda: shaped.container("download").get("restartCount") == 1, what="the init container restarted")
    assert shaped.container("download")["lastState"]["terminated"]["exitCode"] == 1
    cloud.inject({"kind": "exit", "instance": instance, "container": "download", "code": 0})
    wait_for(lambda: "running" in (shaped.container("metrics").get("state") or {}), what="metrics running")
    cloud.inject({"kind": "file", "instance": instance, "container": "metrics", "path": "/data/alive"})
    wait_for(lambda: "running" in (shaped.container("server").get("state") or {}), what="server running")
    assert shaped.condition("Initialized") == "True" and shaped.condition("Ready") == "False"
    wait_for(lambda: shaped.row()[1:3] == ["1/2", "Running"], what="kubectl to show 1/2 Running")

    # logs -c and exec -c reach each container over HTTP.
    # The fake's scripted console: `<id> line N` for the first app container, `<id> <name> line N` for others.
    wait_for(lambda: f"{instance} line 1" in shaped.kubectl("logs", shaped.pod, "-c", "server").stdout, what="its log")
    assert "metrics line" not in shaped.kubectl("logs", shaped.pod, "-c", "server").stdout
    wait_for(
        lambda: f"{instance} metrics line" in shaped.kubectl("logs", shaped.pod, "-c", "metrics").stdout, what="its log"
    )
    assert shaped.kubectl("exec", shaped.pod, "-c", "server", "--", "test", "-f", "/data/ready").returncode == 1
    cloud.inject({"kind": "file", "instance": instance, "container": "server", "path": "/data/ready"})
    assert shaped.kubectl("exec", shaped.pod, "-c", "server", "--", "test", "-f", "/data/ready").returncode == 0
    wait_for(lambda: shaped.condition("Ready") == "True", what="Ready once the readiness probe passes")
    assert shaped.row()[1:3] == ["2/2", "Running"]

    # A failing liveness probe restarts the metrics container only.
    cloud.inject(
        {"kind": "file", "instance": instance, "container": "metrics", "path": "/data/alive", "present": False}
    )
    killing = "Container metrics failed liveness probe, will be restarted"
    wait_for(lambda: killing in shaped.events(names.EVENT_KILLING), what="the Killing Event")
    cloud.inject({"kind": "file", "instance": instance, "container": "metrics", "path": "/data/alive"})
    wait_for(lambda: shaped.container("metrics").get("restartCount", 0) >= 1, what="metrics restarted")
    assert shaped.container("metrics")["lastState"]["terminated"]["exitCode"] == 143  # dies of SIGTERM
    assert shaped.container("server")["restartCount"] == 0
    wait_for(lambda: shaped.condition("Ready") == "True", what="Ready again")
