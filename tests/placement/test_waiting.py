"""What a gated Pod waits for (`placement.waiting.wait_for`), as a table: the Event's reason,
the latest next look, the providers whose offerings would wake it, whether a cleared block
would, and the sentence the Event says."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kube import names
from placement.optimizer import Decision, Obstacle, Skip
from placement.request import WorkloadRequest
from placement.waiting import PLACEMENT_RECHECK, wait_for
from providers.base import Tier

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC).timestamp()  # 12:00:00Z
H100 = WorkloadRequest("h100", 8)

SOLD_OUT = Skip("fake", Obstacle.SOLD_OUT, "sold out (offering unavailable)", Tier.SPOT, "us-east-1")
BLOCKED = Skip("aws", Obstacle.BLOCKED, "blocked for 184s more", Tier.ON_DEMAND, "us-east-1", NOW + 184)
BLOCKED_SOON = Skip("aws", Obstacle.BLOCKED, "blocked for 20s more", Tier.SPOT, "us-west-2", NOW + 20)
UNKNOWN = Skip("gpu-c", Obstacle.UNKNOWN, "offerings unknown: the provider could not be asked")
NOT_OFFERED = Skip("gpu-d", Obstacle.NOT_OFFERED, "no h100 x8 offering", Tier.SPOT)
NOT_REGISTERED = Skip("gpu-x", Obstacle.NOT_REGISTERED, "not registered on this manager")


def decision(*skips: Skip) -> Decision:
    return Decision(None, "", skips)


@pytest.mark.parametrize(
    ("skips", "reason", "next_look", "watched", "blocked", "message"),
    [
        pytest.param(
            (SOLD_OUT, BLOCKED),
            names.EVENT_WAITING_FOR_CAPACITY,
            NOW + PLACEMENT_RECHECK,
            {"fake"},
            True,
            "waiting for capacity: fake/h100 x8 Spot in us-east-1 sold out, aws/h100 x8 OnDemand in us-east-1 "
            "blocked until 12:03:04Z; next look at 12:01:00Z at the latest",
            id="sold out and blocked: the recheck comes first",
        ),
        pytest.param(
            (BLOCKED, BLOCKED_SOON),
            names.EVENT_WAITING_FOR_CAPACITY,
            NOW + 20,
            set(),
            True,
            "waiting for capacity: aws/h100 x8 OnDemand in us-east-1 blocked until 12:03:04Z, "
            "aws/h100 x8 Spot in us-west-2 blocked until 12:00:20Z; next look at 12:00:20Z at the latest",
            id="only blocked: the first expiry comes first",
        ),
        pytest.param(
            (UNKNOWN, NOT_REGISTERED),
            names.EVENT_WAITING_FOR_CAPACITY,
            NOW + PLACEMENT_RECHECK,
            {"gpu-c"},
            False,
            "waiting for capacity: gpu-c offerings unknown (it could not be asked), gpu-x not registered on this "
            "manager; next look at 12:01:00Z at the latest",
            id="could not ask: waits for the provider's answer",
        ),
        pytest.param(
            (NOT_OFFERED, NOT_REGISTERED),
            names.EVENT_NO_CANDIDATE,
            NOW + PLACEMENT_RECHECK,
            {"gpu-d"},
            False,
            "no provider in the pool sells h100 x8: gpu-d/h100 x8 Spot not offered, gpu-x not registered on this "
            "manager; next look at 12:01:00Z at the latest",
            id="nothing sells the shape: NoCandidate, still rechecked",
        ),
        pytest.param(
            (),
            names.EVENT_NO_CANDIDATE,
            NOW + PLACEMENT_RECHECK,
            set(),
            False,
            "no provider in the pool sells h100 x8: the pool lists no candidate; next look at 12:01:00Z at the latest",
            id="no skip at all",
        ),
    ],
)
def test_a_wait_names_its_obstacles_and_its_latest_next_look(
    skips: tuple[Skip, ...], reason: str, next_look: float, watched: set[str], blocked: bool, message: str
) -> None:
    wait = wait_for(decision(*skips), H100, now=NOW)
    assert (wait.reason, wait.next_look, wait.watched, wait.blocked) == (reason, next_look, watched, blocked)
    assert wait.message == message


def test_what_a_pod_waits_for_ignores_the_clock_but_not_a_moved_expiry() -> None:
    """The recheck a minute later words the blocks' seconds left and the next look anew; that is
    the same wait (no new Event). A block extended by a new refusal is a different one."""
    first = wait_for(decision(SOLD_OUT, BLOCKED), H100, now=NOW)
    later_block = Skip("aws", Obstacle.BLOCKED, "blocked for 124s more", Tier.ON_DEMAND, "us-east-1", NOW + 184)
    again = wait_for(decision(SOLD_OUT, later_block), H100, now=NOW + 60)
    assert again.message != first.message and again.waits_for == first.waits_for
    extended = Skip("aws", Obstacle.BLOCKED, "blocked for 300s more", Tier.ON_DEMAND, "us-east-1", NOW + 360)
    assert wait_for(decision(SOLD_OUT, extended), H100, now=NOW + 60).waits_for != first.waits_for


def test_the_recheck_bounds_the_wait() -> None:
    assert wait_for(decision(BLOCKED), H100, now=NOW, recheck=5.0).next_look == NOW + 5.0
    assert wait_for(decision(BLOCKED), H100, now=NOW, recheck=500.0).next_look == NOW + 184
