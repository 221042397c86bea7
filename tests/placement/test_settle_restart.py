"""Settling across a stopped placement, and what is not ours, on the devcluster (`stack`): a Pod
deleted while placement is stopped is settled when the next one starts; a Pod without our
finalizer is never folded; a daily limit holds new Pods back; and Stop ends the running ones
`Failed`/`BudgetExceeded` with `DisruptionTarget`."""

from __future__ import annotations

import time
from typing import Any

import pytest

from devcluster import DevCluster
from kube import billing as bill
from kube import names
from kube.client import Kube
from placement.settle import TICK_KEY
from placement.ungate import JSON_PATCH
from placement.wiring import start_placement
from tests.placement.test_settle import (
    PODS,
    budgeted_pool,
    create_pod,
    delete_now,
    gone,
    settled_of,
    status_of,
    write_billing,
)
from tests.support.clock import ManualClock
from tests.support.fixtures import kube_for
from tests.support.polling import wait_for
from tests.support.rigs.placement import Alone, Stack, h100_pod_template


def annotation_of(kube: Kube, name: str) -> str | None:
    return (kube.get(f"{PODS}/{name}")["metadata"].get("annotations") or {}).get(names.BILLING_ANNOTATION)


def test_a_pod_deleted_while_placement_is_stopped_is_settled_when_it_starts_again(
    cluster: DevCluster, kube: Kube, alone: Alone
) -> None:
    cluster.apply_manifest(budgeted_pool("later"))
    create_pod(kube, "orphan", "later")
    now = time.time()
    write_billing(kube, "orphan", bill.EMPTY.opened(now - 3600, "i-1").closed_at(now - 1800))  # $5
    wait_for(lambda: alone.placement.spend.pool_spend("later").total.dollars == pytest.approx(5.0), what="$5 live")
    alone.placement.stop()
    delete_now(kube, "orphan")
    wait_for(lambda: kube.get(f"{PODS}/orphan")["metadata"].get("deletionTimestamp"), what="the Pod deleting")
    assert not gone(kube, "orphan")  # held by our finalizer while nobody settles it
    second = start_placement(
        alone.providers, kube=kube_for(cluster), watch_kube=kube_for(cluster), blocklist=alone.blocklist
    )
    try:
        wait_for(lambda: gone(kube, "orphan"), what="settled by the next placement")
        assert second.controller.spend.folds == 1
        assert [round(r.dollars, 6) for r in settled_of(kube, "later").total] == [5.0]
        assert second.spend.pool_spend("later").total.dollars == pytest.approx(5.0)
    finally:
        second.stop()


def test_a_pod_without_our_finalizer_is_never_folded(cluster: DevCluster, kube: Kube, alone: Alone) -> None:
    """A Pod placed before the finalizer existed (removed here by hand) goes at once, unsettled."""
    cluster.apply_manifest(budgeted_pool("legacy"))
    pod = create_pod(kube, "legacy", "legacy")
    index = pod["metadata"]["finalizers"].index(names.SPEND_FINALIZER)
    kube.request("PATCH", f"{PODS}/legacy", body=[{"op": "remove", "path": f"/metadata/finalizers/{index}"}],
                 content_type=JSON_PATCH)  # fmt: skip
    now = time.time()
    write_billing(kube, "legacy", bill.EMPTY.opened(now - 3600, "i-1").closed_at(now - 1800))
    delete_now(kube, "legacy")
    wait_for(lambda: gone(kube, "legacy"), what="the Pod gone")
    alone.placement.controller.queue.add(TICK_KEY)
    wait_for(lambda: status_of(kube, "legacy").get("spend"), what="a spend status")
    assert alone.placement.controller.spend.folds == 0
    assert settled_of(kube, "legacy").total == ()


def test_daily_crossed_on_a_fake_clock_holds_new_pods_budget_exceeded(
    cluster: DevCluster, kube: Kube, alone: Alone
) -> None:
    clock = ManualClock(bill.day_start(time.time()) + 12 * 3600)
    alone.placement.spend.clock = clock
    cluster.apply_manifest(budgeted_pool("held", {"daily": 5}))
    create_pod(kube, "first", "held")
    write_billing(kube, "first", bill.EMPTY.opened(clock.now - 2400, "i-1"))  # $6.67 today
    wait_for(lambda: alone.placement.spend.spent("held")[0].dollars >= 5, what="the daily limit reached")
    body = h100_pod_template("held", "second")
    body.update(apiVersion="v1", kind="Pod")
    body["metadata"].update(name="second", namespace="default")
    kube.create(PODS, body)
    held = wait_for(
        lambda: [g for g in alone.placement.gated_pods() if g.name == "second" and g.reason],
        what="the new Pod held",
    )
    assert held[0].reason == names.REASON_BUDGET_EXCEEDED
    assert held[0].message is not None
    assert held[0].message.startswith("pool held spent $6.67 today of $5.00 (UTC day) (spec.budget.daily)")


def test_stop_ends_the_running_pods_failed_budget_exceeded_with_disruption_target(
    cluster: DevCluster, kube: Kube, stack: Stack
) -> None:
    """The vnode's own billing record (opened as the fake cloud created the instance, today) and
    a clock at tomorrow noon: twelve hours billed tomorrow at $10/h, $120 of a $5 daily budget."""
    cluster.apply_manifest(budgeted_pool("stopping", {"daily": 5, "onExceeded": "Stop"}))
    create_pod(kube, "runner", "stopping")
    wait_for(lambda: bill.parse(annotation_of(kube, "runner")).billing, what="the vnode opened its span")
    stack.placement.spend.clock = ManualClock(bill.next_day(time.time()) + 12 * 3600)
    wait_for(lambda: stack.placement.spend.spent("stopping")[0].dollars >= 5, what="the daily limit reached")
    stack.placement.controller.queue.add(TICK_KEY)

    def ended() -> dict[str, Any] | None:
        status = kube.get(f"{PODS}/runner").get("status") or {}
        return status if status.get("phase") == "Failed" else None

    status = wait_for(ended, what="the Pod stopped")
    assert status["reason"] == names.REASON_BUDGET_EXCEEDED
    assert status["message"] == "pool stopping spent $120.00 today of $5.00 (UTC day)"
    disruption = [c for c in status.get("conditions") or [] if c.get("type") == "DisruptionTarget"]
    assert disruption and disruption[0]["status"] == "True" and disruption[0]["reason"] == "TerminationByKubelet"
