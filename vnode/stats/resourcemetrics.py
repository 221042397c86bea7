"""The kubelet's `/metrics/resource`: node, Pod and container CPU and memory in the
Prometheus text format, as the kubelet's resource-metrics collector writes it.

Called by `Serving` and the kubelet listener with a `vnode.stats.usage.NodeUsage`; pure. Families
are sorted by name and series by label values (as the Prometheus registry gathers them);
values are formatted as Go's `strconv.FormatFloat(v, 'g', -1, 64)`; samples carry their
sampling time in milliseconds, `container_start_time_seconds` none.
Tests: tests/vnode/test_resourcemetrics.py.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from decimal import Decimal

from providers.base import ResourceUsage
from vnode.stats.usage import NodeUsage, PodUsage

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_NANO = 1_000_000_000

_SCRAPE_ERROR_HELP = "1 if there was an error while getting container metrics, 0 otherwise"
# name -> (type, help), the help as the kubelet prints it: stability first.
_FAMILIES = {
    "container_cpu_usage_seconds_total": (
        "counter", "[STABLE] Cumulative cpu time consumed by the container in core-seconds"),
    "container_memory_working_set_bytes": ("gauge", "[STABLE] Current working set of the container in bytes"),
    "container_start_time_seconds": ("gauge", "[STABLE] Start time of the container since unix epoch in seconds"),
    "node_cpu_usage_seconds_total": ("counter", "[STABLE] Cumulative cpu time consumed by the node in core-seconds"),
    "node_memory_working_set_bytes": ("gauge", "[STABLE] Current working set of the node in bytes"),
    "pod_cpu_usage_seconds_total": ("counter", "[STABLE] Cumulative cpu time consumed by the pod in core-seconds"),
    "pod_memory_working_set_bytes": ("gauge", "[STABLE] Current working set of the pod in bytes"),
    "resource_scrape_error": ("gauge", "[STABLE] " + _SCRAPE_ERROR_HELP),
    "scrape_error": ("gauge", "[ALPHA] (Deprecated since 1.29.0) " + _SCRAPE_ERROR_HELP),
}  # fmt: skip

Series = tuple[str, str, str]  # labels, value, timestamp ("" for none)


def resource_text(node: NodeUsage) -> str:
    """The exposition of `node`: every family's HELP and TYPE, then its series."""
    series: dict[str, list[Series]] = {name: [] for name in _FAMILIES}
    total = node.total()
    _cpu(series["node_cpu_usage_seconds_total"], "", total)
    _memory(series["node_memory_working_set_bytes"], "", total)
    for pod in node.pods:
        _pod_series(series, pod)
    error = "1" if node.failed else "0"
    series["resource_scrape_error"].append(("", error, ""))
    series["scrape_error"].append(("", error, ""))
    lines: list[str] = []
    for name, (kind, help_text) in _FAMILIES.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for labels, value, stamp in sorted(series[name]):
            sample = f"{name}{{{labels}}}" if labels else name
            lines.append(f"{sample} {value} {stamp}" if stamp else f"{sample} {value}")
    return "\n".join(lines) + "\n"


def _pod_series(series: dict[str, list[Series]], pod: PodUsage) -> None:
    pod_labels = f"namespace={_quote(pod.namespace)},pod={_quote(pod.name)}"
    for container in pod.containers:
        labels = f"container={_quote(container.name)},{pod_labels}"
        if container.started_at is not None and container.started_at.timestamp() > 0:
            series["container_start_time_seconds"].append((labels, go_float(container.started_at.timestamp()), ""))
        if container.usage is not None:
            _cpu(series["container_cpu_usage_seconds_total"], labels, container.usage)
            _memory(series["container_memory_working_set_bytes"], labels, container.usage)
    total = pod.total()
    if total is not None:
        _cpu(series["pod_cpu_usage_seconds_total"], pod_labels, total)
        _memory(series["pod_memory_working_set_bytes"], pod_labels, total)


def _cpu(out: list[Series], labels: str, usage: ResourceUsage) -> None:
    _add(out, labels, usage, lambda u: None if u.cpu_core_nanoseconds is None else u.cpu_core_nanoseconds / _NANO)


def _memory(out: list[Series], labels: str, usage: ResourceUsage) -> None:
    _add(out, labels, usage, lambda u: None if u.memory_bytes is None else float(u.memory_bytes))


def _add(out: list[Series], labels: str, usage: ResourceUsage, value: Callable[[ResourceUsage], float | None]) -> None:
    measured = value(usage)
    if measured is not None and usage.sampled_at is not None:
        out.append((labels, go_float(measured), _millis(usage.sampled_at)))


def _millis(when: datetime) -> str:
    return str(int(when.timestamp() * 1000))


def _quote(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def go_float(value: float) -> str:
    """`value` as Go's FormatFloat(v, 'g', -1, 64): the shortest digits that round-trip,
    in exponent form when the decimal exponent is below -4 or at least 6."""
    if value == 0:
        return "0"
    sign, digits, exponent = Decimal(repr(float(value))).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(str(d) for d in digits)
    point = len(text) + exponent  # digits before the decimal point
    power = point - 1
    prefix = "-" if sign else ""
    if power < -4 or power >= 6:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{prefix}{mantissa}e{'-' if power < 0 else '+'}{abs(power):02d}"
    if point <= 0:
        return f"{prefix}0.{'0' * -point}{text}"
    if point >= len(text):
        return f"{prefix}{text}{'0' * (point - len(text))}"
    return f"{prefix}{text[:point]}.{text[point:]}"
