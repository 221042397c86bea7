"""End to end on the devcluster: a pool of [modal, runpod], each provider spoken to only by
its vendor's SDK against a fake of the vendor's API (tests/support/rigs/clouds.py). An
opted-in Pod runs on Modal and kubectl's logs -f and exec (stdin, TTY size and resize, exit
codes) reach it; Modal queueing past the pool's provisioningTimeout sends the replacement
to RunPod; a RunPod spot interruption fails the Pod `Preempted`, blocks the Spot offering it ran on
and replaces it; a restarted manager adopts on both without duplicates; a second cluster on the
same Modal app and RunPod account touches nothing of the first's; no secret reaches a log
or an Event or a console page."""

from __future__ import annotations

import base64
import logging
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from console import models, runtime
from console import observer as console_observer
from console.mirror import Mirror
from console.observer import ConsoleObserver
from devcluster import DevCluster
from kube import names
from kube.client import Kube, path_for
from providers.base import BlockBreadth, InstanceState, Tier
from tests.support.clients.kubectl import KUBECTL_137
from tests.support.clients.terminal import check_exec_tty_resize, on_a_terminal, type_until
from tests.support.factories import make_pod
from tests.support.fixtures import kube_for
from tests.support.polling import wait_for
from tests.support.rigs.clouds import CloudStack, pool, start_cloudstack
from tests.support.rigs.placement import events_for, pods_of, provider_of, tier_of

DEPLOYMENTS = path_for("deployments", namespace="default", group="apps", version="v1")
SECRET_VALUE = "hf_e2e-secret-value-9f3a"  # must reach the workload and nothing else
TICKER = "echo started; i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.5; done"


@pytest.fixture
def observed() -> Iterator[ConsoleObserver]:
    """The console's observer, installed before the manager starts (it sees every Event)."""
    observer = console_observer.install()
    try:
        yield observer
    finally:
        console_observer.uninstall()


@pytest.fixture
def clouds(
    cluster: DevCluster, webhook: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, observed: ConsoleObserver
) -> Iterator[CloudStack]:
    monkeypatch.setenv("MODAL_SANDBOX_V2", "0")  # the fake serves V1 sandboxes, as deploy/components/modal asks
    with start_cloudstack(cluster, tmp_path) as stack:
        yield stack


def deployment(name: str, pool_name: str, script: str = TICKER) -> dict[str, Any]:
    container = {
        "image": "busybox:1.36",
        "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    pod = make_pod(command=("sh", "-c", script), container=container)
    labels = {"app": name, names.ENABLED_LABEL: "true", names.POOL_LABEL: pool_name, names.ACCELERATOR_LABEL: "h100"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": labels}, "spec": pod["spec"]},
        },
    }


def start(clouds: CloudStack, name: str, pool_name: str) -> None:
    secrets = path_for("secrets", namespace="default")
    try:
        clouds.kube.create(secrets, {"metadata": {"name": "hf"}, "stringData": {"token": SECRET_VALUE}})
    except Exception:  # noqa: BLE001 - made by an earlier start in this test
        pass
    clouds.kube.create(DEPLOYMENTS, deployment(name, pool_name))


def running(kube: Kube, app: str) -> dict[str, Any] | None:
    pods = [p for p in pods_of(kube, app) if (p.get("status") or {}).get("phase") == "Running"]
    return pods[0] if len(pods) == 1 else None


def wait_running(clouds: CloudStack, app: str, timeout: float = 120) -> dict[str, Any]:
    pod: dict[str, Any] = wait_for(lambda: running(clouds.kube, app), timeout)
    return pod


def instance_of(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["annotations"][names.INSTANCE_ID_ANNOTATION])


def assert_no_secret(clouds: CloudStack, caplog: pytest.LogCaptureFixture, *, also: tuple[str, ...] = ()) -> None:
    for secret in (SECRET_VALUE, clouds.modal.token_secret, clouds.runpod.api_key, *also):
        assert secret not in caplog.text
        events, _ = clouds.kube.list(path_for("events", namespace="default"))
        assert secret not in repr(events)
        pods, _ = clouds.kube.list(path_for("pods", namespace="default"))
        assert secret not in repr([p["metadata"] for p in pods] + [p.get("status") for p in pods])


