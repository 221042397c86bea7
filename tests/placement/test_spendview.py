"""How spend reads: unknown is never zero, budgets worded as kubectl shows them."""

from __future__ import annotations

from placement.spendview import BudgetView, Money, Rate


def test_an_unknown_price_reads_unknown_never_zero() -> None:
    assert Money(0.0, 3600.0).text() == "unknown"
    assert Money(12.345, 60.0).text() == "$12.35 + unpriced"
    assert Money(1234.5).text() == "$1,234.50"
    assert Money().text() == "$0.00"
    assert (Money(1.0) + Money(0.0, 5.0)) == Money(1.0, 5.0)


def test_a_rate_counts_its_unpriced_instances() -> None:
    assert Rate(19.2).text() == "$19.20/h"
    assert Rate(19.2, 2).text() == "$19.20/h + 2 unpriced"
    assert Rate(0.0, 1).text() == "unknown"


def test_a_budget_reads_as_its_limits() -> None:
    assert BudgetView(max_hourly_cost=20, daily=300).text() == "$20.00/h, $300.00/day"
    assert BudgetView(max_instances=3).text() == "3 instances"
    assert BudgetView().text() == "none"
