"""Deployment and ReplicaSet Table rows as kube-apiserver prints them, and the status counts and
conditions the apps controllers derive from their ReplicaSets and Pods (pure functions)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from devcluster import appstatus, tables
from devcluster.scale import selector_string

NOW = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)
T0 = "2026-01-01T00:00:00Z"


def workload(kind: str, replicas: int, status: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": kind,
        "metadata": {"name": "web", "creationTimestamp": T0, "generation": 2},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "a", "image": "x:1"}, {"name": "b", "image": "y:2"}]},
            },
        },
        "status": status,
    }


def row(kind: str, obj: dict[str, Any]) -> tuple[list[str], list[Any]]:
    table = tables.to_table(kind, [obj], resource_version="1", now=NOW)
    return [c["name"] for c in table["columnDefinitions"]], table["rows"][0]["cells"]


def test_kubectl_get_deploy_and_rs_show_the_real_columns() -> None:
    names, cells = row("Deployment", workload("Deployment", 3, {"readyReplicas": 2, "updatedReplicas": 3}))
    assert names == ["Name", "Ready", "Up-to-date", "Available", "Age", "Containers", "Images", "Selector"]
    assert cells == ["web", "2/3", 3, 0, "10m", "a,b", "x:1,y:2", "app=web"]
    names, cells = row("ReplicaSet", workload("ReplicaSet", 3, {"replicas": 3, "readyReplicas": 1}))
    assert names == ["Name", "Desired", "Current", "Ready", "Age", "Containers", "Images", "Selector"]
    assert cells == ["web", 3, 3, 1, "10m", "a,b", "x:1,y:2", "app=web"]


@pytest.mark.parametrize(
    ("selector", "text"),
    [
        ({"matchLabels": {"b": "2", "a": "1"}}, "a=1,b=2"),
        (
            {
                "matchExpressions": [
                    {"key": "z", "operator": "In", "values": ["y", "x"]},
                    {"key": "k", "operator": "Exists"},
                ]
            },
            "k,z in (x,y)",
        ),
        ({"matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["a"]}]}, "t notin (a)"),
        ({"matchExpressions": [{"key": "gone", "operator": "DoesNotExist"}]}, "!gone"),
        ({}, ""),
    ],
)
def test_selector_string_is_labels_selector_string(selector: dict[str, Any], text: str) -> None:
    assert selector_string(selector) == text


def pod(ready: bool) -> dict[str, Any]:
    condition = {"type": "Ready", "status": "True" if ready else "False"}
    return {"metadata": {"labels": {"app": "web"}}, "status": {"phase": "Running", "conditions": [condition]}}


def test_deployment_status_counts_follow_ready_pods() -> None:
    replicaset = workload("ReplicaSet", 3, {})
    rs_status = appstatus.replicaset_status(replicaset, [pod(True), pod(False), pod(True)])
    assert rs_status == {
        "replicas": 3,
        "fullyLabeledReplicas": 3,
        "readyReplicas": 2,
        "availableReplicas": 2,
        "observedGeneration": 2,
    }
    current = {**replicaset, "metadata": {"name": "web-abc"}, "status": rs_status}
    deployment = workload("Deployment", 3, {})
    status = appstatus.deployment_status(deployment, current, [current], now=T0)
    assert {k: v for k, v in status.items() if k != "conditions"} == {
        "observedGeneration": 2,
        "replicas": 3,
        "updatedReplicas": 3,
        "readyReplicas": 2,
        "availableReplicas": 2,
        "unavailableReplicas": 1,
    }
    available, progressing = status["conditions"]
    assert (available["type"], available["status"], available["reason"]) == (
        "Available",
        "False",
        "MinimumReplicasUnavailable",
    )
    assert (progressing["reason"], progressing["message"]) == (
        "ReplicaSetUpdated",
        'ReplicaSet "web-abc" is progressing.',
    )
    done = {**current, "status": {**rs_status, "readyReplicas": 3, "availableReplicas": 3}}
    later = appstatus.deployment_status({**deployment, "status": status}, done, [done], now="2026-01-01T00:05:00Z")
    available, progressing = later["conditions"]
    assert (available["status"], available["reason"], available["lastTransitionTime"]) == (
        "True",
        "MinimumReplicasAvailable",
        "2026-01-01T00:05:00Z",
    )
    assert progressing["reason"] == "NewReplicaSetAvailable"
    assert progressing["lastTransitionTime"] == T0  # still True: the transition time is kept
    assert "unavailableReplicas" not in later
