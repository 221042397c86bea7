"""The Spend page's figures: four charts (24 hours and 30 days, per pool and per provider),
the table of pools against their budgets and the table of the dearest Pods now, all from one
`SpendReport`.

Called by `console.views.spend` (the page) and `console.api.spend` (`shown`). Both read spend
only through `Placement.spend_report()` via `console.runtime.Runtime.spend_report`;
never computes spend, never calls a provider or the API. Unknown prices read "unknown"
(`Money.text()` / `Rate.text()`), never $0.00. Bounded: `MAX_TOP_PODS` Pods, the charts'
own bounds (`console.spendchart`).
Tests: tests/console/test_spend_page.py::test_the_page_shows_charts_pools_and_the_dearest_pods.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from console import spendchart
from placement.spend import TOP_PODS
from placement.spendview import ZERO, Bucket, Money, PodSpend, PoolSpend, Rate, SpendReport

MAX_TOP_PODS = TOP_PODS


def shown(report: SpendReport | None) -> SpendReport:
    """The report as the console shows it (the page and the REST API): an empty one when
    placement does not run here, the pools by name."""
    base = report if report is not None else SpendReport(at=datetime.now(UTC))
    return replace(base, pools=tuple(sorted(base.pools, key=lambda pool: pool.pool)))


@dataclass(frozen=True)
class PoolLine:
    pool: str
    hourly: str
    today: str
    month: str
    total: str
    budget: str
    state: str
    exceeded: bool


@dataclass(frozen=True)
class PodLine:
    pod: str
    pool: str
    provider: str
    price: str
    billing: bool
    total: str


def price_text(price: float | None) -> str:
    """An hourly price as the tables print it; None is "unknown", never $0.00."""
    return "unknown" if price is None else f"${price:,.2f}/h"


def pool_line(pool: PoolSpend) -> PoolLine:
    if pool.exceeded:
        state = pool.exceeded
    else:
        state = "within budget" if pool.budget is not None else "no budget"
    budget = pool.budget.text() if pool.budget is not None else "none"
    if pool.budget is not None and pool.budget.on_exceeded == "Stop":
        budget += " (Stop)"
    return PoolLine(
        pool.pool,
        pool.rate.text(),
        pool.today.text(),
        pool.month.text(),
        pool.total.text(),
        budget,
        state,
        bool(pool.exceeded),
    )


def pod_line(pod: PodSpend) -> PodLine:
    return PodLine(
        f"{pod.namespace}/{pod.name}",
        pod.pool or "-",
        pod.provider or "-",
        price_text(pod.hourly_price),
        pod.billing,
        pod.total.text(),
    )


def provider_series(buckets: Sequence[Bucket]) -> tuple[list[datetime], dict[str, list[float]]]:
    """One series per provider over `buckets` (oldest first)."""
    starts = [bucket.start for bucket in buckets]
    providers = sorted({name for bucket in buckets for name in bucket.by_provider})
    return starts, {name: [float(b.by_provider.get(name, 0.0)) for b in buckets] for name in providers}


def pool_series(pools: Sequence[PoolSpend], unit: str) -> tuple[list[datetime], dict[str, list[float]]]:
    """One series per pool: each bucket's total, the buckets aligned on their start."""
    per_pool = {pool.pool: {b.start: b.total for b in (pool.hours if unit == "hour" else pool.days)} for pool in pools}
    starts = sorted({start for buckets in per_pool.values() for start in buckets})
    return starts, {name: [buckets.get(start, 0.0) for start in starts] for name, buckets in per_pool.items()}


def charts(report: SpendReport) -> list[spendchart.Chart]:
    """The page's four charts, hours before days, pools before providers."""
    drawn = []
    periods = (("hour", "24 hours", report.providers_hours), ("day", "30 days", report.providers_days))
    for unit, span, buckets in periods:
        starts, series = pool_series(report.pools, unit)
        drawn.append(spendchart.stacked(f"Spend per pool, last {span}", unit, starts, series))
        starts, series = provider_series(buckets)
        drawn.append(spendchart.stacked(f"Spend per provider, last {span}", unit, starts, series))
    return drawn


def totals(pools: Sequence[PoolSpend]) -> tuple[Rate, Money, Money]:
    """Every pool together: spend per hour, today, this month (unpriced parts carried, not zeroed)."""
    rate = Rate(sum(p.rate.dollars for p in pools), sum(p.rate.unpriced for p in pools))
    today, month = ZERO, ZERO
    for pool in pools:
        today, month = today + pool.today, month + pool.month
    return rate, today, month


def figures(report: SpendReport | None) -> dict[str, Any]:
    """Everything templates/console/spend.html needs (`running` False without placement)."""
    seen = shown(report)
    rate, today, month = totals(seen.pools)
    return {
        "running": report is not None,
        "summary": f"{rate.text()} now, {today.text()} today, {month.text()} this month",
        "at": seen.at,
        "charts": charts(seen),
        "pools": [pool_line(pool) for pool in seen.pools],
        "pods": [pod_line(pod) for pod in seen.top_pods[:MAX_TOP_PODS]],
        "pod_count": seen.billing_pods,
    }
