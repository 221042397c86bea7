"""The read side of spend: frozen values the console, the REST API and the metrics read.

Built by `placement.spend.SpendBook.report()` (the accrual over the pools' settled ledgers and
the live Pods' billing records) and handed out by `Placement.spend_report()`. Pure values and
their wording; never computes spend itself. A price that is not known is never zero: `Money`
carries the billed seconds it could not price, and reads "unknown" when it priced nothing.
Tests: tests/placement/test_spendview.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class Money:
    """Dollars spent, and the seconds billed by instances without a known price (not in `dollars`)."""

    dollars: float = 0.0
    unpriced_seconds: float = 0.0

    @property
    def unknown(self) -> bool:
        """Nothing priced and something unpriced billed: the amount is unknown."""
        return self.unpriced_seconds > 0 and self.dollars == 0

    def text(self) -> str:
        """`$12.34`, `$12.34 + unpriced` (a part could not be priced), or `unknown`."""
        if self.unknown:
            return "unknown"
        amount = f"${self.dollars:,.2f}"
        return amount + " + unpriced" if self.unpriced_seconds > 0 else amount

    def __add__(self, other: Money) -> Money:
        return Money(self.dollars + other.dollars, self.unpriced_seconds + other.unpriced_seconds)


def dollars(today_month: tuple[Money, Money]) -> tuple[float, float]:
    """(today, this month) in dollars: what a budget's `daily` / `monthly` limit compares."""
    return today_month[0].dollars, today_month[1].dollars


ZERO = Money()


@dataclass(frozen=True)
class Rate:
    """Dollars an hour of what bills now (or is reserved), and how many of those have no price."""

    dollars: float = 0.0
    unpriced: int = 0

    def text(self) -> str:
        """`$19.20/h`, `$19.20/h + 2 unpriced`, or `unknown` (only unpriced instances bill)."""
        if self.unpriced and not self.dollars:
            return "unknown"
        amount = f"${self.dollars:,.2f}/h"
        return amount + f" + {self.unpriced} unpriced" if self.unpriced else amount


@dataclass(frozen=True)
class Bucket:
    """One hour or one UTC day of spend, by provider (the chart's bars)."""

    start: datetime
    by_provider: Mapping[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.by_provider.values())


@dataclass(frozen=True)
class BudgetView:
    """A pool's budget as its spec says it, and where the pool stands against each limit."""

    max_hourly_cost: float | None = None
    daily: float | None = None
    monthly: float | None = None
    max_instances: int | None = None
    on_exceeded: str = "Hold"
    allow_unpriced: bool = False

    def text(self) -> str:
        """For `kubectl get nodepools`' BUDGET column: `$20.00/h, $300.00/day` or `none`."""
        parts = []
        if self.max_hourly_cost is not None:
            parts.append(f"${self.max_hourly_cost:,.2f}/h")
        if self.daily is not None:
            parts.append(f"${self.daily:,.2f}/day")
        if self.monthly is not None:
            parts.append(f"${self.monthly:,.2f}/month")
        if self.max_instances is not None:
            parts.append(f"{self.max_instances} instances")
        return ", ".join(parts) or "none"


@dataclass(frozen=True)
class PoolSpend:
    """One NodePool's spend: settled (deleted Pods) and live (its Pods) together."""

    pool: str
    rate: Rate  # what bills now, plus what placement reserved and is not billing yet
    instances: int  # placed Pods not finished (the maxInstances count)
    today: Money
    month: Money
    total: Money
    budget: BudgetView | None
    exceeded: str | None  # the BudgetExceeded message while a budget holds new Pods back, else None
    hours: tuple[Bucket, ...] = ()  # the last 24 hours, oldest first
    days: tuple[Bucket, ...] = ()  # the last 30 UTC days, oldest first


@dataclass(frozen=True)
class PodSpend:
    """One Pod's spend, for the table of the most expensive Pods now."""

    namespace: str
    name: str
    pool: str | None
    provider: str | None
    hourly_price: float | None  # None: unknown
    billing: bool  # its instance bills now
    total: Money


@dataclass(frozen=True)
class Series:
    """Total spend of one (pool, provider, namespace): `nebula_spend_dollars_total`'s sample."""

    pool: str
    provider: str
    namespace: str
    dollars: float


@dataclass(frozen=True)
class SpendReport:
    """Everything the console shows of money, as of `at`."""

    at: datetime
    pools: tuple[PoolSpend, ...] = ()
    top_pods: tuple[PodSpend, ...] = ()  # billing Pods, dearest hourly price first (bounded)
    billing_pods: int = 0  # how many Pods bill now (top_pods holds the dearest of them)
    series: tuple[Series, ...] = ()
    providers_hours: tuple[Bucket, ...] = ()  # every pool together, by provider, last 24 hours
    providers_days: tuple[Bucket, ...] = ()  # every pool together, by provider, last 30 days
