"""What a gated Pod waits for: the obstacles of a placement decision that chose nothing, the
latest moment the Pod deserves another look, and the one sentence its Event says.

Pure and table-tested: the placement controller calls `wait_for` with the optimizer's
decision and the time, and does the I/O (the requeue, the Event) around it. Never reads a
clock, the blocklist or a provider.
Tests: tests/placement/test_waiting.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from kube import names
from placement.budgets import Limit, Verdict
from placement.gated import Waiting
from placement.optimizer import Decision, Obstacle, Skip
from placement.request import WorkloadRequest

PLACEMENT_RECHECK = 60.0  # seconds: a waiting Pod is looked at again at least this often
# What may end without anyone changing the Pod or its pool: capacity coming back, a block lapsing.
PASSING = frozenset({Obstacle.SOLD_OUT, Obstacle.BLOCKED, Obstacle.UNKNOWN})
# What a change of a provider's offerings can end.
OFFERINGS = frozenset({Obstacle.SOLD_OUT, Obstacle.UNKNOWN, Obstacle.NOT_OFFERED})


@dataclass(frozen=True)
class Wait:
    """A Pod with no candidate now. `reason` is the Event's: `WaitingForCapacity` when an
    obstacle may pass by itself, else `NoCandidate` (nothing in the pool sells the shape).
    `next_look` (epoch seconds): the Pod is looked at again then at the latest. `watched`:
    the providers whose offerings, on becoming available, may serve it. `blocked`: some
    obstacle is a blocklist entry, so clearing one may serve it."""

    reason: str
    obstacles: tuple[Skip, ...]
    next_look: float
    watched: frozenset[str]
    blocked: bool
    message: str
    budget_pool: str = ""  # the pool whose budget holds the Pod (reason BudgetExceeded), else ""

    @property
    def waits_for(self) -> tuple[str, tuple[Skip, ...]]:
        """What the Pod waits for, without the clock: a new Event is due only when this changes."""
        return self.reason, self.obstacles

    def waiting(self, uid: str) -> Waiting:
        """The register's entry for the Pod `uid` held by this wait."""
        return Waiting(
            uid,
            self.reason,
            self.message,
            self.next_look,
            self.watched,
            self.blocked,
            waits_for=self.waits_for,
            budget_pool=self.budget_pool,
        )


def wait_for(
    decision: Decision,
    request: WorkloadRequest,
    *,
    now: float,
    recheck: float = PLACEMENT_RECHECK,
    budget: Verdict | None = None,
    pool: str = "",
) -> Wait:
    """The wait of a decision that chose nothing: looked at again when the first block lapses,
    and never later than `recheck` seconds from `now`. `budget`: the verdict of `pool`'s budget
    the decision was taken under; when it refused, or some candidate was skipped as over it, the
    Pod waits for the budget (`budget_wait`)."""
    if budget is not None and (not budget.allowed or any(s.obstacle is Obstacle.BUDGET for s in decision.skipped)):
        return budget_wait(decision, request, budget, pool=pool, now=now, recheck=recheck)
    obstacles = decision.skipped
    expiries = [s.until for s in obstacles if s.obstacle is Obstacle.BLOCKED and s.until is not None]
    next_look = min([now + recheck, *expiries])
    passing = any(s.obstacle in PASSING for s in obstacles)
    reason = names.EVENT_WAITING_FOR_CAPACITY if passing else names.EVENT_NO_CANDIDATE
    listed = ", ".join(describe(s, request) for s in obstacles) or "the pool lists no candidate"
    if passing:
        lead = "waiting for capacity"
    elif obstacles and all(s.obstacle is Obstacle.UNSERVED_SHAPE for s in obstacles):
        lead = "no provider in the pool can serve this Pod's shape"
    elif obstacles and all(s.obstacle is Obstacle.UNENFORCED_EGRESS for s in obstacles):
        lead = "no provider in the pool can enforce its spec.egress"
    elif any(s.obstacle is Obstacle.ABOVE_CEILING for s in obstacles) and request.max_hourly_price is not None:
        ceiling = f"${request.max_hourly_price:,.2f}"
        lead = f"no offering in the pool is within the Pod's {names.MAX_HOURLY_PRICE_ANNOTATION} {ceiling}"
    elif any(s.obstacle is Obstacle.UNPRICED for s in obstacles):
        lead = "the pool's spec.budget refuses unpriced offerings (spec.budget.allowUnpriced: true allows them)"
    else:
        lead = f"no provider in the pool sells {request.describe()}"
    return Wait(
        reason=reason,
        obstacles=obstacles,
        next_look=next_look,
        watched=frozenset(s.provider for s in obstacles if s.obstacle in OFFERINGS),
        blocked=bool(expiries),
        message=f"{lead}: {listed}; next look at {clock_text(next_look)} at the latest",
    )


