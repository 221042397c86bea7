"""The spend book: what each NodePool has spent, computed from facts (design I12, issue 35).

A pool's spend = its settled ledger (`status.spend.settled`, deleted Pods, `placement.ledger`)
+ the sum over its Pods still present (not folded yet) of `hourly price x billed seconds` from
each Pod's `nebula.io/billing` record. Nothing is stored per Pod, so a restart or a leader handoff
recomputes the same figures, and a uid in the ledger is never counted live too. A Pod without a
known price bills unpriced seconds, never $0.

Built by `placement.wiring.Placement` over the controller's Pod reflector (kept indexed by the
controller's `_on_pod` hook, `pod_changed`) and the `PoolCache`; read by the budget check
(`spent`, cached: it runs per placement decision), the status publisher (`placement.settle`) and
the console (`report`). Never writes anything; reads the clock only through the injected one.
Tests: tests/placement/test_spend_book.py::test_a_pools_spend_is_settled_plus_live_and_counts_a_folded_uid_once,
tests/placement/test_spend_book.py::test_an_unknown_price_is_unpriced_never_zero.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kube import billing as bill
from kube import names
from kube.reflector import Reflector
from placement import budgets
from placement import ledger as led
from placement.poolcache import PoolCache, PoolState
from placement.pools import Budget
from placement.request import placed_pool
from placement.spendview import Bucket, Money, PodSpend, PoolSpend, Rate, Series, SpendReport

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]
Verdict = tuple[str, str]  # (BudgetExceeded reason, message)
SPENT_CACHE = 1.0  # seconds `spent` answers from its cache while nothing of the pool changed
# Seconds (monotonic) a pool's cached `spent` is still used after a Pod's cost changed: bounds the
# sums over the whole pool to 10 a second while Pods churn (one per decision would be O(N^2)).
DIRTY_GAP = 0.1
TOP_PODS = 50  # the dearest billing Pods a report lists (docs/console.md, docs/api.md)
HOURS_SHOWN = 24
DAYS_SHOWN = 30


@dataclass(frozen=True)
class LivePod:
    """What the book reads of one Pod of a pool."""

    uid: str
    namespace: str
    name: str
    provider: str
    price: float | None
    billing: bill.Billing
    committed: bool  # placed and unfinished (counts in the hourly rate and the instance count)
    created: str

    def money(self, now: float, since: float = -math.inf) -> Money:
        seconds = self.billing.seconds(now=now, since=since)
        if self.price is None:
            return Money(0.0, seconds)
        return Money(bill.dollars(self.price, seconds), 0.0)


def billing_of(pod: Mapping[str, Any]) -> bill.Billing:
    """The Pod's billing record; EMPTY (with a debug line) when it is not one Nebula wrote."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(names.BILLING_ANNOTATION)
    try:
        return bill.parse(text)
    except bill.BillingError as exc:
        logger.debug("Pod %s: ignoring its billing record: %s", (pod.get("metadata") or {}).get("name"), exc)
        return bill.EMPTY


def live_pod(pod: Mapping[str, Any]) -> LivePod:
    meta = pod.get("metadata") or {}
    provider = str(((pod.get("spec") or {}).get("nodeSelector") or {}).get(names.PROVIDER_KEY) or "")
    return LivePod(
        uid=str(meta.get("uid", "")),
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        provider=provider,
        price=budgets.price_of(pod),
        billing=billing_of(pod),
        committed=bool(placed_pool(pod)),
        created=str(meta.get("creationTimestamp", "")),
    )


def pool_of(pod: Mapping[str, Any] | None) -> str:
    """The pool a Pod was placed through (its annotation), finished or not; "" if none."""
    if pod is None:
        return ""
    return str(((pod.get("metadata") or {}).get("annotations") or {}).get(names.POOL_ANNOTATION) or "")


def budget_of(state: PoolState | None) -> Budget | None:
    """The pool's parsed `spec.budget` (placement.pools validated it); None: no budget, or an
    invalid pool (placement places none of its Pods)."""
    return None if state is None or state.pool is None else state.pool.budget


def verdict_of(
    pool: str, budget: Budget | None, rate: Rate, instances: int, today: Money, month: Money, now: float
) -> Verdict | None:
    """Why the pool's budget holds new Pods back now (reason, message), or None: the budget
    book's pure verdict, read without its reservations (a SpendBook on its own, in tests)."""
    found = budgets.verdict(
        pool, budget, hourly=rate.dollars, instances=instances, today=today.dollars, month=month.dollars, now=now
    )
    if not found.allowed and found.limit is not None and found.message is not None:
        return found.limit.value, found.message
    if budget is not None and budget.max_hourly_cost is not None and rate.dollars >= budget.max_hourly_cost:
        return budgets.Limit.MAX_HOURLY_COST.value, found.hourly or ""
    return None


