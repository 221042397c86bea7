"""Server-side printing: meta.k8s.io/v1 Tables with kubectl's columns for each kind.

The HTTP layer calls `to_table` for lists, gets and watch events when the client's Accept
asks for `as=Table`. Cells follow kube-apiserver's printers (run with Wide on, as the server
does; kubectl hides `priority: 1` columns unless `-o wide`). Pure: the clock is a parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from devcluster import appstables, csrkind, jobkind, printcolumns
from devcluster.durations import age

Row = list[Any]
NAME_DESCRIPTION = "Name must be unique within a namespace."  # ObjectMeta's, shortened
_Column = tuple[str, str, int]  # name, type, priority


def to_table(
    kind: str,
    objects: list[dict[str, Any]],
    *,
    resource_version: str,
    include_object: str = "Metadata",
    now: datetime | None = None,
    custom: Sequence[printcolumns.PrinterColumn] = (),
) -> dict[str, Any]:
    """A Table of `objects` of `kind`; each row carries the object as PartialObjectMetadata
    (`include_object="Metadata"`), whole (`"Object"`), or not at all (`"None"`). A custom
    resource passes its CRD version's printer columns as `custom`: Name, then those."""
    moment = now or datetime.now(UTC)
    columns, printer = _PRINTERS.get(kind, (_DEFAULT_COLUMNS, _print_default))
    definitions = [
        {
            "name": name,
            "type": kind_,
            "format": "name" if name == "Name" and priority == 0 else "",
            "description": "",
            "priority": priority,
        }
        for name, kind_, priority in columns
    ]
    if custom:
        definitions = [dict(definitions[0], description=NAME_DESCRIPTION), *(c.definition() for c in custom)]

        def printer(obj: dict[str, Any], now: datetime) -> Row:
            return [_meta(obj).get("name", ""), *printcolumns.cells(custom, obj, now)]

    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": printer(obj, moment)}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata") or {},
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": definitions,
        "rows": rows,
    }


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def _section(obj: dict[str, Any], name: str) -> dict[str, Any]:
    value = obj.get(name)
    return value if isinstance(value, dict) else {}


def _print_default(obj: dict[str, Any], now: datetime) -> Row:
    return [_meta(obj).get("name", ""), age(_meta(obj).get("creationTimestamp"), now)]


def _is_sidecar(container: Mapping[str, Any] | None) -> bool:
    """A restartable init container (`restartPolicy: Always`): printPod counts it as a container."""
    return container is not None and container.get("restartPolicy") == "Always"


