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

    @property
    def waits_for(self) -> tuple[str, tuple[Skip, ...]]:
        """What the Pod waits for, without the clock: a new Event is due only when this changes."""
        return self.reason, self.obstacles


def wait_for(decision: Decision, request: WorkloadRequest, *, now: float, recheck: float = PLACEMENT_RECHECK) -> Wait:
    """The wait of a decision that chose nothing: looked at again when the first block lapses,
    and never later than `recheck` seconds from `now`."""
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


def describe(skip: Skip, request: WorkloadRequest) -> str:
    """One obstacle for a person, e.g. `gpu-a/h100 x8 Spot in us-east-1 blocked until 12:03:04Z`."""
    if skip.obstacle is Obstacle.NOT_REGISTERED:
        return f"{skip.provider} not registered on this manager"
    if skip.obstacle is Obstacle.UNKNOWN:
        return f"{skip.provider} offerings unknown (it could not be asked)"
    if skip.obstacle in (Obstacle.UNSERVED_SHAPE, Obstacle.UNENFORCED_EGRESS):
        return f"{skip.provider} {skip.why}"
    where = f"{skip.provider}/{request.describe()}"
    if skip.tier is not None:
        where += f" {skip.tier.value}"
    if skip.region:
        where += f" in {skip.region}"
    if skip.obstacle is Obstacle.BLOCKED and skip.until is not None:
        return f"{where} blocked until {clock_text(skip.until)}"
    return f"{where} {skip.obstacle.value}"


def clock_text(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%H:%M:%SZ")
