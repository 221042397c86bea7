"""NodePool parsing: defaults, and a message a person can act on for each mistake."""

from __future__ import annotations

from typing import Any

import pytest

from placement.pools import PoolError, Strategy, format_duration, parse_duration, parse_pool
from providers.base import Tier


def pool(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "generation": 2}, "spec": {"providers": [{"name": "gpu-a"}], **spec}}


def test_defaults_are_ordered_on_demand_then_spot_and_five_minutes() -> None:
    parsed = parse_pool(pool())
    assert parsed.capacity_types == (Tier.ON_DEMAND, Tier.SPOT)
    assert parsed.strategy is Strategy.ORDERED
    assert parsed.blocklist_ttl == 300.0
    assert parsed.generation == 2


def test_a_full_pool_parses_in_listed_order() -> None:
    parsed = parse_pool(
        pool(
            providers=[{"name": "gpu-b", "regions": ["us", " eu-west-1 "]}, {"name": "gpu-a"}],
            capacityTypes=["Spot", "OnDemand"],
            strategy="LowestPrice",
            failover={"blocklistTTL": "1m30s"},
        )
    )
    assert [(p.name, p.regions) for p in parsed.providers] == [("gpu-b", ("us", "eu-west-1")), ("gpu-a", ())]
    assert parsed.capacity_types == (Tier.SPOT, Tier.ON_DEMAND)
    assert parsed.strategy is Strategy.LOWEST_PRICE
    assert parsed.blocklist_ttl == 90.0


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"providers": []}, "spec.providers: list at least one provider"),
        ({"providers": [{"name": "GPU A"}]}, "spec.providers[0].name: 'GPU A' is not a provider alias"),
        ({"providers": [{"name": "a"}, {"name": "a"}]}, "'a' is listed twice"),
        ({"providers": [{"name": "a", "zone": "x"}]}, "unknown fields ['zone']"),
        ({"providers": [{"name": "a", "regions": "us"}]}, "spec.providers[0].regions: must be a list"),
        ({"capacityTypes": ["spot"]}, "spec.capacityTypes[0]: 'spot' is not one of Spot, OnDemand"),
        (
            {"capacityTypes": ["on-demand"]},
            "'on-demand' is not one of Spot, OnDemand (case matters); did you mean OnDemand?",
        ),
        ({"capacityTypes": ["Reserved"]}, "'Reserved' is not one of Spot, OnDemand (case matters)"),
        ({"capacityTypes": []}, "spec.capacityTypes: list Spot and/or OnDemand"),
        ({"strategy": "Weighted"}, "spec.strategy: 'Weighted' is not one of Ordered, LowestPrice"),
        (
            {"strategy": "lowestPrice"},
            "spec.strategy: 'lowestPrice' is not one of Ordered, LowestPrice (case matters); did you mean LowestPrice?",
        ),
        ({"failover": {"blocklistTTL": "5 minutes"}}, "blocklistTTL: '5 minutes' is not a duration"),
        ({"failover": {"blocklistTTL": "48h"}}, "use between 1s and 24h"),
        ({"failover": "5m"}, "spec.failover: must be an object"),
    ],
)
def test_invalid_pools_say_which_field_and_how_to_fix_it(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(PoolError, match=None) as caught:
        parse_pool(pool(**spec))
    assert message in str(caught.value)


def test_a_pool_without_spec_is_invalid() -> None:
    with pytest.raises(PoolError, match="spec: required"):
        parse_pool({"metadata": {"name": "p"}})


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("5m", 300), ("1h30m", 5400), ("1.5m", 90), ("2h", 7200)])
def test_durations_parse_and_format(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds
    assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.parametrize("text", ["", "5", "m", "5d", "-5s", None, 30])
def test_bad_durations_are_refused(text: Any) -> None:
    with pytest.raises(PoolError):
        parse_duration(text)
