"""The embedded metrics-server's API: `metrics.k8s.io/v1beta1` NodeMetrics and PodMetrics,
list and get, by namespace or across all, with label selectors, in metrics-server's shapes
(what `kubectl top` and an HPA controller read).

`Api` hands every `metrics.k8s.io` resource request here; the numbers come from the
`MetricsScraper`'s store. Read-only: any verb but get and list is a 405. A Node or Pod that
exists but has no rate yet (fewer than two scrapes) is left out of a list and a 404 to a get,
as metrics-server answers.
Tests: tests/devcluster/test_metrics_api.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from devcluster import selectors
from devcluster.errors import not_found
from devcluster.metricsscrape import MetricsStore, Usage
from devcluster.registry import ResourceType
from devcluster.store import Store

GROUP, VERSION = "metrics.k8s.io", "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
NODES = ResourceType(GROUP, VERSION, "nodes", "NodeMetrics", False, "", verbs=("get", "list"))
PODS = ResourceType(GROUP, VERSION, "pods", "PodMetrics", True, "", verbs=("get", "list"))
TYPES = (NODES, PODS)


def serves(rt: ResourceType) -> bool:
    return rt.group == GROUP


def handle(
    rt: ResourceType, *, namespace: str | None, name: str, query: Mapping[str, str], store: Store, metrics: MetricsStore
) -> dict[str, Any]:
    """A NodeMetrics/PodMetrics object or list. ApiError: 404 for one without metrics."""
    label = selectors.parse_label_selector(query.get("labelSelector", ""))
    build: Callable[[Mapping[str, Any], MetricsStore, str], dict[str, Any] | None]
    if rt.plural == "nodes":
        objects, _ = store.list_objects("/nodes")
        build = _node_metrics
    else:
        objects, _ = store.list_objects("/pods", namespace or None)
        build = _pod_metrics
    now = _rfc3339(datetime.now(UTC).timestamp())
    if name:
        found = [o for o in objects if o["metadata"].get("name") == name]
        item = build(found[0], metrics, now) if found else None
        if item is None:
            kind = "nodemetrics" if rt.plural == "nodes" else "podmetrics"
            raise not_found(kind, name, group=GROUP)
        return item
    items = [item for o in objects if label.matches(o) and (item := build(o, metrics, now)) is not None]
    items.sort(key=lambda i: (i["metadata"].get("namespace", ""), i["metadata"]["name"]))
    return {"kind": f"{rt.kind}List", "apiVersion": API_VERSION, "metadata": {}, "items": items}


def _metadata(obj: Mapping[str, Any], now: str, *, namespaced: bool) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    result: dict[str, Any] = {"name": meta.get("name"), "creationTimestamp": now}
    if namespaced:
        result["namespace"] = meta.get("namespace")
    if meta.get("labels"):
        result["labels"] = dict(meta["labels"])
    return result


def _node_metrics(node: Mapping[str, Any], metrics: MetricsStore, now: str) -> dict[str, Any] | None:
    usage = metrics.node(str(node["metadata"]["name"]))
    if usage is None:
        return None
    return {**_envelope("NodeMetrics", node, now, usage, namespaced=False), "usage": _resources(usage)}


def _pod_metrics(pod: Mapping[str, Any], metrics: MetricsStore, now: str) -> dict[str, Any] | None:
    meta = pod["metadata"]
    containers = metrics.pod(str(meta.get("namespace")), str(meta.get("name")))
    if containers is None:
        return None
    first = max(containers.values(), key=lambda u: u.timestamp)
    return {
        **_envelope("PodMetrics", pod, now, first, namespaced=True),
        "containers": [{"name": name, "usage": _resources(u)} for name, u in sorted(containers.items())],
    }


def _envelope(kind: str, obj: Mapping[str, Any], now: str, usage: Usage, *, namespaced: bool) -> dict[str, Any]:
    """What NodeMetrics and PodMetrics share: kind, apiVersion, metadata, and the sample's time and window."""
    return {
        "kind": kind,
        "apiVersion": API_VERSION,
        "metadata": _metadata(obj, now, namespaced=namespaced),
        "timestamp": _rfc3339(usage.timestamp),
        "window": _duration(usage.window),
    }


def _resources(usage: Usage) -> dict[str, str]:
    return {"cpu": cpu_quantity(usage.nano_cores), "memory": memory_quantity(usage.memory_bytes)}


def cpu_quantity(nano_cores: int) -> str:
    """Nanocores as a canonical Quantity (`resource.NewScaledQuantity(n, -9)`): `250m`, `1234567n`."""
    if nano_cores == 0:
        return "0"
    for divisor, suffix in ((1_000_000_000, ""), (1_000_000, "m"), (1_000, "u")):
        if nano_cores % divisor == 0:
            return f"{nano_cores // divisor}{suffix}"
    return f"{nano_cores}n"


def memory_quantity(size: int) -> str:
    """Bytes as a canonical BinarySI Quantity: `65536Ki`, `12345` (not a multiple of 1024)."""
    if size == 0:
        return "0"
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = 1024 ** ("KMGTPE".index(suffix[0]) + 1)
        if size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(int(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _duration(seconds: float) -> str:
    """A Go `time.Duration` string, as metav1.Duration marshals it (`15.003s`, `1m0.5s`)."""
    millis = round(seconds * 1000)
    if millis < 1000:
        return f"{millis}ms" if millis else "0s"
    minutes, rest = divmod(millis, 60_000)
    text = f"{rest / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{minutes}m{text}" if minutes else text