class SpendBook:
    """Thread-safe. `clock()` is epoch seconds (tests pass a fake one)."""

    def __init__(
        self,
        pods: Reflector,
        pools: PoolCache,
        *,
        clock: Callable[[], float] = time.time,
        cache_for: float = SPENT_CACHE,
    ) -> None:
        self._pods = pods
        self._pools = pools
        self.clock = clock
        self._cache_for = cache_for
        self._lock = threading.Lock()
        self._index: dict[str, set[str]] = defaultdict(set)  # pool -> Pod keys placed through it
        self._pool_of: dict[str, str] = {}  # Pod key -> its pool
        self._cost_of: dict[str, tuple[Any, Any]] = {}  # Pod key -> (billing record, price) as last seen
        # pool -> (at on `clock`, the ledger it read, the value, when on the monotonic clock)
        self._spent: dict[str, tuple[float, Any, tuple[Money, Money], float]] = {}
        self._dirty: set[str] = set()  # pools a Pod's cost changed in since their `spent` was cached
        self._ledgers: dict[str, tuple[Any, led.Ledger]] = {}  # pool -> (status identity, parsed)

    # -- inputs ------------------------------------------------------------------------------
    def pod_changed(self, key: str, pod: JsonDict | None) -> None:
        """The controller's Pod reflector saw `key` change (called from its `_on_pod`). Only a
        change of what the Pod costs (its billing record or price, or the Pod going) clears
        the pool's `spent` cache: placing a Pod, which adds none, must not make every next
        placement decision sum the whole pool again (bench/budgets.py)."""
        pool = pool_of(pod)
        annotations = ((pod or {}).get("metadata") or {}).get("annotations") or {}
        record = annotations.get(names.BILLING_ANNOTATION)
        cost = (record, annotations.get(names.HOURLY_PRICE_ANNOTATION))
        with self._lock:
            before = self._pool_of.pop(key, "")
            costed = self._cost_of.pop(key, None)
            if before:
                self._index[before].discard(key)
            if pool:
                self._pool_of[key] = pool
                self._index[pool].add(key)
                self._cost_of[key] = cost
            changed = record is not None if costed is None else cost != costed
            if pod is None or changed or (before != pool and record is not None):
                self._dirty.update(name for name in (before, pool) if name)

    # -- reads -------------------------------------------------------------------------------
    def ledger(self, pool: str) -> led.Ledger:
        """The pool's settled ledger as the pool cache holds it (EMPTY, with a warning, if garbled)."""
        state = self._pools.get(pool)
        settled = (((state.raw.get("status") or {}).get("spend") or {}).get("settled")) if state else None
        with self._lock:
            cached = self._ledgers.get(pool)
            if cached is not None and cached[0] is settled:
                return cached[1]
        try:
            parsed = led.parse(settled)
        except led.LedgerError as exc:
            logger.warning("NodePool %s: %s; reading it as empty", pool, exc)
            parsed = led.EMPTY
        with self._lock:
            self._ledgers[pool] = (settled, parsed)
        return parsed

    def live(self, pool: str) -> list[LivePod]:
        """The pool's Pods still present whose spend is not in its ledger yet."""
        folded = set(self.ledger(pool).pods)
        with self._lock:
            keys = list(self._index.get(pool, ()))
        with self._pods.lock:
            found = [self._pods.cache.get(key) for key in keys]
        pods = [live_pod(p) for p in found if p is not None and pool_of(p) == pool]
        return [p for p in pods if p.uid not in folded]

    def spent(self, pool: str) -> tuple[Money, Money]:
        """(today, this month) of `pool`: what a `daily` / `monthly` budget compares. Cheap:
        answered from a cache for up to `cache_for` seconds while nothing of the pool changes,
        and for up to DIRTY_GAP (real) seconds after a Pod's cost changed."""
        now, fresh = self.clock(), time.monotonic()
        settled = self.ledger(pool)
        with self._lock:
            hit = self._spent.get(pool)
            if hit is not None and hit[1] is settled and 0 <= now - hit[0] < self._cache_for:
                if pool not in self._dirty or fresh - hit[3] < DIRTY_GAP:
                    return hit[2]
            self._dirty.discard(pool)
        value = self._today_month(pool, settled, self.live(pool), now)
        with self._lock:
            self._spent[pool] = (now, settled, value, fresh)
        return value

    def _today_month(self, pool: str, settled: led.Ledger, live: list[LivePod], now: float) -> tuple[Money, Money]:
        day, month = bill.day_start(now), bill.month_start(now)
        today = Money(settled.dollars_since(led.day_key(day)))
        this_month = Money(settled.dollars_since(led.day_key(month)))
        for pod in live:
            today += pod.money(now, day)
            this_month += pod.money(now, month)
        return today, this_month

    def pool_spend(
        self, pool: str, *, verdict: Callable[[str], Verdict | None] | None = None, buckets: bool = True
    ) -> PoolSpend:
        """Everything shown of one pool now; `verdict` (the budget book's) overrides the
        book's own reading of the budget; without `buckets` (the status) no hours and days."""
        now = self.clock()
        settled, live = self.ledger(pool), self.live(pool)
        state = self._pools.get(pool)
        budget = budget_of(state)
        committed = [p for p in live if p.committed]
        rate = Rate(sum(p.price or 0.0 for p in committed), sum(1 for p in committed if p.price is None))
        today, month = self._today_month(pool, settled, live, now)
        total = Money(sum(r.dollars for r in settled.total), settled.unpriced_seconds())
        for pod in live:
            total += pod.money(now)
        why = (
            verdict(pool) if verdict is not None else verdict_of(pool, budget, rate, len(committed), today, month, now)
        )
        return PoolSpend(
            pool=pool,
            rate=rate,
            instances=len(committed),
            today=today,
            month=month,
            total=total,
            budget=None if budget is None else budget.view(),
            exceeded=None if why is None else why[1],
            hours=tuple(_buckets(settled.hours, led.hour_keys(now, HOURS_SHOWN), live, now, 3_600.0))
            if buckets
            else (),
            days=tuple(_buckets(settled.days, led.day_keys(now, DAYS_SHOWN), live, now, 86_400.0)) if buckets else (),
        )

    def series(self, pool: str) -> list[Series]:
        """Total dollars per (provider, namespace) of `pool`, settled and live."""
        now = self.clock()
        sums: dict[tuple[str, str], float] = defaultdict(float)
        for row in self.ledger(pool).total:
            sums[row.provider, row.namespace] += row.dollars
        for pod in self.live(pool):
            sums[pod.provider, pod.namespace] += pod.money(now).dollars
        return [Series(pool, provider, namespace, value) for (provider, namespace), value in sorted(sums.items())]

    def report(self, *, verdict: Callable[[str], Verdict | None] | None = None, charts: bool = True) -> SpendReport:
        """Every pool's spend, the series and, with `charts` (the Spend page, the REST API; not
        the metrics), the hours' and days' buckets and the dearest billing Pods."""
        now = self.clock()
        names_ = [state.name for state in self._pools.pools()]
        pools = tuple(self.pool_spend(name, verdict=verdict, buckets=charts) for name in names_)
        billing = self._billing_pods(now) if charts else []
        top = sorted(billing, key=lambda p: (-(p.hourly_price or 0.0), p.namespace, p.name))
        return SpendReport(
            at=datetime.fromtimestamp(now, UTC),
            pools=pools,
            top_pods=tuple(top[:TOP_PODS]),
            billing_pods=len(top),
            series=tuple(s for name in names_ for s in self.series(name)),
            providers_hours=_sum_buckets(p.hours for p in pools),
            providers_days=_sum_buckets(p.days for p in pools),
        )

    def _billing_pods(self, now: float) -> list[PodSpend]:
        found = []
        for pod in self._pods.snapshot():
            one = live_pod(pod)
            if one.billing.billing:
                pool, provider = pool_of(pod) or None, one.provider or None
                found.append(PodSpend(one.namespace, one.name, pool, provider, one.price, True, one.money(now)))
        return found


def _buckets(
    settled: Mapping[str, Mapping[str, float]], keys: list[str], live: list[LivePod], now: float, width: float
) -> Iterable[Bucket]:
    for key in keys:
        start = led.at_hour(key)
        by: dict[str, float] = {p: v for p, v in settled.get(key, {}).items()}
        since = start.timestamp()
        for pod in live:
            if pod.price is not None:
                seconds = pod.billing.seconds(now=now, since=since, until=since + width)
                if seconds > 0:
                    by[pod.provider] = by.get(pod.provider, 0.0) + bill.dollars(pod.price, seconds)
        yield Bucket(start, by)


def _sum_buckets(rows: Iterable[tuple[Bucket, ...]]) -> tuple[Bucket, ...]:
    merged: dict[datetime, dict[str, float]] = {}
    for buckets in rows:
        for bucket in buckets:
            by = merged.setdefault(bucket.start, {})
            for provider, value in bucket.by_provider.items():
                by[provider] = by.get(provider, 0.0) + value
    return tuple(Bucket(start, by) for start, by in sorted(merged.items()))
