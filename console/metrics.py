"""Prometheus metrics: the console's own registry, served by the metrics listener
(`console.exporter`) and read directly by whoever needs a number.

Counters and histograms are fed by `console.observer` (facts from the core) and
`console.middleware` (API requests); gauges that describe memory (blocklist, tracked Pods,
providers up, orphans, instances behind finished Pods, spend, leadership, the mirror's lag)
are read at scrape time by `console.gauges`, spend and budgets by `console.spendgauges`. The
process's own (CPU, memory, file descriptors, GC) come from prometheus_client's collectors; no
`_created` series. Labels are provider, node, outcome, kind, verb, code, and for spend pool,
namespace and limit: never a Pod's env or a credential.
Tests: tests/console/test_console_units.py, tests/console/test_metrics_listener.py.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

# `_created` series double every counter's and histogram's series for a timestamp no rule
# reads; prometheus_client's switch is process-wide, so it is set before any metric exists.
disable_created_metrics()  # type: ignore[no-untyped-call]
REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)
STREAM_KINDS = ("logs", "exec", "attach")
LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

PROVISIONS = Counter(
    "nebula_provisions", "provider.provision calls by outcome", ["provider", "outcome"], registry=REGISTRY
)
PROVISION_SECONDS = Histogram(
    "nebula_provision_seconds",
    "provider.provision latency by outcome",
    ["provider", "outcome"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
TERMINATIONS = Counter(
    "nebula_terminations", "provider.terminate calls for Pods by outcome", ["provider", "outcome"], registry=REGISTRY
)
ORPHANS_SWEPT = Counter(
    "nebula_orphans_swept", "instances the orphan sweep terminated", ["provider"], registry=REGISTRY
)
POLL_SECONDS = Histogram(
    "nebula_poll_seconds", "provider.list (the poll) duration", ["provider"], buckets=LATENCY_BUCKETS, registry=REGISTRY
)
INTERRUPTIONS = Counter(
    "nebula_interruptions",
    "instances the provider took back, by its notice's kind (Reclaimed: seen only after the fact)",
    ["provider", "tier", "kind"],
    registry=REGISTRY,
)
WORKLOAD_FAILURES = Counter(
    "nebula_workload_failures",
    "Pods whose own workload failed, by the Pod's reason",
    ["provider", "reason"],
    registry=REGISTRY,
)
UNREACHABLE_PODS = Gauge(
    "nebula_provider_unreachable_pods",
    "Pods waiting on a provider that does not answer (none failed for it)",
    ["provider"],
    registry=REGISTRY,
)
POLL_ERRORS = Counter("nebula_poll_errors", "provider.list calls that failed", ["provider"], registry=REGISTRY)
PLACEMENTS = Counter("nebula_placement_decisions", "placement decisions by outcome", ["outcome"], registry=REGISTRY)
STREAMS_OPEN = Gauge("nebula_kubelet_streams_open", "kubelet streams open by kind", ["kind"], registry=REGISTRY)
API_REQUESTS = Counter(
    "nebula_api_requests", "console API requests by verb and code", ["verb", "code"], registry=REGISTRY
)
EVENTS = Counter("nebula_events", "Kubernetes Events the manager wrote", ["kind", "type"], registry=REGISTRY)
EVENTS_DROPPED = Counter(
    "nebula_events_dropped",
    "Event occurrences never written: the recorder's queue of series to write was full",
    registry=REGISTRY,
)
MIRROR_SYNC_SECONDS = Histogram(
    "nebula_mirror_sync_seconds",
    "one mirror sync (read memory, write changed rows)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
    registry=REGISTRY,
)
MIRROR_ROWS = Counter("nebula_mirror_rows_written", "rows the mirror upserted or deleted", ["table"], registry=REGISTRY)

for _kind in STREAM_KINDS:
    STREAMS_OPEN.labels(kind=_kind).set(0)

_mirror_synced_at: list[float] = []  # monotonic time of the last mirror commit, set by console.mirror


def mirror_synced(at: float) -> None:
    """The mirror committed a sync at monotonic time `at`."""
    _mirror_synced_at[:] = [at]


def mirror_synced_at() -> float | None:
    """The monotonic time of the mirror's last commit, None before the first."""
    return _mirror_synced_at[0] if _mirror_synced_at else None
