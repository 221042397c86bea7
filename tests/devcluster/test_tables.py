"""Server-side Tables: kubectl's columns and cells per kind, ages, and the row object modes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from devcluster import durations, tables
from tests.support.factories import make_node, make_pod

NOW = datetime(2026, 1, 10, 12, 0, 0, tzinfo=UTC)


def ago(**delta: float) -> str:
    return (NOW - timedelta(**delta)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (5, "5s"),
        (119, "119s"),
        (120, "2m"),
        (182, "3m2s"),
        (300, "5m"),
        (599, "9m59s"),
        (600, "10m"),
        (179 * 60 + 59, "179m"),
        (3 * 3600, "3h"),
        (5 * 3600 + 3 * 60, "5h3m"),
        (8 * 3600, "8h"),
        (47 * 3600, "47h"),
        (2 * 86400 + 3 * 3600, "2d3h"),
        (3 * 86400, "3d"),
        (8 * 86400, "8d"),
        (400 * 86400, "400d"),
        (2 * 365 * 86400, "2y"),
        (3 * 365 * 86400 + 20 * 86400, "3y20d"),
        (9 * 365 * 86400 + 20 * 86400, "9y"),
    ],
)
def test_human_duration_matches_kubectl(seconds: float, expected: str) -> None:
    assert durations.human_duration(seconds) == expected


@pytest.mark.parametrize(
    ("timestamp", "age"), [(None, "<unknown>"), ("yesterday", "<unknown>"), (ago(seconds=65), "65s")]
)
def test_age_of_missing_or_bad_timestamps_is_unknown(timestamp: str | None, age: str) -> None:
    assert durations.age(timestamp, NOW) == age


def _cells(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    table = tables.to_table(kind, [obj], resource_version="7", now=NOW)
    names = [column["name"] for column in table["columnDefinitions"]]
    return dict(zip(names, table["rows"][0]["cells"], strict=True))


def table_pod(
    *, metadata: dict[str, Any] | None = None, spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Pod p1 of `default`, 5 minutes old, Pending, with containers `main` and `side`; each
    keyword merges into that part."""
    return make_pod(
        namespace="default",
        metadata={"creationTimestamp": ago(minutes=5), **(metadata or {})},
        spec={"containers": [{"name": "main"}, {"name": "side"}], **(spec or {})},
        status={"phase": "Pending", **(status or {})},
    )


def _running(ready: bool = True, restarts: int = 0) -> dict[str, Any]:
    return {"name": "c", "ready": ready, "restartCount": restarts, "state": {"running": {"startedAt": ago(minutes=4)}}}


