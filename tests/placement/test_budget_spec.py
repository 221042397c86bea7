"""`spec.budget` of a NodePool parsed into a frozen Budget, and the message naming the field for
each mistake (the CRD schema checks the same, but a cluster may skip schemas)."""

from __future__ import annotations

from typing import Any

import pytest

from placement.pools import Budget, OnExceeded, PoolError, parse_pool


def pool(budget: Any = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"providers": [{"name": "gpu-a"}]}
    if budget is not None:
        spec["budget"] = budget
    return {"metadata": {"name": "p"}, "spec": spec}


def test_a_pool_without_budget_has_none_and_an_empty_budget_has_no_limit() -> None:
    assert parse_pool(pool()).budget is None
    empty = parse_pool(pool({})).budget
    assert empty == Budget()
    assert empty is not None and empty.view().text() == "none" and not empty.allow_unpriced


def test_every_field_parses_and_shows_in_the_budget_column() -> None:
    raw = {
        "maxHourlyCost": 20,
        "daily": 300.5,
        "monthly": 5000,
        "maxInstances": 10,
        "onExceeded": "Stop",
        "allowUnpriced": True,
    }
    budget = parse_pool(pool(raw)).budget
    assert budget == Budget(20.0, 300.5, 5000.0, 10, OnExceeded.STOP, True)
    assert budget is not None
    assert budget.view().text() == "$20.00/h, $300.50/day, $5,000.00/month, 10 instances"
    assert budget.view().on_exceeded == "Stop" and budget.view().allow_unpriced


@pytest.mark.parametrize(
    ("budget", "message"),
    [
        ("20", "spec.budget: must be an object such as {maxHourlyCost: 20, daily: 300}"),
        ({"maxHourlyCost": -1}, "spec.budget.maxHourlyCost: -1 is negative; use 0 or more"),
        ({"daily": "300"}, "spec.budget.daily: '300' is not a number; write dollars such as 300"),
        ({"monthly": True}, "spec.budget.monthly: True is not a number"),
        ({"maxInstances": 2.5}, "spec.budget.maxInstances: 2.5 is not a whole number >= 0"),
        ({"maxInstances": -3}, "spec.budget.maxInstances: -3 is not a whole number >= 0"),
        ({"maxHourly": 20}, "spec.budget: unknown fields ['maxHourly']; allowed: maxHourlyCost, daily"),
        (
            {"onExceeded": "stop"},
            "spec.budget.onExceeded: 'stop' is not one of Hold, Stop (case matters); did you mean Stop?",
        ),
        ({"onExceeded": "Pause"}, "spec.budget.onExceeded: 'Pause' is not one of Hold, Stop (case matters)"),
        ({"allowUnpriced": "yes"}, "spec.budget.allowUnpriced: 'yes' is not true or false"),
    ],
)
def test_a_bad_budget_names_the_field_and_the_fix(budget: Any, message: str) -> None:
    with pytest.raises(PoolError) as caught:
        parse_pool(pool(budget))
    assert message in str(caught.value)
    if budget == {"onExceeded": "Pause"}:
        assert "did you mean" not in str(caught.value)
