"""The spend book (placement.spend) over a Pod cache and a pool cache filled by hand: a pool's
spend is its settled ledger plus its live Pods, a folded uid is never counted live too, an
unknown price is unpriced (never $0), `spent` is cached and follows the Pods, and the report
holds the pools, the dearest billing Pods and the series."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from kube import billing as bill
from kube import names
from kube.reflector import Reflector
from placement import ledger as led
from placement import spend
from placement.poolcache import PoolCache, PoolState
from placement.pools import PoolError, parse_pool
from placement.spend import SpendBook, budget_of
from placement.spendview import Money
from tests.support.clock import ManualClock

NOW = datetime(2026, 12, 5, 10, 30, tzinfo=UTC).timestamp()


def pod(
    name: str, uid: str, *, price: str | None, start: float, end: float | None, pool: str = "gpu"
) -> dict[str, Any]:
    record = bill.EMPTY.opened(start, "i-" + uid)
    record = record if end is None else record.closed_at(end)
    annotations = {names.POOL_ANNOTATION: pool, names.BILLING_ANNOTATION: bill.dump(record)}
    if price is not None:
        annotations[names.HOURLY_PRICE_ANNOTATION] = price
    return {
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": uid,
            "annotations": annotations,
            "creationTimestamp": "2026-12-05T09:00:00Z",
        },
        "spec": {"nodeSelector": {names.PROVIDER_KEY: "gpu-a"}, "nodeName": "nebula-gpu-a"},
        "status": {"phase": "Running"},
    }


def nodepool(name: str, *, settled: led.Ledger | None = None, budget: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"providers": [{"name": "gpu-a"}], "capacityTypes": ["Spot"]}
    if budget is not None:
        spec["budget"] = budget
    status = {} if settled is None else {"spend": {"settled": led.dump(settled)}}
    return {"metadata": {"name": name, "generation": 1}, "spec": spec, "status": status}


class Book:
    """A SpendBook over a Pod reflector and a pool cache that are never started: filled by hand."""

    def __init__(self) -> None:
        self.clock = ManualClock(NOW)
        self.pods = Reflector(None, "/api/v1/pods", on_change=lambda k, o: None)  # type: ignore[arg-type]
        self.pools = PoolCache(None, None)  # type: ignore[arg-type]
        self.book = SpendBook(self.pods, self.pools, clock=self.clock)

    def put_pod(self, obj: dict[str, Any]) -> None:
        key = f"team/{obj['metadata']['name']}"
        self.pods.cache[key] = obj
        self.book.pod_changed(key, obj)

    def put_pool(self, obj: dict[str, Any]) -> None:
        self.pools._changed(obj["metadata"]["name"], obj)


def test_a_pools_spend_is_settled_plus_live_and_counts_a_folded_uid_once() -> None:
    rig = Book()
    gone = pod("gone", "uid-1", price="36", start=NOW - 3600, end=NOW - 1800)  # $18, 09:30-10:00
    settled = led.fold(
        led.EMPTY,
        [led.Piece("gpu-a", "team", 36.0, bill.parse(gone["metadata"]["annotations"][names.BILLING_ANNOTATION]))],
        "uid-1",
        NOW,
    )
    rig.put_pool(nodepool("gpu", settled=settled))
    rig.put_pod(gone)  # folded, its finalizer not removed yet: still in the cache
    rig.put_pod(pod("live", "uid-2", price="10", start=NOW - 1800, end=None))  # $5 so far, 10:00-10:30
    spend = rig.book.pool_spend("gpu")
    assert spend.total.dollars == pytest.approx(23.0)
    assert spend.today.dollars == pytest.approx(23.0) and spend.month.dollars == pytest.approx(23.0)
    assert spend.rate.dollars == 10.0 and spend.instances == 1  # the folded Pod's billing is closed
    hours = {b.start.hour: b.total for b in spend.hours if b.total}
    assert hours == pytest.approx({9: 18.0, 10: 5.0})
    assert rig.book.spent("gpu") == (Money(pytest.approx(23.0)), Money(pytest.approx(23.0)))
    rig.clock.advance(3600)  # an hour later the live Pod has billed $10 more; the folded one nothing
    assert rig.book.pool_spend("gpu").total.dollars == pytest.approx(33.0)


def test_an_unknown_price_is_unpriced_never_zero() -> None:
    rig = Book()
    rig.put_pool(nodepool("gpu"))
    rig.put_pod(pod("p", "uid-1", price=None, start=NOW - 60, end=None))
    spend = rig.book.pool_spend("gpu")
    assert spend.total == Money(0.0, 60.0) and spend.total.text() == "unknown"
    assert spend.rate.unpriced == 1 and spend.rate.text() == "unknown"
    assert spend.today.unknown
    rig.put_pod(pod("q", "uid-2", price="not-a-price", start=NOW - 60, end=None))
    assert rig.book.pool_spend("gpu").total == Money(0.0, 120.0)


def test_spent_is_cached_briefly_and_follows_the_pods(monkeypatch: pytest.MonkeyPatch) -> None:
    rig = Book()
    rig.put_pool(nodepool("gpu"))
    rig.put_pod(pod("p", "uid-1", price="36", start=NOW - 600, end=None))
    today, _ = rig.book.spent("gpu")
    assert today.dollars == pytest.approx(6.0)
    rig.clock.advance(0.5)
    assert rig.book.spent("gpu")[0] is today  # from the cache
    rig.put_pod(pod("q", "uid-2", price="36", start=NOW - 600, end=None))
    monkeypatch.setattr(spend, "DIRTY_GAP", 3600.0)
    assert rig.book.spent("gpu")[0] is today  # a Pod's cost changed: kept for DIRTY_GAP (real) seconds
    monkeypatch.setattr(spend, "DIRTY_GAP", 0.0)
    assert rig.book.spent("gpu")[0].dollars == pytest.approx(12.0 + 0.01)  # then summed again
    placed = pod("r", "uid-3", price="36", start=NOW, end=None)
    del placed["metadata"]["annotations"][names.BILLING_ANNOTATION]
    rig.put_pod(placed)  # placed, with no billing record yet: it adds no cost
    monkeypatch.setattr(spend, "DIRTY_GAP", 3600.0)
    assert "gpu" not in rig.book._dirty  # nothing to sum again
    monkeypatch.setattr(spend, "DIRTY_GAP", 0.0)
    rig.clock.advance(600)
    assert rig.book.spent("gpu")[0].dollars == pytest.approx(24.01)
    rig.pods.cache.pop("team/q")
    rig.book.pod_changed("team/q", None)
    assert rig.book.spent("gpu")[0].dollars == pytest.approx(12.005)


def test_today_starts_at_utc_midnight_and_the_month_at_its_first_day() -> None:
    rig = Book()
    rig.put_pool(nodepool("gpu"))
    midnight = bill.day_start(NOW)
    rig.put_pod(pod("p", "uid-1", price="36", start=midnight - 3600, end=midnight + 3600))  # $36 each side
    today, month = rig.book.spent("gpu")
    assert today.dollars == pytest.approx(36.0) and month.dollars == pytest.approx(72.0)


def test_the_report_has_the_pools_the_dearest_billing_pods_and_the_series() -> None:
    rig = Book()
    rig.put_pool(nodepool("gpu", budget={"maxHourlyCost": 40, "daily": 300}))
    rig.put_pool(nodepool("cpu"))
    rig.put_pod(pod("cheap", "uid-1", price="10", start=NOW - 3600, end=None))
    rig.put_pod(pod("dear", "uid-2", price="30", start=NOW - 3600, end=None))
    rig.put_pod(pod("done", "uid-3", price="50", start=NOW - 7200, end=NOW - 3600))
    report = rig.book.report()
    assert [p.pool for p in report.pools] == ["cpu", "gpu"]
    gpu = report.pools[1]
    assert gpu.budget is not None and gpu.budget.text() == "$40.00/h, $300.00/day"
    assert gpu.exceeded == "pool gpu at $90.00/h of $40.00/h"  # done has not finished: Running, still committed
    assert [p.name for p in report.top_pods] == ["dear", "cheap"]  # billing now, dearest first
    assert [(s.pool, s.provider, s.namespace, round(s.dollars, 6)) for s in report.series] == [
        ("gpu", "gpu-a", "team", 90.0)
    ]
    assert len(report.providers_hours) == 24 and len(report.providers_days) == 30
    assert report.providers_days[-1].by_provider == pytest.approx({"gpu-a": 90.0})


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ({"providers": [{"name": "gpu-a"}]}, None),
        ({"providers": [{"name": "gpu-a"}], "budget": {}}, "none"),
        (
            {"providers": [{"name": "gpu-a"}], "budget": {"monthly": 5000, "maxInstances": 10}},
            "$5,000.00/month, 10 instances",
        ),
        ({"providers": [{"name": "gpu-a"}], "budget": {"daily": "lots"}}, None),  # invalid: placement places none
    ],
)
def test_the_book_reads_the_budget_placement_parsed(spec: dict[str, Any], text: str | None) -> None:
    raw = {"metadata": {"name": "gpu"}, "spec": spec}
    try:
        state = PoolState("gpu", parse_pool(raw), "", raw)
    except PoolError as exc:
        state = PoolState("gpu", None, str(exc), raw)
    budget = budget_of(state)
    assert (budget.view().text() if budget is not None else None) == text


def test_the_report_lists_the_dearest_top_pods_and_counts_every_billing_pod() -> None:
    """The bound the console and the REST API rely on: past `TOP_PODS` billing Pods the report
    keeps the dearest and says how many bill; the metrics' report (no charts) has no buckets and
    no Pods, and the same pool figures."""
    rig = Book()
    rig.put_pool(nodepool("gpu"))
    count = spend.TOP_PODS + 3
    for i in range(count):
        rig.put_pod(pod(f"p{i:03d}", f"uid-{i}", price=str(1 + i), start=NOW - 3600, end=None))
    report = rig.book.report()
    assert len(report.top_pods) == spend.TOP_PODS and report.billing_pods == count
    assert report.top_pods[0].name == f"p{count - 1:03d}" and report.top_pods[-1].name == "p003"
    bare = rig.book.report(charts=False)
    assert bare.top_pods == () and bare.billing_pods == 0 and bare.providers_hours == ()
    assert bare.pools[0].hours == () and bare.pools[0].total == report.pools[0].total