@pytest.mark.parametrize(
    ("pod", "ready", "status", "restarts"),
    [
        pytest.param(table_pod(), "0/2", "Pending", "0", id="pending"),
        pytest.param(
            table_pod(status={"phase": "Running", "containerStatuses": [_running(), _running()]}),
            "2/2",
            "Running",
            "0",
            id="running",
        ),
        pytest.param(
            table_pod(status={"phase": "Running", "containerStatuses": [_running(), _running(ready=False)]}),
            "1/2",
            "Running",
            "0",
            id="one-not-ready",
        ),
        pytest.param(
            table_pod(
                status={
                    "phase": "Pending",
                    "containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "ContainerCreating"}}}],
                }
            ),
            "0/2",
            "ContainerCreating",
            "0",
            id="waiting-reason",
        ),
        pytest.param(
            table_pod(
                status={
                    "phase": "Running",
                    "containerStatuses": [
                        {
                            "name": "c",
                            "restartCount": 3,
                            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                            "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(seconds=30)}},
                        }
                    ],
                }
            ),
            "0/2",
            "CrashLoopBackOff",
            "3 (30s ago)",
            id="crashloop-with-last-restart",
        ),
        pytest.param(
            table_pod(status={"phase": "Failed", "containerStatuses": [{"state": {"terminated": {"exitCode": 3}}}]}),
            "0/2",
            "ExitCode:3",
            "0",
            id="exit-code",
        ),
        pytest.param(
            table_pod(
                status={"phase": "Succeeded", "containerStatuses": [{"state": {"terminated": {"reason": "Completed"}}}]}
            ),
            "0/2",
            "Completed",
            "0",
            id="completed",
        ),
        pytest.param(
            table_pod(status={"phase": "Failed", "reason": "Evicted"}), "0/2", "Evicted", "0", id="status-reason"
        ),
        pytest.param(
            table_pod(spec={"schedulingGates": [{"name": "nebula.io/placement"}]}),
            "0/2",
            "SchedulingGated",
            "0",
            id="scheduling-gates",
        ),
        pytest.param(
            table_pod(
                status={"phase": "Pending", "conditions": [{"type": "PodScheduled", "reason": "SchedulingGated"}]}
            ),
            "0/2",
            "SchedulingGated",
            "0",
            id="scheduling-gated-condition",
        ),
        pytest.param(
            table_pod(
                metadata={"deletionTimestamp": ago(seconds=1)},
                status={"phase": "Running", "containerStatuses": [_running()]},
            ),
            "1/2",
            "Terminating",
            "0",
            id="terminating",
        ),
        pytest.param(
            table_pod(metadata={"deletionTimestamp": ago(seconds=1)}, status={"phase": "Succeeded"}),
            "0/2",
            "Succeeded",
            "0",
            id="deleted-after-finishing",
        ),
        pytest.param(
            table_pod(
                spec={"initContainers": [{"name": "i1"}, {"name": "i2"}]},
                status={
                    "phase": "Pending",
                    "initContainerStatuses": [
                        {"state": {"terminated": {"exitCode": 0}}},
                        {"state": {"running": {}}},
                    ],
                },
            ),
            "0/2",
            "Init:1/2",
            "0",
            id="init-progress",
        ),
        pytest.param(
            table_pod(
                spec={"initContainers": [{"name": "i1"}]},
                status={
                    "phase": "Pending",
                    "initContainerStatuses": [{"state": {"waiting": {"reason": "ErrImagePull"}}}],
                },
            ),
            "0/2",
            "Init:ErrImagePull",
            "0",
            id="init-waiting",
        ),
        pytest.param(
            table_pod(
                spec={"initContainers": [{"name": "proxy", "restartPolicy": "Always"}, {"name": "setup"}]},
                status={
                    "phase": "Pending",
                    "initContainerStatuses": [
                        {"name": "proxy", "started": True, "ready": True, "state": {"running": {}}},
                        {"name": "setup", "state": {"running": {}}},
                    ],
                },
            ),
            "1/3",
            "Init:1/2",
            "0",
            id="a-started-sidecar-counts-and-never-holds-init",
        ),
        pytest.param(
            table_pod(
                spec={"initContainers": [{"name": "proxy", "restartPolicy": "Always"}]},
                status={
                    "phase": "Running",
                    "conditions": [{"type": "Initialized", "status": "True"}],
                    "initContainerStatuses": [
                        {"name": "proxy", "started": True, "ready": False, "state": {"running": {}}}
                    ],
                    "containerStatuses": [_running()],
                },
            ),
            "1/3",
            "Running",
            "0",
            id="an-unready-sidecar-is-not-counted-ready",
        ),
    ],
)
def test_pod_rows_follow_kubectl_print_pod(pod: dict[str, Any], ready: str, status: str, restarts: str) -> None:
    cells = _cells("Pod", pod)
    assert (cells["Name"], cells["Ready"], cells["Status"], cells["Restarts"], cells["Age"]) == (
        "p1",
        ready,
        status,
        restarts,
        "5m",
    )


def test_pod_wide_cells() -> None:
    pod = table_pod(
        spec={"nodeName": "n1", "readinessGates": [{"conditionType": "x/ok"}, {"conditionType": "x/other"}]},
        status={"podIPs": [{"ip": "10.1.0.5"}], "conditions": [{"type": "x/ok", "status": "True"}]},
    )
    cells = _cells("Pod", pod)
    assert (cells["IP"], cells["Node"], cells["Nominated Node"], cells["Readiness Gates"]) == (
        "10.1.0.5",
        "n1",
        "<none>",
        "1/2",
    )
    bare = _cells("Pod", table_pod())
    assert (bare["IP"], bare["Node"], bare["Readiness Gates"]) == ("<none>", "<none>", "<none>")


def test_pod_columns_mark_wide_ones_priority_one_and_name_as_name() -> None:
    table = tables.to_table("Pod", [], resource_version="42", now=NOW)
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert table["metadata"] == {"resourceVersion": "42"} and table["rows"] == []
    columns = [(c["name"], c["priority"]) for c in table["columnDefinitions"]]
    assert columns == [
        ("Name", 0),
        ("Ready", 0),
        ("Status", 0),
        ("Restarts", 0),
        ("Age", 0),
        ("IP", 1),
        ("Node", 1),
        ("Nominated Node", 1),
        ("Readiness Gates", 1),
    ]
    assert table["columnDefinitions"][0]["format"] == "name"


