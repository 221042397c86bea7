"""Prometheus metrics: the console's own registry and the `/metrics` view.

Counters and histograms are fed by `console.observer` (facts from the core) and
`console.middleware` (API requests); gauges that describe memory (blocklist size, tracked
Pods, node readiness, the mirror's lag) are read at scrape time from `console.runtime`.
Labels are provider, node, outcome, kind, verb and code: never a Pod's env or a credential.
Tests: tests/console/test_console_units.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from console import runtime

REGISTRY = CollectorRegistry(auto_describe=True)
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
POLL_ERRORS = Counter("nebula_poll_errors", "provider.list calls that failed", ["provider"], registry=REGISTRY)
PLACEMENTS = Counter("nebula_placement_decisions", "placement decisions by outcome", ["outcome"], registry=REGISTRY)
STREAMS_OPEN = Gauge("nebula_kubelet_streams_open", "kubelet streams open by kind", ["kind"], registry=REGISTRY)
API_REQUESTS = Counter(
    "nebula_api_requests", "console API requests by verb and code", ["verb", "code"], registry=REGISTRY
)
EVENTS = Counter("nebula_events", "Kubernetes Events the manager wrote", ["kind", "type"], registry=REGISTRY)
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


class MemoryCollector(Collector):
    """Gauges read from the manager's memory at scrape time (no hook needed, never stale)."""

    def __init__(self, source: Callable[[], runtime.Runtime] = runtime.current) -> None:
        self._source = source

    def collect(self) -> Iterator[Any]:
        current = self._source()
        blocked = GaugeMetricFamily("nebula_blocklist_entries", "live blocklist entries", labels=["provider"])
        counts: dict[str, int] = {}
        for entry in current.blocklist.entries() if current.blocklist is not None else []:
            counts[entry.provider] = counts.get(entry.provider, 0) + 1
        for provider, count in sorted(counts.items()):
            blocked.add_metric([provider], count)
        total = GaugeMetricFamily("nebula_blocklist_size", "live blocklist entries, all providers")
        total.add_metric([], sum(counts.values()))
        pods = GaugeMetricFamily("nebula_tracked_pods", "Pods each virtual node tracks", labels=["provider"])
        ready = GaugeMetricFamily("nebula_node_ready", "1 while the provider's last list succeeded", labels=["node"])
        for handler in current.handlers:
            pods.add_metric([handler.provider.name], len(handler.tracked_entries()))
            ready.add_metric([handler.node_name], 1.0 if handler.last_list_ok else 0.0)
        lag = GaugeMetricFamily("nebula_mirror_lag_seconds", "seconds since the mirror last committed (-1: never)")
        lag.add_metric([], time.monotonic() - _mirror_synced_at[0] if _mirror_synced_at else -1.0)
        yield from (blocked, total, pods, ready, lag)


REGISTRY.register(MemoryCollector())


def metrics(request: HttpRequest) -> HttpResponse:
    """`/metrics` in the Prometheus text format (no login: Prometheus scrapes it; no secrets in it)."""
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