def console_pages(clouds: CloudStack, observer: ConsoleObserver) -> dict[str, str]:
    """Every console page and API list, as an operator logged in sees them, once the mirror
    has this manager's Pods and claims."""
    runtime.install(handlers=clouds.handlers(), placement=clouds.placement)
    mirror = Mirror(observer=lambda: observer, interval=0.3)
    mirror.start()
    try:
        wait_for(lambda: models.TrackedPod.objects.filter(phase="Running").exists(), 30)
        wait_for(lambda: models.InstanceClaim.objects.exists(), 30)
        staff = User.objects.create_user("operator", password="pw-operator-12345", is_staff=True, is_superuser=True)
        client = Client()
        client.force_login(staff)
        pages = ["/", "/dashboard/panels", "/readyz"]
        pages += [f"/admin/console/{m}/" for m in ("trackedpod", "instanceclaim", "virtualnode", "recentevent")]
        pages += [f"/admin/console/trackedpod/{p.pk}/change/" for p in models.TrackedPod.objects.all()]
        pages += [f"/admin/console/instanceclaim/{c.pk}/change/" for c in models.InstanceClaim.objects.all()]
        pages += ["/api/pods/", "/api/claims/", "/api/nodes/", "/api/blocklist/", "/api/pools/"]
        bodies = {path: client.get(path).content.decode() for path in pages}
    finally:
        mirror.stop()
        runtime.clear()
    assert "modal" in bodies["/api/claims/"]  # the pages do show this manager's work
    return bodies


def test_a_pod_of_a_modal_runpod_pool_runs_on_modal_and_kubectl_logs_and_exec_reach_it(
    clouds: CloudStack, caplog: pytest.LogCaptureFixture, observed: ConsoleObserver, transactional_db: Any
) -> None:
    caplog.set_level(logging.DEBUG)
    clouds.cluster.apply_manifest(pool("clouds", ["modal", "runpod"], ["OnDemand"]))
    start(clouds, "trainer", "clouds")
    pod = wait_for(lambda: running(clouds.kube, "trainer"), 60)
    assert provider_of(pod) == "modal" and tier_of(pod) == "OnDemand"
    name = pod["metadata"]["name"]
    [sandbox] = clouds.modal.sandboxes()
    assert sandbox["gpu"] == "H100!" and "HF_TOKEN" in sandbox["env_keys"]

    follower = subprocess.Popen([KUBECTL_137, "--kubeconfig", clouds.kubeconfig, "logs", "-f", name],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clouds.env())  # fmt: skip
    try:
        got: list[bytes] = []
        assert follower.stdout is not None
        reader = threading.Thread(target=lambda: got.extend(iter(follower.stdout.readline, b"")), daemon=True)  # type: ignore[union-attr]
        reader.start()
        wait_for(lambda: b"started\n" in got and any(line.startswith(b"tick 3") for line in got), 60)
        assert follower.poll() is None  # still following the running sandbox
    finally:
        follower.kill()
        follower.communicate(timeout=30)

    result = clouds.kubectl("exec", name, "--", "sh", "-c", "echo out; echo err >&2; printenv HF_TOKEN; exit 7")
    assert result.returncode == 7, result.stderr[-500:]
    assert result.stdout == f"out\n{SECRET_VALUE}\n".encode() and result.stderr.startswith(b"err\n")
    piped = clouds.kubectl("exec", "-i", name, "--", "sh", "-c", "tr a-z A-Z", input=b"to modal\n")
    assert piped.returncode == 0 and piped.stdout == b"TO MODAL\n", piped.stderr[-500:]
    # Modal takes a TTY's size when the command starts (33x111 here, not a default 24x80);
    # with no resize call in Modal, a later size goes by a helper exec (providers.modal).
    argv = [KUBECTL_137, "--kubeconfig", clouds.kubeconfig, "exec", "-it", name, "--", "sh"]
    check_exec_tty_resize(argv, clouds.env(), rows=33, cols=111)
    with on_a_terminal(argv, clouds.env()) as (master, session):
        assert b"24 80" in type_until(master, b"stty size\r", b"24 80", retry=True)
        os.write(master, b"exit 3\r")
        assert session.wait(timeout=30) == 3
    connect = clouds.kube.get(path_for("secrets", namespace="default", name=f"{name}-connect"))
    assert set(connect["data"]) >= {"url", "token"}
    token = base64.b64decode(connect["data"]["token"]).decode()
    assert_no_secret(clouds, caplog, also=(token,))
    for path, body in console_pages(clouds, observed).items():
        for secret in (SECRET_VALUE, token, clouds.modal.token_secret, clouds.runpod.api_key):
            assert secret not in body, f"a secret appears in the console's {path}"