def table_node(
    *, metadata: dict[str, Any] | None = None, spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Node n1, 2 days 3 hours old, Ready, with a kubelet version and a hostname and internal IP;
    each keyword merges into that part."""
    addresses = [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.2"}]
    return make_node(
        "n1",
        metadata={"creationTimestamp": ago(days=2, hours=3), **(metadata or {})},
        status={"nodeInfo": {"kubeletVersion": "v1.32.0-nebula"}, "addresses": addresses, **(status or {})},
        **(spec or {}),
    )


@pytest.mark.parametrize(
    ("node", "status", "roles"),
    [
        (table_node(), "Ready", "<none>"),
        (table_node(status={"conditions": [{"type": "Ready", "status": "False"}]}), "NotReady", "<none>"),
        (table_node(status={"conditions": []}), "Unknown", "<none>"),
        (table_node(spec={"unschedulable": True}), "Ready,SchedulingDisabled", "<none>"),
        (
            table_node(
                metadata={
                    "labels": {
                        "node-role.kubernetes.io/agent": "",
                        "node-role.kubernetes.io/gpu": "",
                        "kubernetes.io/role": "virtual",
                    }
                }
            ),
            "Ready",
            "agent,gpu,virtual",
        ),
    ],
)
def test_node_rows_follow_kubectl_print_node(node: dict[str, Any], status: str, roles: str) -> None:
    cells = _cells("Node", node)
    assert (cells["Name"], cells["Status"], cells["Roles"], cells["Age"], cells["Version"]) == (
        "n1",
        status,
        roles,
        "2d3h",
        "v1.32.0-nebula",
    )
    assert cells["Internal-IP"] == "10.0.0.2" and cells["External-IP"] == "<none>"
    assert cells["OS-Image"] == "<unknown>"


def test_core_event_rows() -> None:
    event = {
        "metadata": {"name": "p1.17a", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "p1", "fieldPath": "spec.containers{main}"},
        "reason": "FailedScheduling",
        "message": "0/1 nodes are available.\n",
        "type": "Warning",
        "firstTimestamp": ago(minutes=10),
        "lastTimestamp": ago(seconds=30),
        "count": 4,
        "source": {"component": "default-scheduler"},
    }
    cells = _cells("Event", event)
    assert cells == {
        "Last Seen": "30s",
        "Type": "Warning",
        "Reason": "FailedScheduling",
        "Object": "pod/p1",
        "Subobject": "spec.containers{main}",
        "Source": "default-scheduler",
        "Message": "0/1 nodes are available.",
        "First Seen": "10m",
        "Count": 4,
        "Name": "p1.17a",
    }


def test_events_k8s_io_event_rows_use_their_own_field_names() -> None:
    event = {
        "metadata": {"name": "e1"},
        "regarding": {"kind": "Node", "name": "n1"},
        "note": "registered",
        "reason": "Registered",
        "type": "Normal",
        "eventTime": ago(seconds=90),
        "reportingController": "nebula/vnode",
        "reportingInstance": "vnode-1",
    }
    cells = _cells("Event", event)
    assert (cells["Last Seen"], cells["Object"], cells["Message"], cells["Count"]) == (
        "90s",
        "node/n1",
        "registered",
        1,
    )
    assert cells["Source"] == "nebula/vnode, vnode-1"


@pytest.mark.parametrize(
    ("kind", "obj", "expected"),
    [
        (
            "Namespace",
            {"metadata": {"name": "ns", "creationTimestamp": ago(hours=5)}, "status": {"phase": "Active"}},
            ["ns", "Active", "5h"],
        ),
        (
            "Secret",
            {
                "metadata": {"name": "s", "creationTimestamp": ago(seconds=3)},
                "type": "Opaque",
                "data": {"a": "", "b": ""},
            },
            ["s", "Opaque", 2, "3s"],
        ),
        (
            "ConfigMap",
            {"metadata": {"name": "c", "creationTimestamp": ago(days=9)}, "data": {"a": "1"}},
            ["c", 1, "9d"],
        ),
        (
            "Lease",
            {"metadata": {"name": "n1", "creationTimestamp": ago(seconds=7)}, "spec": {"holderIdentity": "n1"}},
            ["n1", "n1", "7s"],
        ),
        ("NodePool", {"metadata": {"name": "np1", "creationTimestamp": ago(minutes=3, seconds=2)}}, ["np1", "3m2s"]),
        ("NodePool", {"metadata": {"name": "np2"}}, ["np2", "<unknown>"]),
    ],
)
def test_other_kinds_and_the_default_columns(kind: str, obj: dict[str, Any], expected: list[Any]) -> None:
    table = tables.to_table(kind, [obj], resource_version="1", now=NOW)
    assert table["rows"][0]["cells"] == expected
    assert len(table["columnDefinitions"]) == len(expected)


def test_row_object_modes() -> None:
    pod = table_pod(metadata={"labels": {"app": "demo"}})
    metadata_row = tables.to_table("Pod", [pod], resource_version="1", now=NOW)["rows"][0]
    assert metadata_row["object"] == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": pod["metadata"],
    }
    object_row = tables.to_table("Pod", [pod], resource_version="1", include_object="Object", now=NOW)["rows"][0]
    assert object_row["object"] == pod
    none_row = tables.to_table("Pod", [pod], resource_version="1", include_object="None", now=NOW)["rows"][0]
    assert "object" not in none_row


def test_default_clock_is_now() -> None:
    fresh = {"metadata": {"name": "x", "creationTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}}
    cell = tables.to_table("ConfigMap", [fresh], resource_version="1")["rows"][0]["cells"][-1]
    assert cell.endswith("s") and 0 <= int(cell[:-1]) < 60
