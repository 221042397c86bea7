"""The optimizer: a pool, a request and the providers' offerings in, one placement decision out.

Pure and table-tested: the placement controller gathers the inputs (pool, request, offerings,
a blocklist lookup, which `blocklist_lookup` builds over the in-memory Blocklist, and the pool's
hourly budget headroom from `placement.budgets`) and does the I/O around `decide`. Never calls a
provider or the API. Tables in tests/placement/test_optimizer.py::test_ordered_walks_tiers_then_providers_then_regions
and tests/placement/test_price_ceiling.py::test_the_ceiling_and_the_budget_skip_offerings_with_a_reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from kube import names
from placement.blocklist import Blocklist
from placement.pools import NodePool, Strategy
from placement.request import WorkloadRequest
from providers import shapecheck
from providers.base import Offering, Tier
from providers.egress import EgressMode
from providers.shape import Shapes


@dataclass(frozen=True)
class ProviderView:
    """What placement knows of one registered provider. `offerings` None: could not ask.
    `shapes`: the Pod shapes it serves (a Pod needing more skips it, providers.shapecheck).
    `egress`: the NodePool egress modes it enforces (a pool asking for another skips it)."""

    name: str
    offerings: tuple[Offering, ...] | None
    expand_regions: Callable[[Sequence[str]], list[str]] = field(compare=False, default=lambda regions: list(regions))
    shapes: Shapes = field(default_factory=Shapes)
    egress: frozenset[EgressMode] = frozenset({EgressMode.OPEN})


@dataclass(frozen=True)
class Candidate:
    provider: str
    tier: Tier
    region: str
    hourly_price: float | None
    instance_type: str = ""

    def label(self) -> str:
        return f"{self.provider} {self.tier.value} {self.region}"

    def price_text(self) -> str:
        return "price unknown" if self.hourly_price is None else f"${self.hourly_price:.2f}/h"


class Obstacle(Enum):
    """Why a (provider, tier, region) was skipped: what a Pod waiting for it waits for."""

    NOT_REGISTERED = "not registered"
    UNSERVED_SHAPE = "cannot serve the Pod's shape"
    UNENFORCED_EGRESS = "cannot enforce the pool's egress"
    UNKNOWN = "offerings unknown"
    NOT_OFFERED = "not offered"
    SOLD_OUT = "sold out"
    BLOCKED = "blocked"
    ABOVE_CEILING = "above the Pod's price ceiling"  # nebula.io/max-hourly-price
    UNPRICED = "unpriced"  # a budgeted pool without spec.budget.allowUnpriced refuses it
    BUDGET = "over the pool's budget"  # its price exceeds the pool's hourly headroom
    FALLBACK = "skipped after interruptions"  # spec.interruption.fallbackToOnDemandAfter: OnDemand only


PRICE_SLACK = 1e-9  # dollars an hour: sums of prices compared without float noise


@dataclass(frozen=True)
class Skip:
    """One skipped candidate (or a provider or tier of it, when `region`/`tier` are None).
    `until`: when a BLOCKED one frees (epoch seconds). `why` is the sentence for a person
    and takes no part in equality (its "blocked for 42s more" moves with the clock)."""

    provider: str
    obstacle: Obstacle
    why: str = field(compare=False)
    tier: Tier | None = None
    region: str | None = None
    until: float | None = None
    limit: str | None = None  # BUDGET: which limit of spec.budget (placement.budgets.Limit's value)

    @property
    def what(self) -> str:
        """e.g. "gpu-a Spot us-east-1" or "gpu-c"."""
        return " ".join(
            part for part in (self.provider, self.tier.value if self.tier else "", self.region or "") if part
        )

    def text(self) -> str:
        return f"{self.what}: {self.why}"


@dataclass(frozen=True)
class Decision:
    """`chosen` with `why`; or nothing, with every skip. `retry_at` (epoch seconds) when the
    only obstacle was the blocklist: the moment the soonest-freeing candidate is free."""

    chosen: Candidate | None
    why: str
    skipped: tuple[Skip, ...]
    retry_at: float | None = None
    unknown: bool = False  # a provider's offerings could not be read: try again later


BlockedUntil = Callable[[Candidate], float | None]  # epoch seconds the candidate is blocked until, or None


def _matches(offering: Offering, request: WorkloadRequest, tier: Tier) -> bool:
    if offering.tier != tier:
        return False
    accelerator = offering.accelerator.casefold() if offering.accelerator else None
    if accelerator != request.accelerator:
        return False
    # A row with gpu_count 0 sells any count (per-GPU pricing); otherwise the count must match.
    return request.accelerator is None or offering.gpu_count in (0, request.gpu_count)


def candidates(
    pool: NodePool, request: WorkloadRequest, views: Mapping[str, ProviderView]
) -> tuple[list[Candidate], list[Skip], bool]:
    """Every servable candidate in `Ordered` walk order (tiers, providers, regions), the
    skips, and whether some provider could not be asked."""
    found: list[Candidate] = []
    skips: list[Skip] = []
    unknown = False
    for tier in pool.capacity_types:
        for entry in pool.providers:
            view = views.get(entry.name)
            if view is None:
                if tier == pool.capacity_types[0]:
                    skips.append(Skip(entry.name, Obstacle.NOT_REGISTERED, "not registered on this manager"))
                continue
            if pool.egress.mode not in view.egress:
                if tier == pool.capacity_types[0]:
                    why = f"cannot enforce egress {pool.egress.mode.value}"
                    skips.append(Skip(entry.name, Obstacle.UNENFORCED_EGRESS, why))
                continue
            unserved = shapecheck.refusals(shapecheck.not_served(request.needs, view.shapes))
            if unserved:
                if tier == pool.capacity_types[0]:
                    why = f"cannot serve {shapecheck.describe(unserved)}"
                    skips.append(Skip(entry.name, Obstacle.UNSERVED_SHAPE, why))
                continue
            if view.offerings is None:
                unknown = True
                if tier == pool.capacity_types[0]:
                    why = "offerings unknown: the provider could not be asked"
                    skips.append(Skip(entry.name, Obstacle.UNKNOWN, why))
                continue
            matching = [o for o in view.offerings if _matches(o, request, tier)]
            declared = view.expand_regions(entry.regions) if entry.regions else []
            regions = declared or list(dict.fromkeys(o.region for o in matching))
            if not regions:
                skips.append(Skip(entry.name, Obstacle.NOT_OFFERED, f"no {request.describe()} offering", tier))
                continue
            for region in regions:
                offers = [o for o in matching if o.region == region]
                if not offers:
                    why = f"no {request.describe()} offering in this region"
                    skips.append(Skip(entry.name, Obstacle.NOT_OFFERED, why, tier, region))
                    continue
                available = [o for o in offers if o.available]
                if not available:
                    skips.append(Skip(entry.name, Obstacle.SOLD_OUT, "sold out (offering unavailable)", tier, region))
                    continue
                priced, skip = _within_price(available, pool, request, entry.name, tier, region)
                if skip is not None:
                    skips.append(skip)
                    continue
                best = min(priced, key=lambda o: float("inf") if o.hourly_price is None else o.hourly_price)
                found.append(Candidate(entry.name, tier, region, best.hourly_price, best.instance_type))
    return found, skips, unknown


def _within_price(
    offers: Sequence[Offering], pool: NodePool, request: WorkloadRequest, provider: str, tier: Tier, region: str
) -> tuple[list[Offering], Skip | None]:
    """The offers the Pod's ceiling and the pool's budget allow, or the Skip saying why none is:
    a ceiling excludes dearer and unpriced offers (an unknown price cannot be proven under it);
    a budget without `allowUnpriced` excludes unpriced ones."""
    ceiling = request.max_hourly_price
    if ceiling is not None:
        kept = [o for o in offers if o.hourly_price is not None and o.hourly_price <= ceiling + PRICE_SLACK]
        if not kept:
            price = _cheapest_text(offers)
            why = f"{price}: above the Pod's {names.MAX_HOURLY_PRICE_ANNOTATION} ${ceiling:,.2f}"
            return [], Skip(provider, Obstacle.ABOVE_CEILING, why, tier, region)
        offers = kept
    if pool.budget is not None and not pool.budget.allow_unpriced:
        kept = [o for o in offers if o.hourly_price is not None]
        if not kept:
            why = "unpriced: a pool with spec.budget refuses it unless spec.budget.allowUnpriced is true"
            return [], Skip(provider, Obstacle.UNPRICED, why, tier, region)
        offers = kept
    return list(offers), None


def _cheapest_text(offers: Sequence[Offering]) -> str:
    prices = [o.hourly_price for o in offers if o.hourly_price is not None]
    return f"${min(prices):,.2f}/h" if prices else "price unknown"


def rank(found: Sequence[Candidate], strategy: Strategy) -> list[Candidate]:
    """`Ordered` keeps walk order; `LowestPrice` sorts by hourly price (unknown last), stably."""
    if strategy is Strategy.LOWEST_PRICE:
        return sorted(found, key=lambda c: float("inf") if c.hourly_price is None else c.hourly_price)
    return list(found)


def decide(
    pool: NodePool,
    request: WorkloadRequest,
    views: Mapping[str, ProviderView],
    blocked_until: BlockedUntil,
    *,
    now: float,
    headroom: float | None = None,
) -> Decision:
    """Walk the ranked candidates, skip the blocked ones and those dearer than `headroom`
    (dollars an hour the pool's `maxHourlyCost` has left; None: no such limit; an unpriced
    candidate, which only `allowUnpriced` lets this far, is not held by it), take the first
    free one. `now` is on the clock of `blocked_until` (epoch seconds)."""
    found, skips, unknown = candidates(pool, request, views)
    ranked = rank(found, pool.strategy)
    retry_at: float | None = None
    for position, candidate in enumerate(ranked):
        until = blocked_until(candidate)
        if until is not None:
            why = f"blocked for {max(0.0, until - now):.0f}s more (refused recently)"
            skips.append(Skip(candidate.provider, Obstacle.BLOCKED, why, candidate.tier, candidate.region, until))
            retry_at = until if retry_at is None else min(retry_at, until)
            continue
        price = candidate.hourly_price
        if headroom is not None and price is not None and price > headroom + PRICE_SLACK:
            left = f"${max(0.0, headroom):,.2f}/h"
            why = f"{candidate.price_text()} is more than the {left} left of spec.budget.maxHourlyCost"
            skip = Skip(
                candidate.provider, Obstacle.BUDGET, why, candidate.tier, candidate.region, limit="MaxHourlyCost"
            )
            skips.append(skip)
            continue
        why = _why(pool, candidate, position, len(ranked))
        return Decision(candidate, why, tuple(skips), unknown=unknown)
    return Decision(None, "", tuple(skips), retry_at=retry_at, unknown=unknown)


def _why(pool: NodePool, candidate: Candidate, position: int, total: int) -> str:
    if pool.strategy is Strategy.LOWEST_PRICE:
        order = "cheapest" if position == 0 else f"cheapest unblocked ({position} cheaper blocked)"
        return f"{order} of {total} candidates at {candidate.price_text()} (strategy LowestPrice)"
    order = "first" if position == 0 else f"first unblocked ({position} earlier blocked)"
    return f"{order} of {total} candidates in listed order at {candidate.price_text()} (strategy Ordered)"


def count_candidates(pool: NodePool, views: Mapping[str, ProviderView]) -> int:
    """How many (tier, provider, region) candidates the pool has with an available offering of
    any shape, from providers that enforce its egress: the `candidateCount` in the NodePool's status."""
    seen: set[tuple[Tier, str, str]] = set()
    for tier in pool.capacity_types:
        for entry in pool.providers:
            view = views.get(entry.name)
            if view is None or view.offerings is None or pool.egress.mode not in view.egress:
                continue
            declared = set(view.expand_regions(entry.regions)) if entry.regions else None
            for offering in view.offerings:
                if offering.tier == tier and offering.available and (declared is None or offering.region in declared):
                    seen.add((tier, entry.name, offering.region))
    return len(seen)


def blocklist_lookup(blocklist: Blocklist, accelerator: str | None) -> BlockedUntil:
    """The optimizer's view of the blocklist for a request of `accelerator`: when each candidate
    is blocked until (epoch seconds), or None. The scope a provider built from the same PodSpec
    covers it: tests/placement/test_one_reader.py::test_placement_the_provider_and_the_blocklist_read_one_pod_alike."""

    def lookup(candidate: Candidate) -> float | None:
        entry = blocklist.blocked(
            candidate.provider, accelerator=accelerator, tier=candidate.tier, region=candidate.region
        )
        return None if entry is None else entry.expires_at.timestamp()

    return lookup