def test_modal_queueing_past_the_provisioning_timeout_sends_the_replacement_to_runpod(
    clouds: CloudStack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    clouds.modal.queue(True)  # Modal accepts and never starts the sandbox
    clouds.cluster.apply_manifest(pool("clouds", ["modal", "runpod"], ["OnDemand"], timeout="3s"))
    start(clouds, "queued", "clouds")
    wait_for(lambda: [s for s in clouds.modal.sandboxes() if s["state"] == "pending"], 60)
    pod = wait_for(lambda: running(clouds.kube, "queued"), 120)
    assert provider_of(pod) == "runpod"
    [given_up] = clouds.modal.sandboxes()
    assert given_up["state"] == "terminated"  # not left queued to start (and bill) later
    [entry] = [e for e in clouds.blocklist.entries() if e.scope.provider == "modal"]
    assert entry.scope.breadth is BlockBreadth.OFFERING and "QueuedTooLong" in entry.scope.reason
    assert events_for(clouds.kube, names.REASON_QUEUED_TOO_LONG)
    assert len(clouds.runpod.pods()) == 1
    assert_no_secret(clouds, caplog)


def test_a_runpod_spot_interruption_fails_the_pod_preempted_blocks_its_spot_offering_and_replaces_it(
    clouds: CloudStack,
) -> None:
    clouds.cluster.apply_manifest(pool("spot", ["runpod"], ["Spot", "OnDemand"]))
    start(clouds, "spotty", "spot")
    pod = wait_for(lambda: running(clouds.kube, "spotty"), 120)
    assert provider_of(pod) == "runpod" and tier_of(pod) == "Spot"
    first = pod["metadata"]["name"]
    clouds.runpod.interrupt(instance_of(pod))

    def failed_preempted() -> bool:
        status = clouds.pod_or_none(first)
        return status is None or (status.get("phase"), status.get("reason")) == ("Failed", names.REASON_PREEMPTED)

    wait_for(failed_preempted, 60)
    assert events_for(clouds.kube, names.EVENT_PREEMPTED)
    [entry] = [e for e in clouds.blocklist.entries() if e.scope.provider == "runpod"]
    # The offering it ran on (an interruption's block): RunPod's one region here, so Spot is out.
    assert entry.scope.breadth is BlockBreadth.OFFERING and entry.scope.tier is Tier.SPOT
    replacement = wait_for(lambda: running(clouds.kube, "spotty"), 120)
    assert replacement["metadata"]["name"] != first and tier_of(replacement) == "OnDemand"


def test_a_restarted_manager_adopts_on_both_clouds_without_duplicates(clouds: CloudStack) -> None:
    clouds.cluster.apply_manifest(pool("clouds", ["modal", "runpod"], ["OnDemand"]))
    clouds.cluster.apply_manifest(pool("pods", ["runpod"], ["OnDemand"]))
    start(clouds, "on-modal", "clouds")
    start(clouds, "on-runpod", "pods")
    before = {app: wait_running(clouds, app) for app in ("on-modal", "on-runpod")}
    assert provider_of(before["on-modal"]) == "modal" and provider_of(before["on-runpod"]) == "runpod"
    clouds.restart()
    clouds.polled(3)  # several polls of the new manager
    after = {app: running(clouds.kube, app) for app in before}
    for app, pod in before.items():
        assert after[app] is not None and instance_of(after[app]) == instance_of(pod)  # type: ignore[arg-type]
    assert len(clouds.modal.sandboxes()) == 1 and len(clouds.runpod.pods()) == 1
    live = [i for p in clouds.providers.values() for i in p.list() if i.state is InstanceState.RUNNING]
    assert len(live) == 2


def test_a_second_cluster_on_the_same_modal_app_and_runpod_account_touches_nothing_of_the_first(
    clouds: CloudStack, tmp_path: Path
) -> None:
    clouds.cluster.apply_manifest(pool("clouds", ["modal", "runpod"], ["OnDemand"]))
    clouds.cluster.apply_manifest(pool("pods", ["runpod"], ["OnDemand"]))
    start(clouds, "on-modal", "clouds")
    start(clouds, "on-runpod", "pods")
    ours = {app: instance_of(wait_running(clouds, app)) for app in ("on-modal", "on-runpod")}
    with DevCluster(kubeconfig_path=str(tmp_path / "other.kubeconfig"), scheduler_interval=0.05) as other:
        with clouds.second_manager(other, cluster_name="cluster-b") as theirs:
            kube_b = kube_for(other)
            theirs.polled(3)  # its orphan sweep has seen the shared clouds
            for provider in theirs.providers.values():
                assert provider.list() == []  # the first cluster's instances are not the second's
            other_pod = make_pod(
                "theirs",
                namespace="default",
                command=("sh", "-c", "sleep 600"),
                nodeName="nebula-runpod",
                tolerations=[{"operator": "Exists"}],
            )
            kube_b.create(path_for("pods", namespace="default"), other_pod)
            wait_for(lambda: (kube_b.get(path_for("pods", namespace="default", name="theirs")).get("status") or {})
                     .get("phase") == "Running", 120)  # fmt: skip
    for app, instance in ours.items():
        pod = running(clouds.kube, app)
        assert pod is not None and instance_of(pod) == instance
    assert {i.id for p in clouds.providers.values() for i in p.list()} == set(ours.values())
    assert [s["state"] for s in clouds.modal.sandboxes()] == ["running"]
