"""The spend families (`console.spendgauges`) in the text exposition, parsed: the accrued total
per (pool, provider, namespace) as a counter, and per pool its spend per hour, today, this month,
its instances, its budget's limits (only those set) and whether the budget holds Pods back;
nothing without placement; and the metrics listener's registry serves them."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from console import exporter, metrics, runtime, spendgauges
from tests.console.spendreports import ReportingPlacement, report

Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scrape(registry: CollectorRegistry) -> tuple[Samples, dict[str, str]]:
    samples: Samples = {}
    types = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        types[family.name] = family.type
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples, types


def collected(current: runtime.Runtime) -> tuple[Samples, dict[str, str]]:
    registry = CollectorRegistry()
    registry.register(spendgauges.SpendCollector(lambda: current))
    return scrape(registry)


def test_the_spend_families_are_exposed_per_pool_and_series() -> None:
    current = runtime.Runtime(placement=ReportingPlacement(report(pools_extra=2)))  # type: ignore[arg-type]
    samples, types = collected(current)
    assert types["nebula_spend_dollars"] == "counter"
    assert samples["nebula_spend_dollars_total"] == {
        (("namespace", "default"), ("pool", "gpu-a"), ("provider", "fake-a")): 9600.0,
        (("namespace", "team-b"), ("pool", "gpu-b"), ("provider", "fake-b")): 2500.0,
    }
    pools = {"gpu-a", "gpu-b", "byo", "extra-00", "extra-01"}
    for family in (
        "nebula_pool_hourly_spend_dollars",
        "nebula_pool_spend_today_dollars",
        "nebula_pool_spend_month_dollars",
        "nebula_pool_instances",
        "nebula_pool_unpriced_instances",
        "nebula_pool_budget_exceeded",
    ):
        assert {dict(labels)["pool"] for labels in samples[family]} == pools, family
    assert samples["nebula_pool_hourly_spend_dollars"][(("pool", "gpu-a"),)] == 9.6
    assert samples["nebula_pool_spend_today_dollars"][(("pool", "gpu-b"),)] == 25.0
    assert samples["nebula_pool_spend_month_dollars"][(("pool", "gpu-a"),)] == 960.0
    assert samples["nebula_pool_instances"][(("pool", "gpu-a"),)] == 2.0
    assert samples["nebula_pool_unpriced_instances"][(("pool", "byo"),)] == 1.0
    assert samples["nebula_pool_spend_today_dollars"][(("pool", "byo"),)] == 0.0  # its unpriced seconds are not $
    assert samples["nebula_pool_budget_exceeded"] == {(("pool", p),): 1.0 if p == "gpu-a" else 0.0 for p in pools}
    assert samples["nebula_pool_budget_dollars"] == {
        (("limit", "hourly"), ("pool", "gpu-a")): 20.0,
        (("limit", "daily"), ("pool", "gpu-a")): 300.0,
    }
    assert samples["nebula_pool_budget_instances"] == {(("pool", "gpu-a"),): 2.0}


def test_without_placement_the_families_have_no_samples() -> None:
    samples, types = collected(runtime.Runtime())
    assert "nebula_pool_budget_dollars" in types and "nebula_pool_budget_dollars" not in samples
    assert "nebula_spend_dollars_total" not in samples


def test_the_listener_registry_serves_them(db: Any) -> None:
    assert exporter.application is not None  # importing the listener registered the collector
    runtime.install(placement=ReportingPlacement(report()))  # type: ignore[arg-type]
    try:
        samples, _ = scrape(metrics.REGISTRY)
    finally:
        runtime.clear()
    assert samples["nebula_pool_hourly_spend_dollars"][(("pool", "gpu-a"),)] == 9.6
    assert len(samples["nebula_spend_dollars_total"]) == 2
