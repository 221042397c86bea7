"""SpendReport values built by hand for the console's spend tests: what the spend book would
report for a few pools, providers and Pods (one pool over budget, one Pod unpriced), and a
placement whose `spend_report()` returns such a report, as the console tests fake their sources."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from placement.spendview import (
    Bucket,
    BudgetView,
    Money,
    PodSpend,
    PoolSpend,
    Rate,
    Series,
    SpendReport,
)

AT = datetime(2026, 12, 5, 10, 30, tzinfo=UTC)
HOUR0 = AT.replace(minute=0) - timedelta(hours=23)
DAY0 = AT.replace(hour=0, minute=0) - timedelta(days=29)


def hours(by_provider: dict[str, float], count: int = 24) -> tuple[Bucket, ...]:
    """`count` hourly buckets ending at AT's hour, the i-th (from 0) spending (i + 1) x each amount."""
    start = AT.replace(minute=0) - timedelta(hours=count - 1)
    return tuple(
        Bucket(start + timedelta(hours=i), {p: d * (i + 1) for p, d in by_provider.items()}) for i in range(count)
    )


def days(by_provider: dict[str, float], count: int = 30) -> tuple[Bucket, ...]:
    start = AT.replace(hour=0, minute=0) - timedelta(days=count - 1)
    return tuple(Bucket(start + timedelta(days=i), dict(by_provider)) for i in range(count))


def pool(name: str, provider: str, hourly: float, **fields: object) -> PoolSpend:
    base: dict[str, object] = {
        "pool": name,
        "rate": Rate(hourly),
        "instances": 2,
        "today": Money(hourly * 10),
        "month": Money(hourly * 100),
        "total": Money(hourly * 1000),
        "budget": None,
        "exceeded": None,
        "hours": hours({provider: hourly}),
        "days": days({provider: hourly * 24}),
    }
    base.update(fields)
    return PoolSpend(**base)  # type: ignore[arg-type]


def report(*, pods: int = 3, pools_extra: int = 0) -> SpendReport:
    """Two priced pools (gpu-a over its hourly budget) and one unpriced, plus `pools_extra` more."""
    budget = BudgetView(max_hourly_cost=20.0, daily=300.0, max_instances=2)
    pools = [
        pool("gpu-a", "fake-a", 9.6, budget=budget, exceeded="pool gpu-a at $19.20/h of $20.00/h"),
        pool("gpu-b", "fake-b", 2.5),
        pool(
            "byo",
            "fake-c",
            0.0,
            rate=Rate(0.0, unpriced=1),
            today=Money(0.0, 3600.0),
            month=Money(0.0, 7200.0),
            total=Money(0.0, 7200.0),
            hours=(),
            days=(),
        ),
        *(pool(f"extra-{i:02d}", f"fake-x{i:02d}", 0.1 + i / 100) for i in range(pools_extra)),
    ]
    top = [
        PodSpend("default", f"train-{i:03d}", "gpu-a", "fake-a", 4.8 - i / 100, True, Money(12.0 + i))
        for i in range(pods)
    ]
    top.append(PodSpend("default", "mystery", None, "fake-c", None, True, Money(0.0, 3600.0)))
    series = (
        Series("gpu-a", "fake-a", "default", 9600.0),
        Series("gpu-b", "fake-b", "team-b", 2500.0),
    )
    return SpendReport(
        at=AT,
        pools=tuple(pools),
        top_pods=tuple(top),
        billing_pods=len(top),
        series=series,
        providers_hours=hours({"fake-a": 9.6, "fake-b": 2.5}),
        providers_days=days({"fake-a": 230.4, "fake-b": 60.0}),
    )


class ReportingPlacement:
    """Stands where `console.runtime` keeps placement: only `spend_report()` and the pools."""

    def __init__(self, spend: SpendReport) -> None:
        self.spend = spend
        self.blocklist = None

    def spend_report(self, *, charts: bool = True) -> SpendReport:
        return self.spend
