"""The optimizer: candidate walk order, strategies, skips with reasons, and blocked candidates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from kube import names
from placement.optimizer import Candidate, ProviderView, count_candidates, decide
from placement.pools import NodePool, PoolProvider, Strategy
from placement.request import WorkloadRequest
from placement.waiting import wait_for
from providers import shapecheck
from providers.base import Offering, Tier
from providers.shape import Shapes

H100 = WorkloadRequest("h100", 8)
NOW = 1000.0


def expand(regions: Sequence[str]) -> list[str]:
    groups = {"us": ["us-east-1", "us-west-2"]}
    return [r for token in regions for r in groups.get(token, [token])]


def offers(
    prices: dict[tuple[Tier, str], float], *, accelerator: str | None = "H100", count: int = 8
) -> tuple[Offering, ...]:
    return tuple(Offering(accelerator, count, tier, region, price) for (tier, region), price in prices.items())


VIEWS = {
    "gpu-a": ProviderView(
        "gpu-a",
        offers({(Tier.SPOT, "us-east-1"): 10, (Tier.ON_DEMAND, "us-east-1"): 30, (Tier.SPOT, "us-west-2"): 12}),
        expand,
    ),
    "gpu-b": ProviderView("gpu-b", offers({(Tier.SPOT, "us-east-1"): 20, (Tier.ON_DEMAND, "us-east-1"): 25}), expand),
}


def make_pool(
    strategy: Strategy = Strategy.ORDERED,
    providers: Sequence[str] = ("gpu-a", "gpu-b"),
    tiers: Sequence[Tier] = (Tier.SPOT, Tier.ON_DEMAND),
    regions: tuple[str, ...] = ("us",),
) -> NodePool:
    return NodePool("p", tuple(PoolProvider(p, regions) for p in providers), tuple(tiers), strategy, 60.0)


def never(candidate: Candidate) -> float | None:
    return None


def blocking(*labels: str, until: float = NOW + 30) -> object:
    def lookup(candidate: Candidate) -> float | None:
        return until if candidate.label() in labels else None

    return lookup


def test_ordered_walks_tiers_then_providers_then_regions() -> None:
    decision = decide(make_pool(), H100, VIEWS, never, now=NOW)
    assert decision.chosen is not None and decision.chosen.label() == "gpu-a Spot us-east-1"
    decision = decide(make_pool(), H100, VIEWS, blocking("gpu-a Spot us-east-1"), now=NOW)  # type: ignore[arg-type]
    assert decision.chosen is not None and decision.chosen.label() == "gpu-a Spot us-west-2"
    decision = decide(make_pool(), H100, VIEWS, blocking("gpu-a Spot us-east-1", "gpu-a Spot us-west-2"), now=NOW)  # type: ignore[arg-type]
    assert decision.chosen is not None and decision.chosen.label() == "gpu-b Spot us-east-1"
    assert "first unblocked (2 earlier blocked)" in decision.why
    assert [s.what for s in decision.skipped][-2:] == ["gpu-a Spot us-east-1", "gpu-a Spot us-west-2"]


def test_lowest_price_ranks_every_candidate_by_price_ties_in_listed_order() -> None:
    pool = make_pool(Strategy.LOWEST_PRICE)
    labels = ["gpu-a Spot us-east-1", "gpu-a Spot us-west-2", "gpu-b Spot us-east-1"]
    decision = decide(pool, H100, VIEWS, blocking(*labels), now=NOW)  # type: ignore[arg-type]
    assert decision.chosen is not None and decision.chosen.label() == "gpu-b OnDemand us-east-1"  # 25 < 30
    assert decision.chosen.hourly_price == 25
    assert "cheapest unblocked (3 cheaper blocked)" in decision.why


def test_all_blocked_gives_the_soonest_expiry_and_no_choice() -> None:
    def lookup(candidate: Candidate) -> float | None:
        return NOW + (5 if candidate.provider == "gpu-b" else 50)

    decision = decide(make_pool(), H100, VIEWS, lookup, now=NOW)
    assert decision.chosen is None and decision.retry_at == NOW + 5
    assert sum("blocked for" in s.why for s in decision.skipped) == 5


def test_no_candidate_lists_each_reason() -> None:
    views = dict(VIEWS, **{"gpu-c": ProviderView("gpu-c", None, expand)})
    sold_out = ProviderView("gpu-d", (Offering("H100", 8, Tier.SPOT, "us-east-1", 1.0, available=False),), expand)
    views["gpu-d"] = sold_out
    pool = make_pool(providers=("gpu-c", "gpu-d", "gpu-x"), tiers=(Tier.SPOT,), regions=("us-east-1",))
    decision = decide(pool, H100, views, never, now=NOW)
    assert decision.chosen is None and decision.retry_at is None and decision.unknown
    reasons = {s.what: s.why for s in decision.skipped}
    assert reasons["gpu-c"] == "offerings unknown: the provider could not be asked"
    assert reasons["gpu-d Spot us-east-1"] == "sold out (offering unavailable)"
    assert reasons["gpu-x"] == "not registered on this manager"


@pytest.mark.parametrize("request_", [WorkloadRequest("h100", 1), WorkloadRequest("a100", 8), WorkloadRequest(None, 0)])
def test_no_offering_serves_another_accelerator_another_count_or_a_cpu_only_request(request_: WorkloadRequest) -> None:
    assert decide(make_pool(), request_, VIEWS, never, now=NOW).chosen is None


def test_shapes_must_match_accelerator_and_count_cpu_only_needs_cpu_rows() -> None:
    per_gpu = {"gpu-a": ProviderView("gpu-a", offers({(Tier.SPOT, "us-east-1"): 2}, count=0), expand)}
    chosen = decide(make_pool(providers=("gpu-a",)), WorkloadRequest("h100", 3), per_gpu, never, now=NOW).chosen
    assert chosen is not None
    cpu = {
        "gpu-a": ProviderView("gpu-a", offers({(Tier.ON_DEMAND, "us-east-1"): 0.1}, accelerator=None, count=0), expand)
    }
    chosen = decide(make_pool(providers=("gpu-a",)), WorkloadRequest(None, 0), cpu, never, now=NOW).chosen
    assert chosen is not None and chosen.tier is Tier.ON_DEMAND


def test_a_region_the_provider_does_not_sell_in_is_skipped_with_a_reason() -> None:
    pool = make_pool(providers=("gpu-b",), tiers=(Tier.SPOT,), regions=("us",))
    decision = decide(pool, H100, VIEWS, never, now=NOW)
    assert decision.chosen is not None and decision.chosen.region == "us-east-1"
    decision = decide(
        make_pool(providers=("gpu-b",), tiers=(Tier.SPOT,), regions=("us-west-2",)), H100, VIEWS, never, now=NOW
    )
    assert [s.text() for s in decision.skipped] == ["gpu-b Spot us-west-2: no h100 x8 offering in this region"]


def test_candidate_count_counts_tier_provider_region_with_an_available_offering() -> None:
    assert count_candidates(make_pool(), VIEWS) == 5
    assert count_candidates(make_pool(tiers=(Tier.ON_DEMAND,)), VIEWS) == 2


def test_a_provider_that_cannot_serve_the_pods_shape_is_skipped_with_the_field_named() -> None:
    sidecar_pod = {"spec": {"containers": [{"name": "a"}, {"name": "metrics"}]}}
    request = WorkloadRequest("h100", 8, shapecheck.needs(sidecar_pod))
    views = dict(VIEWS, **{"gpu-b": replace(VIEWS["gpu-b"], shapes=Shapes(several_containers=True))})
    decision = decide(make_pool(), request, views, never, now=NOW)
    assert decision.chosen is not None and decision.chosen.label() == "gpu-b Spot us-east-1"
    assert decision.skipped[0].text() == "gpu-a: cannot serve spec.containers[1] (several containers)"
    assert all(skip.provider == "gpu-b" for skip in decision.skipped[1:])  # gpu-a once, at its first tier


def test_no_provider_serving_the_shape_waits_for_nothing_and_says_so() -> None:
    claim_pod = {"spec": {"containers": [{"name": "a"}], "volumes": [{"name": "d", "persistentVolumeClaim": {}}]}}
    request = WorkloadRequest("h100", 8, shapecheck.needs(claim_pod))
    decision = decide(make_pool(), request, VIEWS, never, now=NOW)
    assert decision.chosen is None and decision.retry_at is None
    wait = wait_for(decision, request, now=NOW)
    assert wait.reason == names.EVENT_NO_CANDIDATE
    assert wait.message.startswith(
        "no provider in the pool can serve this Pod's shape: gpu-a cannot serve spec.volumes[0].persistentVolumeClaim "
        "(persistentVolumeClaim volumes), gpu-b cannot serve"
    )
