"""The placement controller and a budgeted pool, one clock, no cluster: the price is reserved
before the ungate patch and released when the patch fails (Conflict, NotFound, 422, an API
error); a Pod held by the budget is looked at again at once when a commitment of its pool ends."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kube import names
from kube.client import ConflictError, KubeError, NotFoundError
from kube.worker import Retry
from placement.budgets import Limit
from placement.poolcache import PoolState
from placement.pools import Budget
from placement.spendview import Rate
from tests.placement.test_controller_outcomes import KEY, Harness, gated_pod

HOURLY_10 = Budget(max_hourly_cost=10)  # room for one Pod at $10/h


def budgeted(budget: Budget = HOURLY_10) -> Harness:
    harness = Harness()
    pools = harness.controller._pools
    state = pools.get("train")
    assert state is not None and state.pool is not None
    pools.states["train"] = PoolState("train", replace(state.pool, budget=budget), "", state.raw)  # type: ignore[attr-defined]
    return harness


def placed_version(name: str = "trainer", uid: str = "u-1") -> dict[str, object]:
    pod = gated_pod()
    pod["metadata"].update(
        name=name, uid=uid, annotations={names.POOL_ANNOTATION: "train", "nebula.io/hourly-price": "10"}
    )
    pod["spec"]["schedulingGates"] = []
    pod["status"] = {"phase": "Running"}
    return pod


@pytest.mark.parametrize(
    "error",
    [
        ConflictError(409, "Conflict", "moved"),
        NotFoundError(404, "NotFound", "gone"),
        KubeError(422, "Invalid", "test op failed"),
        KubeError(500, "InternalError", "etcd"),
    ],
    ids=["409", "404", "422", "500"],
)
def test_a_failed_patch_releases_the_reservation(error: KubeError) -> None:
    harness = budgeted()
    harness.kube.fail = error
    try:
        harness.controller.sync(KEY)
    except Retry:
        pass
    assert harness.controller.budgets.state("train")[:2] == (Rate(0.0, 0), 0)


def test_the_reservation_stands_after_the_patch_until_the_pod_shows_placed() -> None:
    harness = budgeted()
    assert harness.controller.sync(KEY) is None
    assert harness.events.reasons == [names.EVENT_PLACED]
    assert harness.controller.budgets.state("train")[:2] == (Rate(10.0, 0), 1)
    harness.controller._on_pod(KEY, placed_version())
    assert harness.controller.budgets.state("train")[:2] == (Rate(10.0, 0), 1)


def test_a_pod_held_by_the_budget_looks_again_at_once_when_a_commitment_ends() -> None:
    harness = budgeted()
    other = "default/other"
    harness.controller._on_pod(other, placed_version("other", "u-2"))
    harness.step()  # the reflector's keys
    assert harness.controller.sync(KEY) is not None
    assert harness.events.reasons == [names.REASON_BUDGET_EXCEEDED]
    assert harness.events.messages[0].startswith("pool train at $10.00/h of $10.00/h (spec.budget.maxHourlyCost; ")
    assert harness.controller.budgets.state("train")[2:] == (
        "pool train at $10.00/h of $10.00/h",
        Limit.MAX_HOURLY_COST,
    )
    assert harness.controller.gated.get(KEY) is not None
    attempts = harness.attempts()
    assert harness.controller.sync(KEY) is not None and harness.attempts() == attempts  # nothing changed: no attempt

    harness.controller._on_pod(other, None)  # the other Pod went: its commitment is released
    assert KEY in harness.step()
    assert harness.attempts() == attempts + 1
    assert harness.events.reasons[-1] == names.EVENT_PLACED
    assert harness.controller.budgets.state("train")[:3] == (Rate(10.0, 0), 1, None)


def test_max_instances_holds_without_asking_the_optimizer_and_says_so() -> None:
    harness = budgeted(Budget(max_instances=0))
    harness.controller.sync(KEY)
    assert harness.events.reasons == [names.REASON_BUDGET_EXCEEDED]
    assert harness.events.messages[0].startswith("pool train at 0 of 0 instances (spec.budget.maxInstances); next look")
    assert harness.kube.patches == []
    gated = harness.controller.gated_pods()
    assert [(g.pool, g.reason) for g in gated] == [("train", names.REASON_BUDGET_EXCEEDED)]  # the console's view
    waiting = harness.controller.gated.get(KEY)
    assert waiting is not None and waiting.budget_pool == "train"