def budget_wait(
    decision: Decision, request: WorkloadRequest, budget: Verdict, *, pool: str, now: float, recheck: float
) -> Wait:
    """A Pod held by `pool`'s budget: reason `BudgetExceeded`, the message opening with the
    verdict's words (`pool gpu-a at $19.20/h of $20.00/h`), looked at again when the limit lapses
    by itself (a new UTC day or month) or after `recheck`, whichever is sooner; a commitment of
    the pool ending wakes it sooner (`GatedRegister.woken_by_budget`)."""
    obstacles = decision.skipped
    if not budget.allowed:
        limit = budget.limit or Limit.MAX_HOURLY_COST
        obstacles += (Skip(pool, Obstacle.BUDGET, budget.message or "", limit=limit.value),)
        words = budget.message or ""
    else:
        limit = Limit.MAX_HOURLY_COST
        words = budget.hourly or f"pool {pool} is at its spec.budget.maxHourlyCost"
    next_look = min(now + recheck, budget.resets_at if budget.resets_at is not None else now + recheck)
    skipped = ", ".join(describe(s, request) for s in decision.skipped if s.obstacle is not Obstacle.BUDGET)
    fit = [describe(s, request) for s in decision.skipped if s.obstacle is Obstacle.BUDGET]
    detail = f"spec.budget.{_FIELD[limit]}"
    if fit:
        detail += "; over it: " + ", ".join(fit)
    if skipped:
        detail += "; also skipped: " + skipped
    return Wait(
        reason=names.EVENT_BUDGET_EXCEEDED,
        obstacles=obstacles,
        next_look=next_look,
        watched=frozenset(),
        blocked=False,
        message=f"{words} ({detail}); next look at {clock_text(next_look)} at the latest",
        budget_pool=pool,
    )


_FIELD = {
    Limit.MAX_HOURLY_COST: "maxHourlyCost",
    Limit.MAX_INSTANCES: "maxInstances",
    Limit.DAILY: "daily",
    Limit.MONTHLY: "monthly",
}


def describe(skip: Skip, request: WorkloadRequest) -> str:
    """One obstacle for a person, e.g. `gpu-a/h100 x8 Spot in us-east-1 blocked until 12:03:04Z`."""
    if skip.obstacle is Obstacle.NOT_REGISTERED:
        return f"{skip.provider} not registered on this manager"
    if skip.obstacle is Obstacle.UNKNOWN:
        return f"{skip.provider} offerings unknown (it could not be asked)"
    if skip.obstacle is Obstacle.FALLBACK:
        return f"Spot skipped: {skip.why}"
    if skip.obstacle in (Obstacle.UNSERVED_SHAPE, Obstacle.UNENFORCED_EGRESS):
        return f"{skip.provider} {skip.why}"
    where = f"{skip.provider}/{request.describe()}"
    if skip.tier is not None:
        where += f" {skip.tier.value}"
    if skip.region:
        where += f" in {skip.region}"
    if skip.obstacle is Obstacle.BLOCKED and skip.until is not None:
        return f"{where} blocked until {clock_text(skip.until)}"
    if skip.obstacle in (Obstacle.ABOVE_CEILING, Obstacle.UNPRICED, Obstacle.BUDGET):
        return f"{where} {skip.why}"
    return f"{where} {skip.obstacle.value}"


def clock_text(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%H:%M:%SZ")
