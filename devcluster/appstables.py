"""Server-side Table rows for the apps kinds: Deployment (NAME READY UP-TO-DATE AVAILABLE AGE)
and ReplicaSet (NAME DESIRED CURRENT READY AGE), each with CONTAINERS IMAGES SELECTOR at
priority 1 (`-o wide`), as kube-apiserver's printDeployment and printReplicaSet write them.

`tables.py` registers `DEPLOYMENT` and `REPLICASET` in its printer map. Pure: the clock is a parameter.
Tests: tests/devcluster/test_apps_tables.py::test_kubectl_get_deploy_and_rs_show_the_real_columns.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from devcluster.durations import age
from devcluster.scale import selector_string

Row = list[Any]
Column = tuple[str, str, int]  # name, type, priority
Printer = tuple[list[Column], Callable[[dict[str, Any], datetime], Row]]
_S, _I = "string", "integer"
_WIDE: list[Column] = [("Containers", _S, 1), ("Images", _S, 1), ("Selector", _S, 1)]


def _wide(spec: dict[str, Any]) -> Row:
    """layoutContainerCells: container names and images, comma-joined; then the selector."""
    containers = [c for c in ((spec.get("template") or {}).get("spec") or {}).get("containers") or [] if c]
    names = ",".join(str(c.get("name", "")) for c in containers)
    images = ",".join(str(c.get("image", "")) for c in containers)
    return [names, images, selector_string(spec.get("selector"))]


def _parts(obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    return obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}


def _print_deployment(deployment: dict[str, Any], now: datetime) -> Row:
    meta, spec, status = _parts(deployment)
    desired, ready = int(spec.get("replicas", 1)), int(status.get("readyReplicas", 0))
    return [
        meta.get("name", ""),
        f"{ready}/{desired}",
        int(status.get("updatedReplicas", 0)),
        int(status.get("availableReplicas", 0)),
        age(meta.get("creationTimestamp"), now),
        *_wide(spec),
    ]


def _print_replicaset(replicaset: dict[str, Any], now: datetime) -> Row:
    meta, spec, status = _parts(replicaset)
    return [
        meta.get("name", ""),
        int(spec.get("replicas", 1)),
        int(status.get("replicas", 0)),
        int(status.get("readyReplicas", 0)),
        age(meta.get("creationTimestamp"), now),
        *_wide(spec),
    ]


DEPLOYMENT: Printer = (
    [("Name", _S, 0), ("Ready", _S, 0), ("Up-to-date", _I, 0), ("Available", _I, 0), ("Age", _S, 0), *_WIDE],
    _print_deployment,
)
REPLICASET: Printer = (
    [("Name", _S, 0), ("Desired", _I, 0), ("Current", _I, 0), ("Ready", _I, 0), ("Age", _S, 0), *_WIDE],
    _print_replicaset,
)