def _pod_reason(pod: dict[str, Any]) -> tuple[str, int, int]:
    """(status reason, ready containers, restarts) by printPod's rules: a started, ready
    sidecar counts as ready and never holds the `Init:` reason."""
    spec, status = _section(pod, "spec"), _section(pod, "status")
    reason = status.get("reason") or status.get("phase") or ""
    conditions = status.get("conditions") or []
    gated = any(c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated" for c in conditions)
    if gated or (spec.get("schedulingGates") and not spec.get("nodeName")):
        reason = "SchedulingGated"
    restarts = ready = 0
    initializing = False
    init_specs = spec.get("initContainers") or []
    by_name = {str(c.get("name")): c for c in init_specs if isinstance(c, Mapping)}
    for index, container in enumerate(status.get("initContainerStatuses") or []):
        restarts += int(container.get("restartCount") or 0)
        if _is_sidecar(by_name.get(str(container.get("name")))):
            ready += 1 if container.get("started") and container.get("ready") else 0
            continue
        state = container.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and terminated.get("exitCode", 0) == 0:
            continue
        initializing = True
        if terminated:
            if terminated.get("reason"):
                reason = "Init:" + terminated["reason"]
            elif terminated.get("signal"):
                reason = f"Init:Signal:{terminated['signal']}"
            else:
                reason = f"Init:ExitCode:{terminated.get('exitCode', 0)}"
        elif waiting and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{index}/{len(init_specs)}"
        break
    initialized = any(c.get("type") == "Initialized" and c.get("status") == "True" for c in conditions)
    if not initializing or initialized:
        restarts, has_running = 0, False
        for container in reversed(status.get("containerStatuses") or []):
            restarts += int(container.get("restartCount") or 0)
            state = container.get("state") or {}
            waiting, terminated = state.get("waiting") or {}, state.get("terminated")
            if waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated and terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated:
                signal = terminated.get("signal")
                reason = f"Signal:{signal}" if signal else f"ExitCode:{terminated.get('exitCode', 0)}"
            elif container.get("ready") and state.get("running") is not None:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            pod_ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
            reason = "Running" if pod_ready else "NotReady"
    deleting = _meta(pod).get("deletionTimestamp")
    if deleting and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif deleting and status.get("phase") not in ("Succeeded", "Failed"):
        reason = "Terminating"
    return reason, ready, restarts


def _print_pod(pod: dict[str, Any], now: datetime) -> Row:
    spec, status = _section(pod, "spec"), _section(pod, "status")
    reason, ready, restarts = _pod_reason(pod)
    last_restart = ""
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        finished = ((container.get("lastState") or {}).get("terminated") or {}).get("finishedAt")
        if isinstance(finished, str) and finished > last_restart:
            last_restart = finished
    restarts_cell = f"{restarts} ({age(last_restart, now)} ago)" if restarts and last_restart else str(restarts)
    pod_ips = status.get("podIPs") or []
    ip = (pod_ips[0].get("ip") if pod_ips else status.get("podIP")) or "<none>"
    gates = spec.get("readinessGates") or []
    gates_cell = "<none>"
    if gates:
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        true_count = sum(1 for gate in gates if conditions.get(gate.get("conditionType")) == "True")
        gates_cell = f"{true_count}/{len(gates)}"
    return [
        _meta(pod).get("name", ""),
        f"{ready}/{len(spec.get('containers') or []) + sum(map(_is_sidecar, spec.get('initContainers') or []))}",
        reason,
        restarts_cell,
        age(_meta(pod).get("creationTimestamp"), now),
        ip,
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        gates_cell,
    ]


def _print_node(node: dict[str, Any], now: datetime) -> Row:
    spec, status = _section(node, "spec"), _section(node, "status")
    states = [
        "Ready" if c.get("status") == "True" else "NotReady"
        for c in status.get("conditions") or []
        if c.get("type") == "Ready"
    ][:1] or ["Unknown"]
    if spec.get("unschedulable"):
        states.append("SchedulingDisabled")
    labels = _meta(node).get("labels") or {}
    roles = sorted(
        {k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and k.split("/", 1)[1]}
        | ({labels["kubernetes.io/role"]} if labels.get("kubernetes.io/role") else set())
    )
    info = status.get("nodeInfo") or {}
    addresses = status.get("addresses") or []

    def address(kind: str) -> str:
        return next((a.get("address", "") for a in addresses if a.get("type") == kind), "<none>")

    return [
        _meta(node).get("name", ""),
        ",".join(states),
        ",".join(roles) or "<none>",
        age(_meta(node).get("creationTimestamp"), now),
        info.get("kubeletVersion", ""),
        address("InternalIP"),
        address("ExternalIP"),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


def _print_event(event: dict[str, Any], now: datetime) -> Row:
    """Reads core/v1 fields, falling back to their events.k8s.io/v1 names (regarding, note, ...)."""
    involved = _section(event, "involvedObject") or _section(event, "regarding")
    first = event.get("firstTimestamp") or event.get("deprecatedFirstTimestamp") or event.get("eventTime")
    first_seen = age(first, now)
    last = event.get("lastTimestamp") or event.get("deprecatedLastTimestamp")
    last_seen = age(last, now) if last else first_seen
    count = event.get("count") or event.get("deprecatedCount") or 0
    series = _section(event, "series")
    if series:
        last_seen = age(series.get("lastObservedTime"), now)
        count = series.get("count") or 0
    elif not count:
        count = 1
    kind = str(involved.get("kind", "")).lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = _section(event, "source") or _section(event, "deprecatedSource")
    component = source.get("component") or event.get("reportingController") or ""
    instance = source.get("host") or event.get("reportingInstance") or ""
    message = str(event.get("message") or event.get("note") or "").strip()
    return [
        last_seen,
        event.get("type", ""),
        event.get("reason", ""),
        target,
        involved.get("fieldPath", ""),
        f"{component}, {instance}" if instance else component,
        message,
        first_seen,
        int(count),
        _meta(event).get("name", ""),
    ]


def _print_namespace(ns: dict[str, Any], now: datetime) -> Row:
    return [
        _meta(ns).get("name", ""),
        _section(ns, "status").get("phase", ""),
        age(_meta(ns).get("creationTimestamp"), now),
    ]


def _print_secret(secret: dict[str, Any], now: datetime) -> Row:
    count = len(secret.get("data") or {}) + len(secret.get("stringData") or {})
    meta = _meta(secret)
    return [meta.get("name", ""), secret.get("type", ""), count, age(meta.get("creationTimestamp"), now)]


def _print_configmap(cm: dict[str, Any], now: datetime) -> Row:
    count = len(cm.get("data") or {}) + len(cm.get("binaryData") or {})
    return [_meta(cm).get("name", ""), count, age(_meta(cm).get("creationTimestamp"), now)]


def _print_lease(lease: dict[str, Any], now: datetime) -> Row:
    holder = _section(lease, "spec").get("holderIdentity", "")
    return [_meta(lease).get("name", ""), holder, age(_meta(lease).get("creationTimestamp"), now)]


_S, _I = "string", "integer"
_DEFAULT_COLUMNS: list[_Column] = [("Name", _S, 0), ("Age", _S, 0)]
_PRINTERS: dict[str, tuple[list[_Column], Callable[[dict[str, Any], datetime], Row]]] = {
    "Pod": (
        [("Name", _S, 0), ("Ready", _S, 0), ("Status", _S, 0), ("Restarts", _S, 0), ("Age", _S, 0)]
        + [("IP", _S, 1), ("Node", _S, 1), ("Nominated Node", _S, 1), ("Readiness Gates", _S, 1)],
        _print_pod,
    ),
    "Node": (
        [("Name", _S, 0), ("Status", _S, 0), ("Roles", _S, 0), ("Age", _S, 0), ("Version", _S, 0)]
        + [("Internal-IP", _S, 1), ("External-IP", _S, 1), ("OS-Image", _S, 1)]
        + [("Kernel-Version", _S, 1), ("Container-Runtime", _S, 1)],
        _print_node,
    ),
    "Event": (
        [("Last Seen", _S, 0), ("Type", _S, 0), ("Reason", _S, 0), ("Object", _S, 0)]
        + [("Subobject", _S, 1), ("Source", _S, 1), ("Message", _S, 0), ("First Seen", _S, 1)]
        + [("Count", _I, 1), ("Name", _S, 1)],
        _print_event,
    ),
    "Namespace": ([("Name", _S, 0), ("Status", _S, 0), ("Age", _S, 0)], _print_namespace),
    "Secret": ([("Name", _S, 0), ("Type", _S, 0), ("Data", _I, 0), ("Age", _S, 0)], _print_secret),
    "ConfigMap": ([("Name", _S, 0), ("Data", _I, 0), ("Age", _S, 0)], _print_configmap),
    "Lease": ([("Name", _S, 0), ("Holder", _S, 0), ("Age", _S, 0)], _print_lease),
    "Deployment": appstables.DEPLOYMENT,
    "ReplicaSet": appstables.REPLICASET,
    "CertificateSigningRequest": (csrkind.COLUMNS, csrkind.table_row),
    "Job": (jobkind.COLUMNS, jobkind.table_row),
}
