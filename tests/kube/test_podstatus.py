"""kube.podstatus: STATUS, READY, RESTARTS and AGE as kubectl's printPod computes them, one
case per rule of the printer (phase, Pod reason, gate, init containers, sidecars, waiting and
terminated reasons, Completed with a running container, Terminating, NodeLost)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kube import podstatus

NOW = datetime(2026, 12, 5, 7, 4, 12, tzinfo=UTC)


def running(ready: bool = True, restarts: int = 0, name: str = "main") -> dict[str, Any]:
    return {"name": name, "ready": ready, "restartCount": restarts, "state": {"running": {"startedAt": "x"}}}


def waiting(reason: str, restarts: int = 0, name: str = "main", finished: str = "") -> dict[str, Any]:
    status: dict[str, Any] = {
        "name": name,
        "ready": False,
        "restartCount": restarts,
        "state": {"waiting": {"reason": reason}},
    }
    if finished:
        status["lastState"] = {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": finished}}
    return status


def terminated(code: int, reason: str = "", signal: int = 0, name: str = "main") -> dict[str, Any]:
    state: dict[str, Any] = {"exitCode": code}
    if reason:
        state["reason"] = reason
    if signal:
        state["signal"] = signal
    return {"name": name, "ready": False, "restartCount": 0, "state": {"terminated": state}}


def pod(phase: str, containers: list[dict[str, Any]] | None = None, **more: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": c["name"]} for c in containers or [{"name": "main"}]]}
    spec.update(more.pop("spec", {}))
    status: dict[str, Any] = {"phase": phase, **more.pop("status", {})}
    if containers is not None:
        status["containerStatuses"] = containers
    return {"metadata": {"name": "p", **more.pop("metadata", {})}, "spec": spec, "status": status}


CASES: list[tuple[str, dict[str, Any], str, str, int]] = [
    ("a phase alone", pod("Pending"), "Pending", "0/1", 0),
    ("a running ready container", pod("Running", [running()]), "Running", "1/1", 0),
    ("the Pod's own reason wins over the phase", pod("Failed", status={"reason": "Evicted"}), "Evicted", "0/1", 0),
    (
        "a scheduling gate (the PodScheduled condition)",
        pod(
            "Pending", status={"conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}
        ),
        "SchedulingGated",
        "0/1",
        0,
    ),
    (
        "CrashLoopBackOff with its restarts",
        pod("Running", [waiting("CrashLoopBackOff", 5)]),
        "CrashLoopBackOff",
        "0/1",
        5,
    ),
    ("ErrImagePull", pod("Pending", [waiting("ErrImagePull")]), "ErrImagePull", "0/1", 0),
    ("ContainerCreating", pod("Pending", [waiting("ContainerCreating")]), "ContainerCreating", "0/1", 0),
    ("Completed", pod("Succeeded", [terminated(0, "Completed")]), "Completed", "0/1", 0),
    ("Error", pod("Failed", [terminated(1, "Error")]), "Error", "0/1", 0),
    ("a signal without a reason", pod("Failed", [terminated(137, signal=9)]), "Signal:9", "0/1", 0),
    ("an exit code without a reason", pod("Failed", [terminated(3)]), "ExitCode:3", "0/1", 0),
    (
        "the first container's state is the one shown (kubectl walks them backwards)",
        pod("Running", [waiting("CrashLoopBackOff", 2, name="a"), running(name="b")]),
        "CrashLoopBackOff",
        "1/2",
        2,
    ),
    (
        "Completed with a container still running reads Running when the Pod is Ready",
        pod(
            "Running",
            [terminated(0, "Completed", name="a"), running(name="b")],
            status={"conditions": [{"type": "Ready", "status": "True"}]},
        ),
        "Running",
        "1/2",
        0,
    ),
    (
        "... and NotReady when it is not",
        pod("Running", [terminated(0, "Completed", name="a"), running(name="b")]),
        "NotReady",
        "1/2",
        0,
    ),
    (
        "Terminating while being deleted",
        pod("Running", [running()], metadata={"deletionTimestamp": "2026-12-05T07:00:00Z"}),
        "Terminating",
        "1/1",
        0,
    ),
    (
        "a deleted Pod that finished keeps its word",
        pod("Succeeded", [terminated(0, "Completed")], metadata={"deletionTimestamp": "2026-12-05T07:00:00Z"}),
        "Completed",
        "0/1",
        0,
    ),
    (
        "Unknown for a deleted Pod of a lost node",
        pod("Running", [running()], status={"reason": "NodeLost"}, metadata={"deletionTimestamp": "x"}),
        "Unknown",
        "1/1",
        0,
    ),
]

INIT = {"initContainers": [{"name": "init"}]}
SIDECAR = {"initContainers": [{"name": "proxy", "restartPolicy": "Always"}]}
INIT_CASES: list[tuple[str, dict[str, Any], str, str, int]] = [
    (
        "Init:0/1 while the init container runs",
        pod(
            "Pending",
            [waiting("PodInitializing")],
            spec=INIT,
            status={"initContainerStatuses": [running(False, name="init")]},
        ),
        "Init:0/1",
        "0/1",
        0,
    ),
    (
        "Init:CrashLoopBackOff with the init container's restarts",
        pod(
            "Pending",
            [waiting("PodInitializing")],
            spec=INIT,
            status={"initContainerStatuses": [waiting("CrashLoopBackOff", 3, name="init")]},
        ),
        "Init:CrashLoopBackOff",
        "0/1",
        3,
    ),
    (
        "Init:Error",
        pod(
            "Failed",
            [waiting("PodInitializing")],
            spec=INIT,
            status={"initContainerStatuses": [terminated(1, "Error", name="init")]},
        ),
        "Init:Error",
        "0/1",
        0,
    ),
    (
        "Init:ExitCode:2 without a reason",
        pod(
            "Failed",
            [waiting("PodInitializing")],
            spec=INIT,
            status={"initContainerStatuses": [terminated(2, name="init")]},
        ),
        "Init:ExitCode:2",
        "0/1",
        0,
    ),
    (
        "a finished init container lets the containers speak",
        pod(
            "Running",
            [running()],
            spec=INIT,
            status={
                "initContainerStatuses": [terminated(0, "Completed", name="init")],
                "conditions": [{"type": "Initialized", "status": "True"}],
            },
        ),
        "Running",
        "1/1",
        0,
    ),
    (
        "a started sidecar counts as a container, ready, with its restarts",
        pod(
            "Running",
            [running()],
            spec=SIDECAR,
            status={
                "initContainerStatuses": [dict(running(name="proxy", restarts=2), started=True)],
                "conditions": [{"type": "Initialized", "status": "True"}],
            },
        ),
        "Running",
        "2/2",
        2,
    ),
]


@pytest.mark.parametrize(
    ("case", "obj", "status", "ready", "restarts"), CASES + INIT_CASES, ids=lambda v: v if isinstance(v, str) else ""
)
def test_status_as_kubectl_prints_it(case: str, obj: dict[str, Any], status: str, ready: str, restarts: int) -> None:
    summary = podstatus.summarize(obj)
    assert (summary.status, summary.ready_text, summary.restarts) == (status, ready, restarts), case


def test_restarts_read_with_the_time_since_the_last_one() -> None:
    finished = (NOW - timedelta(seconds=75)).strftime("%Y-%m-%dT%H:%M:%SZ")
    summary = podstatus.summarize(pod("Running", [waiting("CrashLoopBackOff", 4, finished=finished)]))
    assert summary.restarts_text(NOW) == "4 (75s ago)"
    assert podstatus.summarize(pod("Running", [running()])).restarts_text(NOW) == "0"


def test_a_malformed_pod_reads_as_kubectl_reads_it() -> None:
    assert podstatus.summarize({}) == podstatus.PodSummary("", 0, 0, 0, None)
    assert podstatus.created_at({"metadata": {"creationTimestamp": "not a time"}}) is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(-5, "<invalid>"), (-0.5, "0s"), (5, "5s"), (119, "119s"), (182, "3m2s"), (900, "15m"), (5 * 3600 + 180, "5h3m"),
     (30 * 3600, "30h"), (51 * 3600, "2d3h"), (400 * 86400, "400d"), (3 * 365 * 86400 + 20 * 86400, "3y20d")],
)  # fmt: skip
def test_ages_as_kubectl_prints_them(seconds: float, text: str) -> None:
    assert podstatus.human_duration(seconds) == text
    assert podstatus.age(NOW - timedelta(seconds=seconds), NOW) == text
    assert podstatus.age(None, NOW) == "<unknown>"
