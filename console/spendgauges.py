"""Spend and budgets as Prometheus families, read from placement's spend report at scrape time:
`nebula_spend_dollars_total{pool,provider,namespace}` and the per-pool gauges (spend per hour,
today, this month, instances, and each budget limit) that the PrometheusRule alerts compare.

Registered on `console.metrics.REGISTRY` at import (`console.exporter` imports it). Reads only
`Placement.spend_report(charts=False)` through `console.runtime`; never computes spend, never calls a
provider or the API. Labels are bounded: one sample per pool per family (pools are few), and
the report caps its (pool, provider, namespace) series. An unpriced part is not in any dollar
figure (it is not zero either: `nebula_pool_unpriced_instances` counts what bills unpriced).
Tests: tests/console/test_metrics_spend.py::test_the_spend_families_are_exposed_per_pool_and_series.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from console import metrics, runtime
from placement.spendview import PoolSpend

LIMITS = ("hourly", "daily", "monthly")  # nebula_pool_budget_dollars{limit}


def budget_limits(pool: PoolSpend) -> dict[str, float]:
    """The dollar limits the pool's budget sets, by `limit` label (an unset one is no sample)."""
    if pool.budget is None:
        return {}
    values = {"hourly": pool.budget.max_hourly_cost, "daily": pool.budget.daily, "monthly": pool.budget.monthly}
    return {limit: float(value) for limit, value in values.items() if value is not None}


class SpendCollector(Collector):
    """Implements prometheus_client's Collector over the spend report of `source()`."""

    def __init__(self, source: Callable[[], runtime.Runtime] = runtime.current) -> None:
        self._source = source

    def collect(self) -> Iterator[Any]:
        report = self._source().spend_report(charts=False)  # what the families read: no buckets, no Pods
        # A counter, though recomputed from facts on every scrape (and after a restart): the
        # total is the pools' settled ledgers (deleted Pods, in the NodePool status) plus price x
        # billed seconds of live Pods, and both parts only grow, so the value never goes down
        # across a restart or a leader handoff (a deleted Pod's spend moves from live to
        # settled, it does not leave). Only a deleted NodePool takes its series away.
        total = CounterMetricFamily(
            "nebula_spend_dollars",
            "accrued spend in dollars of priced instances (unpriced billing is not in it), per pool, provider "
            "and namespace, since each pool began",
            labels=["pool", "provider", "namespace"],
        )
        hourly = GaugeMetricFamily(
            "nebula_pool_hourly_spend_dollars",
            "dollars per hour of the pool's committed Pods: billing, or reserved by placement and not billing yet",
            labels=["pool"],
        )
        today = GaugeMetricFamily(
            "nebula_pool_spend_today_dollars", "the pool's accrued spend in the current UTC day", labels=["pool"]
        )
        month = GaugeMetricFamily(
            "nebula_pool_spend_month_dollars", "the pool's accrued spend in the current UTC month", labels=["pool"]
        )
        budget = GaugeMetricFamily(
            "nebula_pool_budget_dollars",
            "the pool's spec.budget in dollars: limit=hourly (maxHourlyCost, per hour), daily, monthly",
            labels=["pool", "limit"],
        )
        instances = GaugeMetricFamily(
            "nebula_pool_instances", "the pool's placed, unfinished Pods (what maxInstances counts)", labels=["pool"]
        )
        cap = GaugeMetricFamily("nebula_pool_budget_instances", "the pool's spec.budget.maxInstances", labels=["pool"])
        unpriced = GaugeMetricFamily(
            "nebula_pool_unpriced_instances", "the pool's billing instances without a known price", labels=["pool"]
        )
        exceeded = GaugeMetricFamily(
            "nebula_pool_budget_exceeded", "1 while the pool's budget holds new Pods back", labels=["pool"]
        )
        if report is not None:
            for series in report.series:
                total.add_metric([series.pool, series.provider, series.namespace], series.dollars)
            for pool in report.pools:
                name = [pool.pool]
                hourly.add_metric(name, pool.rate.dollars)
                today.add_metric(name, pool.today.dollars)
                month.add_metric(name, pool.month.dollars)
                instances.add_metric(name, pool.instances)
                unpriced.add_metric(name, pool.rate.unpriced)
                exceeded.add_metric(name, 1.0 if pool.exceeded else 0.0)
                for limit, dollars in budget_limits(pool).items():
                    budget.add_metric([pool.pool, limit], dollars)
                if pool.budget is not None and pool.budget.max_instances is not None:
                    cap.add_metric(name, pool.budget.max_instances)
        yield from (total, hourly, today, month, budget, instances, cap, unpriced, exceeded)


metrics.REGISTRY.register(SpendCollector())
