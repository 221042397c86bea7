"""The optimizer and the wait sentence with a pool's egress: a provider whose capabilities lack
the pool's mode is no candidate, named once with why; candidateCount leaves it out; the
NoCandidate sentence says nobody can enforce the pool's spec.egress. The catalog fills a
view's modes from `capabilities().egress`."""

from __future__ import annotations

import uuid

from kube import names
from placement.catalog import Catalog
from placement.optimizer import Candidate, Decision, Obstacle, ProviderView, Skip, count_candidates, decide
from placement.pools import NodePool, PoolProvider
from placement.request import WorkloadRequest
from placement.waiting import wait_for
from providers.base import Offering, Tier
from providers.egress import Egress, EgressMode
from providers.fake import FakeProvider

H100 = WorkloadRequest("h100", 8)
NOW = 1000.0
OPEN_ONLY = frozenset({EgressMode.OPEN})
SEALS = frozenset({EgressMode.OPEN, EgressMode.BLOCKED})


def offers(price: float) -> tuple[Offering, ...]:
    return tuple(Offering("H100", 8, tier, "us-east-1", price) for tier in (Tier.SPOT, Tier.ON_DEMAND))


VIEWS = {
    "gpu-a": ProviderView("gpu-a", offers(10), egress=OPEN_ONLY),
    "gpu-b": ProviderView("gpu-b", offers(20), egress=SEALS),
}


def pool(mode: EgressMode) -> NodePool:
    providers = (PoolProvider("gpu-a"), PoolProvider("gpu-b"))
    return NodePool("p", providers, (Tier.SPOT, Tier.ON_DEMAND), egress=Egress(mode))


def never(candidate: Candidate) -> float | None:
    return None


def test_a_provider_that_cannot_enforce_the_mode_is_skipped_once_naming_the_mode() -> None:
    decision = decide(pool(EgressMode.BLOCKED), H100, VIEWS, never, now=NOW)
    assert decision.chosen is not None and decision.chosen.label() == "gpu-b Spot us-east-1"
    assert [s.text() for s in decision.skipped] == ["gpu-a: cannot enforce egress Blocked"]
    assert count_candidates(pool(EgressMode.BLOCKED), VIEWS) == 2  # gpu-b's two tiers only
    assert count_candidates(pool(EgressMode.OPEN), VIEWS) == 4
    open_decision = decide(pool(EgressMode.OPEN), H100, VIEWS, never, now=NOW)
    assert open_decision.chosen is not None and open_decision.chosen.provider == "gpu-a"
    assert open_decision.skipped == ()


def test_nobody_enforcing_the_mode_is_no_candidate_and_says_so() -> None:
    decision = decide(pool(EgressMode.ALLOWLIST), H100, VIEWS, never, now=NOW)
    assert decision.chosen is None and decision.retry_at is None
    assert [s.obstacle for s in decision.skipped] == [Obstacle.UNENFORCED_EGRESS] * 2
    assert count_candidates(pool(EgressMode.ALLOWLIST), VIEWS) == 0
    wait = wait_for(decision, H100, now=NOW, recheck=60)
    assert wait.reason == names.EVENT_NO_CANDIDATE
    assert wait.message == (
        "no provider in the pool can enforce its spec.egress: gpu-a cannot enforce egress Allowlist, "
        "gpu-b cannot enforce egress Allowlist; next look at 00:17:40Z at the latest"
    )
    assert wait.watched == frozenset()  # no offering change can end it: only the pool's change


def test_mixed_obstacles_list_each_reason() -> None:
    sold_out = Skip("gpu-b", Obstacle.SOLD_OUT, "sold out (offering unavailable)", Tier.SPOT, "us-east-1")
    egress = Skip("gpu-a", Obstacle.UNENFORCED_EGRESS, "cannot enforce egress Blocked")
    wait = wait_for(Decision(None, "", (egress, sold_out)), H100, now=NOW)
    assert wait.reason == names.EVENT_WAITING_FOR_CAPACITY
    assert wait.message.startswith(
        "waiting for capacity: gpu-a cannot enforce egress Blocked, gpu-b/h100 x8 Spot in us-east-1 sold out"
    )


def test_the_catalog_takes_each_providers_egress_modes_from_its_capabilities() -> None:
    suffix = uuid.uuid4().hex[:8]
    scenario = {"offerings": [{"accelerator": None, "gpu_count": 0, "tier": "OnDemand", "region": "us-east-1"}]}
    providers = {
        "plain": FakeProvider("plain", {"cloud": f"plain-{suffix}", "scenario": scenario}),
        "sealed": FakeProvider("sealed", {"cloud": f"sealed-{suffix}", "scenario": scenario, "egress": ["Blocked"]}),
    }
    views = Catalog(providers).views()
    assert (views["plain"].egress, views["sealed"].egress) == (OPEN_ONLY, frozenset({EgressMode.BLOCKED}))
