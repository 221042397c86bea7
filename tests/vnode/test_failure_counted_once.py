"""The "failed" cause is counted once per Pod (vnode/podwriter.py): a stop writes `Failed` at
once and again with its containers' ends, often before the watch brings the first write back,
and `nebula_workload_failures_total` must still count one failure; an interruption is never
counted as a failure."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kube import names, observe
from kube.client import Kube, path_for
from kube.events import EventRecorder
from tests.support.factories import make_pod
from vnode.model.tracking import TrackedMap
from vnode.podwriter import PodWriter


class Failures(observe.NullObserver):
    def __init__(self) -> None:
        self.told: list[tuple[str, str, str]] = []

    def workload_failed(self, provider: str, reason: str, subject: observe.Subject) -> None:
        self.told.append((provider, reason, subject.pod))


@pytest.fixture
def failures() -> Iterator[Failures]:
    kept = Failures()
    observe.install(kept)
    try:
        yield kept
    finally:
        observe.install(None)


def failed(reason: str, exit_code: int | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Failed", "reason": reason, "message": "m"}
    if exit_code is not None:
        terminated = {"exitCode": exit_code, "reason": "Error"}
        status["containerStatuses"] = [{"name": "main", "ready": False, "state": {"terminated": terminated}}]
    return status


@pytest.mark.parametrize(("reason", "counted"), [("DeadlineExceeded", 1), (names.REASON_SPOT_INTERRUPTED, 0)])
def test_a_pod_written_failed_twice_before_the_watch_catches_up_is_one_failure(
    kube: Kube, failures: Failures, reason: str, counted: int
) -> None:
    pod = kube.create(path_for("pods", namespace="default"), make_pod("twice", "gpu"))
    entry = TrackedMap().track(pod)
    writer = PodWriter(kube, EventRecorder(kube, component="test"), provider="gpu")
    running = {**pod, "status": {"phase": "Running"}}  # what the Pod cache still shows

    entry.desired_status = failed(reason)  # Failed at once, as the stop begins
    writer.flush(entry, running)
    entry.desired_status = failed(reason, exit_code=143)  # then the containers' ends
    writer.flush(entry, running)

    assert kube.get(path_for("pods", namespace="default", name="twice"))["status"]["phase"] == "Failed"
    assert failures.told == [("gpu", reason, "default/twice")] * counted
