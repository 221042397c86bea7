"""PodWriter.flush's writes (vnode/podwriter.py): annotations due with a status go in one PATCH of
`pods/status` (the real API server's podStatusStrategy takes a Pod's annotations with it), alone
they are a PATCH of the Pod, and a connect Secret comes before both (a Pod that reads Running has
its Secret); a write that failed leaves both pending, and neither a refused status nor a refused
Secret holds the annotations back. Real HTTP to the embedded API server."""

from __future__ import annotations

from typing import Any, cast

import pytest

from devcluster import DevCluster
from kube import names
from kube.client import Kube, KubeError, path_for
from kube.events import EventRecorder
from kube.worker import Retry
from tests.support.factories import make_pod
from vnode.model.tracking import Tracked, TrackedMap
from vnode.podwriter import PodWriter


def patches(cluster: DevCluster) -> dict[str, int]:
    log = cluster.request_log
    return {
        "pods": log.count(verb="patch", resource="pods", subresource=""),
        "pods/status": log.count(verb="patch", resource="pods", subresource="status"),
    }


def tracked(kube: Kube, name: str) -> tuple[dict[str, Any], Tracked, PodWriter]:
    pod = kube.create(path_for("pods", namespace="default"), make_pod(name, "gpu"))
    return pod, TrackedMap().track(pod), PodWriter(kube, EventRecorder(kube, component="test"), provider="gpu")


def read(kube: Kube, name: str) -> dict[str, Any]:
    return kube.get(path_for("pods", namespace="default", name=name))


def test_annotations_due_with_a_status_are_written_with_it_in_one_write(cluster: DevCluster, kube: Kube) -> None:
    pod, entry, writer = tracked(kube, "together")
    before = patches(cluster)
    entry.desired_annotations[names.INSTANCE_ID_ANNOTATION] = "i-1"
    entry.desired_annotations[names.BILLING_ANNOTATION] = "b"
    entry.desired_status = {"phase": "Running"}
    writer.flush(entry, pod)
    after = patches(cluster)
    assert after["pods/status"] - before["pods/status"] == 1 and after["pods"] == before["pods"]
    written = read(kube, "together")
    assert written["status"]["phase"] == "Running"
    assert written["metadata"]["annotations"][names.INSTANCE_ID_ANNOTATION] == "i-1"
    assert written["metadata"]["annotations"][names.BILLING_ANNOTATION] == "b"
    assert not writer.needs_flush(entry)
    writer.flush(entry, written)  # nothing changed: nothing written
    assert patches(cluster) == after


def test_annotations_alone_are_a_patch_of_the_pod_and_a_connect_secret_comes_before_the_status(
    cluster: DevCluster, kube: Kube
) -> None:
    pod, entry, writer = tracked(kube, "alone")
    entry.desired_annotations[names.INSTANCE_ID_ANNOTATION] = "i-2"
    before = patches(cluster)
    writer.flush(entry, pod)  # no status yet (provisioned, not looked at)
    assert patches(cluster) == {"pods": before["pods"] + 1, "pods/status": before["pods/status"]}
    entry.desired_annotations[names.ENDPOINT_ANNOTATION] = "10.0.0.1"
    entry.credential = {"token": b"t"}
    entry.desired_status = {"phase": "Running"}
    secrets_before = cluster.request_log.count(verb="create", resource="secrets")
    writer.flush(entry, pod)  # the Secret, then the annotations with the status: two writes
    assert patches(cluster) == {"pods": before["pods"] + 1, "pods/status": before["pods/status"] + 1}
    assert cluster.request_log.count(verb="create", resource="secrets") == secrets_before + 1
    written = read(kube, "alone")
    assert written["metadata"]["annotations"][names.ENDPOINT_ANNOTATION] == "10.0.0.1"
    assert written["status"]["phase"] == "Running"
    assert kube.get(path_for("secrets", namespace="default", name=names.connect_secret_name("alone")))
    assert entry.credential is None and not writer.needs_flush(entry)


class RefusingSecrets:
    """The embedded API server, but every Secret create refused (a quota, an admission webhook)."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube

    def create(self, path: str, body: Any, **options: Any) -> Any:
        if "/secrets" in path:
            raise KubeError(403, "Forbidden", "secrets refused")
        return self._kube.create(path, body, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kube, name)


def test_a_refused_connect_secret_holds_back_the_status_but_not_the_instance_annotation(
    cluster: DevCluster, kube: Kube
) -> None:
    pod, entry, _ = tracked(kube, "nosecret")
    writer = PodWriter(cast(Kube, RefusingSecrets(kube)), EventRecorder(kube, component="test"), provider="gpu")
    entry.desired_annotations[names.INSTANCE_ID_ANNOTATION] = "i-3"
    entry.credential = {"token": b"t"}
    entry.desired_status = {"phase": "Running"}
    with pytest.raises(Retry, match="connect Secret write failed"):
        writer.flush(entry, pod)
    written = read(kube, "nosecret")
    assert written["metadata"]["annotations"][names.INSTANCE_ID_ANNOTATION] == "i-3"  # I2: on the Pod
    assert written["status"].get("phase") != "Running"  # not Running without its Secret
    assert entry.credential is not None and writer.needs_flush(entry)  # kept, and retried


def test_a_folded_write_that_failed_leaves_annotations_and_status_pending(cluster: DevCluster, kube: Kube) -> None:
    pod, entry, writer = tracked(kube, "retried")
    entry.desired_annotations[names.BILLING_ANNOTATION] = "b"
    entry.desired_status = {"phase": "Running"}
    cluster.stop()
    with pytest.raises(Retry):
        writer.flush(entry, pod)
    assert entry.written_annotations == {} and entry.written_status is None and writer.needs_flush(entry)


class RefusingStatus:
    """The embedded API server, but every write of `pods/status` refused (`status`: a real
    server's 422 for a status it will not take, the embedded one validating no Pod status; or a
    503 of an API server in trouble)."""

    def __init__(self, kube: Kube, status: int = 422) -> None:
        self._kube = kube
        self._status = status

    def patch(self, path: str, body: Any, **options: Any) -> Any:
        if path.endswith("/status"):
            raise KubeError(self._status, "Invalid" if self._status == 422 else "ServiceUnavailable", "refused")
        return self._kube.patch(path, body, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kube, name)


@pytest.mark.parametrize("refusal", [422, 503])
def test_annotations_do_not_wait_on_a_status_the_api_server_refuses(
    cluster: DevCluster, kube: Kube, refusal: int
) -> None:
    pod, entry, _ = tracked(kube, "refused")
    writer = PodWriter(cast(Kube, RefusingStatus(kube, refusal)), EventRecorder(kube, component="test"), provider="gpu")
    entry.desired_annotations[names.BILLING_ANNOTATION] = "b"
    entry.desired_status = {"phase": "Running"}
    with pytest.raises(Retry, match="status write failed"):
        writer.flush(entry, pod)
    written = read(kube, "refused")
    assert written["metadata"]["annotations"][names.BILLING_ANNOTATION] == "b"  # the billing record landed
    assert written["status"].get("phase") != "Running"
    assert writer.needs_flush(entry)  # the status is still due, and retried
    assert entry.written_annotations[names.BILLING_ANNOTATION] == "b"
