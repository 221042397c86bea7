"""status_from_instance(): instance facts to Pod status, a pure table."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kube.times import rfc3339
from providers.base import ClaimName, Instance, InstanceId, InstanceState
from vnode.model import assess
from vnode.model.status import RunView, failed_status, lost_status, status_from_instance
from vnode.model.tracking import Tracked

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def make_pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "busybox"}, {"name": "side", "image": "x"}]},
        "status": status,
    }


def make_instance(state: InstanceState, **overrides: Any) -> Instance:
    values: dict[str, Any] = {
        "id": InstanceId("i-1"),
        "claim": ClaimName("c"),
        "state": state,
        "created_at": NOW - timedelta(minutes=5),
        "started_at": NOW - timedelta(minutes=4),
    }
    values.update(overrides)
    return Instance(**values)


@pytest.mark.parametrize(
    ("state", "exit_code", "phase", "reason", "ready", "container_state"),
    [
        (InstanceState.PROVISIONING, None, "Pending", "Provisioning", "False", "waiting"),
        (InstanceState.INITIALIZING, None, "Pending", "Initializing", "False", "waiting"),
        (InstanceState.RUNNING, None, "Running", "Running", "True", "running"),
        (InstanceState.TERMINATING, None, "Running", "Terminating", "False", "running"),
        (InstanceState.SUCCEEDED, 0, "Succeeded", "Completed", "False", "terminated"),
        (InstanceState.FAILED, 3, "Failed", "Failed", "False", "terminated"),
        (InstanceState.TERMINATED, None, "Failed", "Terminated", "False", "terminated"),
    ],
)
def test_each_instance_state_maps_to_one_pod_status(
    state: InstanceState, exit_code: int | None, phase: str, reason: str, ready: str, container_state: str
) -> None:
    status = status_from_instance(make_pod(), make_instance(state, exit_code=exit_code), now=NOW)
    assert (status["phase"], status["reason"]) == (phase, reason)
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["Ready"] == ready
    assert [list(c["state"]) for c in status["containerStatuses"]] == [[container_state]] * 2
    if exit_code is not None:
        assert status["containerStatuses"][0]["state"]["terminated"]["exitCode"] == exit_code


def test_ready_transition_time_moves_only_when_readiness_changes() -> None:
    first = status_from_instance(make_pod(), make_instance(InstanceState.RUNNING), now=NOW)
    later = NOW + timedelta(minutes=1)
    second = status_from_instance(make_pod(**first), make_instance(InstanceState.RUNNING), now=later)
    assert second["conditions"] == first["conditions"]
    assert second["startTime"] == first["startTime"]
    assert second == first, "an unchanged instance gives an identical status: no API write"


def test_running_container_start_time_is_the_instance_start_not_the_poll_time() -> None:
    status = status_from_instance(make_pod(), make_instance(InstanceState.RUNNING), now=NOW)
    assert status["containerStatuses"][0]["state"]["running"]["startedAt"] == "2026-11-30T11:56:00Z"


def test_an_ip_endpoint_becomes_the_pod_ip_and_a_hostname_does_not() -> None:
    with_ip = status_from_instance(make_pod(), make_instance(InstanceState.RUNNING, endpoint="10.0.0.7"), now=NOW)
    with_name = status_from_instance(make_pod(), make_instance(InstanceState.RUNNING, endpoint="a.example"), now=NOW)
    assert with_ip["podIP"] == "10.0.0.7"
    assert "podIP" not in with_name


def test_lost_and_refused_pods_are_failed_with_their_reason() -> None:
    assert lost_status(make_pod(), now=NOW)["reason"] == "InstanceLost"
    refused = failed_status(make_pod(), reason="ProvisionFailed", message="no capacity", now=NOW)
    assert (refused["phase"], refused["message"]) == ("Failed", "no capacity")


def test_an_exit_is_reported_as_the_kubelet_does_code_reason_and_times() -> None:
    finished = NOW - timedelta(seconds=30)
    done = status_from_instance(
        make_pod(), make_instance(InstanceState.SUCCEEDED, exit_code=0, finished_at=finished), now=NOW
    )
    failed = status_from_instance(
        make_pod(), make_instance(InstanceState.FAILED, exit_code=3, finished_at=finished), now=NOW
    )
    for status, phase, code, reason in ((done, "Succeeded", 0, "Completed"), (failed, "Failed", 3, "Error")):
        terminated = status["containerStatuses"][0]["state"]["terminated"]
        assert status["phase"] == phase
        assert (terminated["exitCode"], terminated["reason"]) == (code, reason)
        assert terminated["finishedAt"] == "2026-11-30T11:59:30Z" and terminated["startedAt"] == "2026-11-30T11:56:00Z"


def test_a_run_that_will_run_again_keeps_the_pod_running_and_waits_in_crash_loop_back_off() -> None:
    last = {"exitCode": 3, "reason": "Error", "finishedAt": "2026-11-30T11:59:00Z"}
    waiting = "back-off 10s restarting failed container=main pod=p_default(u)"
    run = RunView(restarts=2, last=last, again=True, waiting=waiting)
    status = status_from_instance(make_pod(), make_instance(InstanceState.FAILED, exit_code=3), now=NOW, run=run)
    container = status["containerStatuses"][0]
    assert (status["phase"], status["reason"]) == ("Running", "")
    assert container["state"] == {"waiting": {"reason": "CrashLoopBackOff", "message": waiting}}
    assert container["lastState"] == {"terminated": last} and container["restartCount"] == 2
    assert container["ready"] is False
    at_once = status_from_instance(
        make_pod(), make_instance(InstanceState.FAILED, exit_code=3), now=NOW, run=RunView(again=True)
    )
    assert at_once["phase"] == "Running" and "terminated" in at_once["containerStatuses"][0]["state"]


def test_a_running_container_carries_its_restart_count_and_last_termination() -> None:
    last = {"exitCode": 137, "reason": "InstanceLost", "finishedAt": "2026-11-30T11:59:00Z"}
    status = status_from_instance(make_pod(), make_instance(InstanceState.RUNNING), now=NOW, run=RunView(1, last))
    container = status["containerStatuses"][0]
    assert (container["restartCount"], container["lastState"]) == (1, {"terminated": last})


def test_a_status_rebuilt_before_the_watch_returns_our_write_keeps_its_transition_times() -> None:
    """The poll loop may rebuild a Pod's status while the API (and so the entry's copy of the
    Pod) does not show the one just decided: the conditions' lastTransitionTime and startTime
    must stay those decided first, as a kubelet keeps them, or every rebuild in a later second
    writes the same status again (bench/sync.py measured 3-4 status writes for 5% of Pods)."""
    pod = make_pod()
    pod["metadata"]["uid"] = "u1"
    entry = Tracked("default", "p", "u1", ClaimName("c"), pod, instance_id=InstanceId("i-1"))
    running = make_instance(InstanceState.RUNNING)
    assert assess.observe(entry, running, now=NOW)
    first = entry.desired_status
    assert first is not None
    entry.written_status = first  # written; the watch has not brought it back (entry.pod has no status)
    assess.observe(entry, dataclasses.replace(running, message="a later poll"), now=NOW + timedelta(seconds=3))
    assert entry.desired_status is not None
    times = [c["lastTransitionTime"] for c in entry.desired_status["conditions"]]
    assert times == [c["lastTransitionTime"] for c in first["conditions"]] == [rfc3339(NOW)] * 4
    assert entry.desired_status["startTime"] == first["startTime"]
