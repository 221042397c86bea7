"""The Pod's price ceiling (`nebula.io/max-hourly-price`) and the pool's budget in the optimizer:
tables of the skipped offerings and their reasons, and what the waiting Pod's Event says."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from kube import names
from placement.budgets import Limit, Verdict
from placement.optimizer import Obstacle, ProviderView, decide
from placement.pools import Budget, NodePool, PoolProvider
from placement.request import RequestError, WorkloadRequest, max_hourly_price
from placement.waiting import wait_for
from providers.base import Offering, Tier

NOW = 1_800_000_000.0
POOL = NodePool("train", (PoolProvider("gpu-a"), PoolProvider("gpu-b")), capacity_types=(Tier.SPOT, Tier.ON_DEMAND))
VIEWS = {
    "gpu-a": ProviderView(
        "gpu-a",
        (Offering("h100", 8, Tier.SPOT, "us-east-1", 10.0), Offering("h100", 8, Tier.ON_DEMAND, "us-east-1", 30.0)),
    ),
    "gpu-b": ProviderView(
        "gpu-b",
        (Offering("h100", 8, Tier.SPOT, "us-east-1", None), Offering("h100", 8, Tier.ON_DEMAND, "us-east-1", 3.0)),
    ),
}


def never_blocked(_: Any) -> None:
    return None


def annotated(value: str) -> dict[str, Any]:
    return {"metadata": {"annotations": {names.MAX_HOURLY_PRICE_ANNOTATION: value}}}


@pytest.mark.parametrize(("value", "ceiling"), [("3.50", 3.5), (" 3 ", 3.0), ("$12.5", 12.5), ("0", 0.0), (".5", 0.5)])
def test_the_ceiling_is_read_in_dollars(value: str, ceiling: float) -> None:
    assert max_hourly_price(annotated(value)) == ceiling
    assert max_hourly_price({"metadata": {}}) is None


@pytest.mark.parametrize("value", ["", "cheap", "-1", "3,50", "1e3", "nan", "inf", "3.5/h"])
def test_a_bad_ceiling_is_an_invalid_request_naming_the_annotation(value: str) -> None:
    with pytest.raises(RequestError) as caught:
        max_hourly_price(annotated(value))
    assert str(caught.value) == (
        f"annotation {names.MAX_HOURLY_PRICE_ANNOTATION}: {value!r} is not a price in dollars an hour;"
        ' write a number such as "3.50"'
    )


def skips(pool: NodePool, request: WorkloadRequest, headroom: float | None = None) -> list[tuple[str, str, Obstacle]]:
    decision = decide(pool, request, VIEWS, never_blocked, now=NOW, headroom=headroom)
    return [(s.provider, s.tier.value if s.tier else "", s.obstacle) for s in decision.skipped]


def test_the_ceiling_and_the_budget_skip_offerings_with_a_reason() -> None:
    """A ceiling drops dearer and unpriced offers; a budget without allowUnpriced drops unpriced
    ones; the headroom skips dearer candidates in walk order, so a cheaper one may fit."""
    ceiling = WorkloadRequest("h100", 8, max_hourly_price=5.0)
    decision = decide(POOL, ceiling, VIEWS, never_blocked, now=NOW)
    assert decision.chosen is not None and (decision.chosen.provider, decision.chosen.hourly_price) == ("gpu-b", 3.0)
    assert skips(POOL, ceiling) == [
        ("gpu-a", "Spot", Obstacle.ABOVE_CEILING),
        ("gpu-b", "Spot", Obstacle.ABOVE_CEILING),
        ("gpu-a", "OnDemand", Obstacle.ABOVE_CEILING),
    ]
    assert [s.why for s in decision.skipped] == [
        "$10.00/h: above the Pod's nebula.io/max-hourly-price $5.00",
        "price unknown: above the Pod's nebula.io/max-hourly-price $5.00",
        "$30.00/h: above the Pod's nebula.io/max-hourly-price $5.00",
    ]

    plain = WorkloadRequest("h100", 8)
    chosen = decide(POOL, plain, VIEWS, never_blocked, now=NOW).chosen
    assert chosen is not None and chosen.provider == "gpu-a"  # no budget, no ceiling: as before
    budgeted = NodePool("train", (PoolProvider("gpu-b"),), capacity_types=(Tier.SPOT,), budget=Budget())
    assert skips(budgeted, plain) == [("gpu-b", "Spot", Obstacle.UNPRICED)]
    unpriced_ok = NodePool(
        "train", (PoolProvider("gpu-b"),), capacity_types=(Tier.SPOT,), budget=Budget(allow_unpriced=True)
    )
    chosen = decide(unpriced_ok, plain, VIEWS, never_blocked, now=NOW).chosen
    assert chosen is not None and chosen.hourly_price is None

    hourly = replace(POOL, budget=Budget(max_hourly_cost=20))
    decision = decide(hourly, plain, VIEWS, never_blocked, now=NOW, headroom=5.0)
    assert decision.chosen is not None and decision.chosen.label() == "gpu-b OnDemand us-east-1"
    assert [(s.provider, s.obstacle, s.limit) for s in decision.skipped] == [
        ("gpu-b", Obstacle.UNPRICED, None),
        ("gpu-a", Obstacle.BUDGET, Limit.MAX_HOURLY_COST.value),
        ("gpu-a", Obstacle.BUDGET, Limit.MAX_HOURLY_COST.value),
    ]
    assert decision.skipped[1].why == "$10.00/h is more than the $5.00/h left of spec.budget.maxHourlyCost"


def test_no_candidate_names_the_ceiling() -> None:
    request = WorkloadRequest("h100", 8, max_hourly_price=2.0)
    wait = wait_for(decide(POOL, request, VIEWS, never_blocked, now=NOW), request, now=NOW)
    assert wait.reason == names.EVENT_NO_CANDIDATE
    assert wait.message.startswith("no offering in the pool is within the Pod's nebula.io/max-hourly-price $2.00: ")
    assert (
        "gpu-b/h100 x8 OnDemand in us-east-1 $3.00/h: above the Pod's nebula.io/max-hourly-price $2.00" in wait.message
    )


def test_a_budgeted_pool_refusing_unpriced_offerings_says_how_to_allow_them() -> None:
    pool = NodePool("train", (PoolProvider("gpu-b"),), capacity_types=(Tier.SPOT,), budget=Budget())
    request = WorkloadRequest("h100", 8)
    wait = wait_for(decide(pool, request, VIEWS, never_blocked, now=NOW), request, now=NOW)
    assert wait.reason == names.EVENT_NO_CANDIDATE
    assert "spec.budget.allowUnpriced: true allows them" in wait.message


def test_a_pod_held_by_the_budget_waits_with_the_limit_s_words() -> None:
    request = WorkloadRequest("h100", 8)
    hourly = Verdict(True, headroom=0.0, hourly="pool train at $20.00/h of $20.00/h")
    decision = decide(POOL, request, VIEWS, never_blocked, now=NOW, headroom=0.0)
    wait = wait_for(decision, request, now=NOW, budget=hourly, pool="train")
    assert (wait.reason, wait.budget_pool, wait.watched, wait.blocked) == (
        "BudgetExceeded",
        "train",
        frozenset(),
        False,
    )
    assert wait.message.startswith("pool train at $20.00/h of $20.00/h (spec.budget.maxHourlyCost; over it: gpu-a/")
    assert wait.next_look == NOW + 60

    midnight = NOW + 300
    daily = Verdict(False, "pool train spent $300.12 today of $300.00 (UTC day)", Limit.DAILY, resets_at=midnight)
    held = wait_for(decide(POOL, request, VIEWS, never_blocked, now=NOW), request, now=NOW, budget=daily, pool="train")
    words = "pool train spent $300.12 today of $300.00 (UTC day) (spec.budget.daily)"
    assert held.message == f"{words}; next look at 08:01:00Z at the latest"
    count = Verdict(False, "pool train at 3 of 3 instances", Limit.MAX_INSTANCES)
    again = wait_for(decide(POOL, request, VIEWS, never_blocked, now=NOW), request, now=NOW, budget=count, pool="train")
    assert again.waits_for != held.waits_for  # another limit: another Event
    assert wait_for(decision, request, now=NOW + 5, budget=hourly, pool="train").waits_for == wait.waits_for
