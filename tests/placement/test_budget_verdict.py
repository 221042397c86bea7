"""The budget verdict (`placement.budgets.verdict`) as a table: where a pool stands against its
`spec.budget` -> may it place one more Pod, the BudgetExceeded wording and which limit holds."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from placement.budgets import Limit, Verdict, fits, next_month, verdict
from placement.pools import Budget

NOW = datetime(2026, 12, 5, 10, 0, 0, tzinfo=UTC).timestamp()
MIDNIGHT = datetime(2026, 12, 6, tzinfo=UTC).timestamp()
NEW_YEAR = datetime(2027, 1, 1, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("budget", "hourly", "instances", "today", "month", "expected"),
    [
        pytest.param(None, 99.0, 99, 9e9, 9e9, Verdict(True), id="no budget: anything goes"),
        pytest.param(Budget(), 99.0, 99, 9e9, 9e9, Verdict(True), id="an empty budget has no limit"),
        pytest.param(
            Budget(max_hourly_cost=20),
            19.2,
            2,
            0,
            0,
            Verdict(True, headroom=pytest.approx(0.8), hourly="pool gpu-a at $19.20/h of $20.00/h"),
            id="hourly: never refuses outright, gives the headroom",
        ),
        pytest.param(
            Budget(max_instances=3),
            0,
            3,
            0,
            0,
            Verdict(False, "pool gpu-a at 3 of 3 instances", Limit.MAX_INSTANCES),
            id="instances reached",
        ),
        pytest.param(Budget(max_instances=3), 0, 2, 0, 0, Verdict(True), id="instances below"),
        pytest.param(
            Budget(daily=300),
            0,
            0,
            300.12,
            300.12,
            Verdict(False, "pool gpu-a spent $300.12 today of $300.00 (UTC day)", Limit.DAILY, resets_at=MIDNIGHT),
            id="daily reached: lapses at the next UTC midnight",
        ),
        pytest.param(Budget(daily=300), 0, 0, 299.99, 299.99, Verdict(True), id="daily below"),
        pytest.param(
            Budget(monthly=5000),
            0,
            0,
            10,
            5000,
            Verdict(
                False,
                "pool gpu-a spent $5,000.00 this month of $5,000.00 (UTC month)",
                Limit.MONTHLY,
                resets_at=NEW_YEAR,
            ),
            id="monthly reached (>=): lapses at the next month start",
        ),
        pytest.param(
            Budget(max_hourly_cost=20, daily=300, max_instances=3),
            25.0,
            3,
            400,
            400,
            Verdict(False, "pool gpu-a at 3 of 3 instances", Limit.MAX_INSTANCES),
            id="several: instances first, then daily, then monthly",
        ),
        pytest.param(
            Budget(max_hourly_cost=20, daily=300, monthly=1000),
            25.0,
            3,
            10,
            1000.5,
            Verdict(
                False,
                "pool gpu-a spent $1,000.50 this month of $1,000.00 (UTC month)",
                Limit.MONTHLY,
                resets_at=NEW_YEAR,
            ),
            id="monthly before hourly",
        ),
    ],
)
def test_the_verdict_names_the_limit_that_holds(
    budget: Budget | None, hourly: float, instances: int, today: float, month: float, expected: Verdict
) -> None:
    assert verdict("gpu-a", budget, hourly=hourly, instances=instances, today=today, month=month, now=NOW) == expected


def test_an_offering_fits_within_the_headroom_and_an_unpriced_one_is_not_held_by_it() -> None:
    at_limit = verdict("p", Budget(max_hourly_cost=20), hourly=10.0, instances=1, today=0, month=0, now=NOW)
    assert fits(10.0, at_limit) and fits(0.1 + 0.2 + 9.7, at_limit)  # float noise is not over
    assert not fits(10.01, at_limit)
    assert fits(None, at_limit)  # only allowUnpriced lets an unpriced offering this far
    held = verdict("p", Budget(max_instances=0), hourly=0, instances=0, today=0, month=0, now=NOW)
    assert not fits(0.0, held)


def test_the_next_month_starts_on_the_first_at_midnight_utc() -> None:
    assert next_month(NOW) == NEW_YEAR
    end_of_january = datetime(2027, 1, 31, 23, 59, tzinfo=UTC).timestamp()
    assert next_month(end_of_january) == datetime(2027, 2, 1, tzinfo=UTC).timestamp()
