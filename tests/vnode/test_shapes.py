"""A Pod bound by hand to a node whose provider cannot serve its shape fails at `create_pod`
with `UnsupportedPodSpec`, naming the field, and nothing is provisioned (design I9); the
service-account token volume is said in an Event and does not stop the Pod."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

from devcluster import DevCluster
from kube import names
from kube.client import Kube, path_for
from providers.fake import FakeProvider
from tests.support.clients.kubectl import KUBECTL_137
from tests.support.factories import make_pod
from tests.support.pods import get_pod, phase_of
from tests.support.polling import wait_for
from vnode.runner import Runner

PODS = path_for("pods", namespace="default")
CLAIM_VOLUME = {"name": "data", "persistentVolumeClaim": {"claimName": "weights"}}


def events_of(kube: Kube, pod: str, reason: str) -> list[str]:
    items, _ = kube.list(path_for("events", namespace="default"))
    return [e["message"] for e in items if e["involvedObject"]["name"] == pod and e.get("reason") == reason]


def test_I9_a_bound_pod_the_provider_cannot_serve_fails_naming_the_field(
    cluster: DevCluster, kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    start_runner(provider)
    kube.create(PODS, make_pod("claimed", "gpu", volumes=[CLAIM_VOLUME]))
    wait_for(lambda: phase_of(kube, "claimed") == "Failed")
    status = (get_pod(kube, "claimed") or {})["status"]
    message = "provider 'gpu' cannot serve spec.volumes[0].persistentVolumeClaim (persistentVolumeClaim volumes)"
    assert (status["reason"], status["message"]) == (names.REASON_UNSUPPORTED_POD_SPEC, message)
    assert status["containerStatuses"][0]["state"] == {
        "waiting": {"reason": names.REASON_UNSUPPORTED_POD_SPEC, "message": message}
    }
    wait_for(lambda: events_of(kube, "claimed", names.REASON_UNSUPPORTED_POD_SPEC) == [message])
    assert provider.cloud.call_log("provision") == []  # nothing ran, in part or at all
    assert cluster.kubeconfig_path is not None
    shown = subprocess.run(
        [KUBECTL_137, "--kubeconfig", cluster.kubeconfig_path, "get", "pod", "claimed", "--no-headers"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.split()  # fmt: skip
    assert shown[1:3] == ["0/1", names.REASON_UNSUPPORTED_POD_SPEC]


def test_the_service_account_volume_is_said_in_an_event_and_the_pod_runs(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    start_runner(FakeProvider("gpu", {"cloud": cloud_name}))
    token = {"name": "kube-api-access-q2x9z", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
    kube.create(PODS, make_pod("tokened", "gpu", volumes=[token]))
    wait_for(lambda: phase_of(kube, "tokened") == "Running")
    wait_for(
        lambda: events_of(kube, "tokened", names.REASON_UNSUPPORTED_POD_SPEC)
        == ["spec.volumes[0]: the service account token (not mounted on external compute)"]
    )
