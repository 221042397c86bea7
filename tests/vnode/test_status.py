"""status_from_instance(): instance facts to Pod status, a pure table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from providers.base import ClaimName, Instance, InstanceId, InstanceState
from vnode.status import failed_status, lost_status, status_from_instance

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
