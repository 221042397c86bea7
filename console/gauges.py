"""Gauges read from the manager's memory at scrape time (no hook to feed them, never stale):
the blocklist, tracked Pods, providers up, orphan instances, instances billing behind
finished Pods, the estimated spend, leadership, the mirror's lag and the nodes served here.

Registered on `console.metrics.REGISTRY` at import (`console.exporter` imports it). Pure reads
of `console.runtime`, the console's observer and each Handler's last list; never calls a
provider or the Kubernetes API. Labels are provider and node only (and the replica's own
identity on `nebula_node_served`).
Tests: tests/console/test_metrics_gauges.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from console import metrics, runtime
from console import observer as console_observer
from kube import names
from providers.base import InstanceState
from vnode.handler import Handler
from vnode.model.tracking import Tracked

FINISHED_PHASES = ("Succeeded", "Failed")
GONE = (InstanceState.TERMINATING, InstanceState.TERMINATED)


@dataclass(frozen=True)
class Billing:
    """What one provider's last list says costs money, as the gauges count it."""

    orphans: int  # instances no tracked Pod claims, not yet terminating
    behind_finished: int  # instances still billing while their Pod finished or is being deleted
    spend: float  # dollars per hour: the placed price of each billing instance whose Pod has one
    unpriced: int  # billing instances whose Pod carries no price (not placed by a NodePool)


def finished(entry: Tracked) -> bool:
    """The Pod is Succeeded or Failed (as Nebula reports it, else as the API server does), or
    being deleted: its instance has nothing left to do."""
    status = entry.desired_status or entry.pod.get("status") or {}
    return status.get("phase") in FINISHED_PHASES or bool((entry.pod.get("metadata") or {}).get("deletionTimestamp"))


def price_of(entry: Tracked) -> float | None:
    """The hourly price placement chose for the Pod (`nebula.io/hourly-price`), None if none."""
    raw = ((entry.pod.get("metadata") or {}).get("annotations") or {}).get(names.HOURLY_PRICE_ANNOTATION)
    if raw is None or raw == "":
        return None
    try:
        return float(raw)
    except (TypeError, ValueError):
        return None


def billing_of(handler: Handler) -> Billing:
    """Count the provider's last list against the Pods its Handler tracks."""
    rules, owners = handler.rules(), {entry.claim: entry for entry in handler.tracked_entries()}
    orphans = behind = unpriced = 0
    spend = 0.0
    for claim, instance in handler.inventory.last_instances().items():
        entry = owners.get(claim)
        if entry is None:
            orphans += instance.state not in GONE
            continue
        if not rules.billing(instance):
            continue
        behind += finished(entry)
        price = price_of(entry)
        if price is None:
            unpriced += 1
        else:
            spend += price
    return Billing(orphans, behind, spend, unpriced)


def leading(leader: bool | None, handlers: int) -> float:
    """1 while this process runs the controllers: the Lease is held, or (never asked, as with
    --no-leader-election, or could not ask lately) its Runners run."""
    if leader is True:
        return 1.0
    return 1.0 if leader is None and handlers else 0.0


class MemoryCollector(Collector):
    """Implements prometheus_client's Collector over `runtime.current()` and the observer."""

    def __init__(
        self,
        source: Callable[[], runtime.Runtime] = runtime.current,
        observer: Callable[[], console_observer.ConsoleObserver | None] = console_observer.installed,
    ) -> None:
        self._source = source
        self._observer = observer

    def collect(self) -> Iterator[Any]:
        current = self._source()
        yield from _blocklist(current)
        yield from _handlers(current.handlers)
        seen = self._observer()
        leader = seen.leadership_seen()[0] if seen is not None else None
        lead = GaugeMetricFamily(
            "nebula_leader",
            "1 while this replica holds the leader Lease (without leader election: runs its controllers)",
        )
        lead.add_metric([], leading(leader, len(current.handlers)))
        lag = GaugeMetricFamily("nebula_mirror_lag_seconds", "seconds since the mirror last committed (-1: never)")
        synced = metrics.mirror_synced_at()
        lag.add_metric([], time.monotonic() - synced if synced is not None else -1.0)
        yield from (lead, lag, _served())


def _served() -> GaugeMetricFamily:
    """`nebula_node_served{node,replica}`: 1 for each virtual node this replica serves (with
    providers shared out, each replica exports its own share; summed over replicas, each node
    reads 1 once the sharing has settled, 2 never)."""
    replica, nodes = runtime.served()
    served = GaugeMetricFamily(
        "nebula_node_served", "1 for each virtual node this replica serves", labels=["node", "replica"]
    )
    for node in nodes:
        served.add_metric([node, replica], 1.0)
    return served


def _blocklist(current: runtime.Runtime) -> Iterator[GaugeMetricFamily]:
    blocked = GaugeMetricFamily("nebula_blocklist_entries", "live blocklist entries", labels=["provider"])
    counts: dict[str, int] = {}
    for entry in current.blocklist.entries() if current.blocklist is not None else []:
        counts[entry.provider] = counts.get(entry.provider, 0) + 1
    for provider, count in sorted(counts.items()):
        blocked.add_metric([provider], count)
    total = GaugeMetricFamily("nebula_blocklist_size", "live blocklist entries, all providers")
    total.add_metric([], sum(counts.values()))
    yield from (blocked, total)


def _handlers(handlers: tuple[Handler, ...]) -> Iterator[GaugeMetricFamily]:
    pods = GaugeMetricFamily("nebula_tracked_pods", "Pods each virtual node tracks", labels=["provider"])
    ready = GaugeMetricFamily("nebula_node_ready", "1 while the provider's last list succeeded", labels=["node"])
    up = GaugeMetricFamily(
        "nebula_provider_up",
        "1 while the provider's last list succeeded, 0 after a failed one",
        labels=["provider", "node"],
    )
    orphans = GaugeMetricFamily(
        "nebula_orphan_instances", "instances of the last list that no tracked Pod claims", labels=["provider"]
    )
    behind = GaugeMetricFamily(
        "nebula_instances_behind_finished_pods",
        "instances still billing while their Pod is Succeeded, Failed or being deleted",
        labels=["provider"],
    )
    spend = GaugeMetricFamily(
        "nebula_spend_dollars_per_hour",
        "dollars per hour of the instances billing in the provider's last list, from their Pods' placed prices "
        "(per pool, reservations included: nebula_pool_hourly_spend_dollars)",
        labels=["provider"],
    )
    unpriced = GaugeMetricFamily(
        "nebula_unpriced_instances", "billing instances whose Pod carries no hourly price", labels=["provider"]
    )
    for handler in handlers:
        provider = handler.provider.name
        pods.add_metric([provider], len(handler.tracked_entries()))
        ready.add_metric([handler.node_name], 1.0 if handler.inventory.last_list_ok else 0.0)
        if handler.inventory.last_list_ok is not None:  # before the first list: unknown, not down
            up.add_metric([provider, handler.node_name], 1.0 if handler.inventory.last_list_ok else 0.0)
        billing = billing_of(handler)
        orphans.add_metric([provider], billing.orphans)
        behind.add_metric([provider], billing.behind_finished)
        spend.add_metric([provider], billing.spend)
        unpriced.add_metric([provider], billing.unpriced)
    yield from (pods, ready, up, orphans, behind, spend, unpriced)


metrics.REGISTRY.register(MemoryCollector())
