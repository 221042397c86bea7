"""Settling and publishing spend end to end on the devcluster, placement's side alone (`alone`:
placement over the fake gpu-a, Spot at $10/h, whose Node no vnode serves): a deleted Pod's spend
stays in its pool's settled ledger and total, counted once across a placement crash between the
fold and the finalizer's removal; the pool's status carries the spend figures and the
BudgetExceeded condition as a fake clock crosses a daily limit; Stop annotates the running Pods
newest first. The Pod's `nebula.io/billing` record is written by the test, as the only writer
(the vnode writes it in production: tests/vnode/test_billing_devcluster.py)."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from devcluster import DevCluster
from kube import billing as bill
from kube import names
from kube.client import Kube, KubeError, NotFoundError, path_for
from placement import ledger as led
from placement.settle import TICK_KEY, SpendWork, deleting_ours
from placement.ungate import ungate_patch
from placement.wiring import Placement, start_placement
from tests.support.clock import ManualClock
from tests.support.factories import make_pod
from tests.support.fixtures import kube_for
from tests.support.polling import wait_for
from tests.support.rigs.placement import Alone, h100_pod_template, nodepool

PODS = path_for("pods", namespace="default")
POOLS = path_for(names.NODEPOOL_PLURAL, group=names.NODEPOOL_GROUP, version=names.NODEPOOL_VERSION)
PRICE = 10.0  # gpu-a Spot H100, $/h (tests/support/rigs/placement.py H100_PRICES)


def budgeted_pool(name: str, budget: dict[str, Any] | None = None) -> dict[str, Any]:
    pool = nodepool(name, providers=["gpu-a"], capacity_types=["Spot"])
    if budget is not None:
        pool["spec"]["budget"] = budget
    return pool


def create_pod(kube: Kube, name: str, pool: str) -> dict[str, Any]:
    body = h100_pod_template(pool, name)
    body.update(apiVersion="v1", kind="Pod")
    body["metadata"].update(name=name, namespace="default")
    kube.create(PODS, body)
    return wait_for(lambda: bound(kube, name), what=f"{name} placed and bound")


def bound(kube: Kube, name: str) -> dict[str, Any] | None:
    pod = kube.get(f"{PODS}/{name}")
    annotations = pod["metadata"].get("annotations") or {}
    return pod if names.POOL_ANNOTATION in annotations and pod["spec"].get("nodeName") else None


def delete_now(kube: Kube, name: str) -> None:
    kube.delete(f"{PODS}/{name}", grace_seconds=0)


def write_billing(kube: Kube, name: str, record: bill.Billing) -> None:
    kube.patch(f"{PODS}/{name}", {"metadata": {"annotations": {names.BILLING_ANNOTATION: bill.dump(record)}}})


def gone(kube: Kube, name: str) -> bool:
    try:
        kube.get(f"{PODS}/{name}")
    except NotFoundError:
        return True
    return False


def status_of(kube: Kube, pool: str) -> dict[str, Any]:
    return kube.get(f"{POOLS}/{pool}").get("status") or {}


def settled_of(kube: Kube, pool: str) -> led.Ledger:
    return led.parse((status_of(kube, pool).get("spend") or {}).get("settled"))


def published(placement: Placement, kube: Kube, pool: str, check: Any, what: str) -> dict[str, Any]:
    """Ask for a spend tick until the pool's published status passes `check`."""

    def look() -> dict[str, Any] | None:
        placement.controller.queue.add(TICK_KEY)
        status = status_of(kube, pool)
        return status if status.get("spend") and check(status) else None

    return wait_for(look, what=what)


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status.get("conditions") or [] if c.get("type") == kind)


def test_the_ungate_patch_adds_the_spend_finalizer_once() -> None:
    gates = [{"name": names.PLACEMENT_GATE}]
    fresh = make_pod("p", namespace="default", uid="u", schedulingGates=gates)
    assert ungate_patch(fresh, "gpu-a", {})[-1] == {
        "op": "add",
        "path": "/metadata/finalizers",
        "value": [names.SPEND_FINALIZER],
    }
    other = make_pod("p", namespace="default", uid="u", schedulingGates=gates, metadata={"finalizers": ["x/y"]})
    assert ungate_patch(other, "gpu-a", {})[-1] == {
        "op": "add",
        "path": "/metadata/finalizers/-",
        "value": names.SPEND_FINALIZER,
    }
    ours = copy.deepcopy(other)
    ours["metadata"]["finalizers"].append(names.SPEND_FINALIZER)
    assert all("finalizers" not in op["path"] for op in ungate_patch(ours, "gpu-a", {}))
    assert not deleting_ours(other) and not deleting_ours(None)
    assert deleting_ours({"metadata": {"deletionTimestamp": "2026-12-05T10:00:00Z", **ours["metadata"]}})


def test_I12_a_deleted_pods_spend_stays_in_its_pools_total(cluster: DevCluster, kube: Kube, alone: Alone) -> None:
    cluster.apply_manifest(budgeted_pool("spend"))
    pod = create_pod(kube, "keeper", "spend")
    assert names.SPEND_FINALIZER in pod["metadata"]["finalizers"]
    now = time.time()
    write_billing(kube, "keeper", bill.EMPTY.opened(now - 3600, "i-1").closed_at(now - 1800))  # 30 min: $5
    book = alone.placement.spend
    wait_for(lambda: book.pool_spend("spend").total.dollars == pytest.approx(5.0), what="the live Pod's $5")
    status = published(alone.placement, kube, "spend", lambda s: s["spend"]["total"] == "$5.00", what="$5.00 published")
    assert status["spend"]["dollars"]["total"] == pytest.approx(5.0)

    delete_now(kube, "keeper")
    wait_for(lambda: gone(kube, "keeper"), what="the deleted Pod gone (its spend finalizer removed)")
    settled = settled_of(kube, "spend")
    assert [(r.provider, r.namespace, round(r.dollars, 6)) for r in settled.total] == [("gpu-a", "default", 5.0)]
    assert book.pool_spend("spend").total.dollars == pytest.approx(5.0)
    status = published(
        alone.placement, kube, "spend", lambda s: not s["spend"]["settled"]["pods"], what="the gone uid pruned"
    )
    assert status["spend"]["total"] == "$5.00"
    assert led.parse(status["spend"]["settled"]).total == settled.total


def test_I12_spend_is_never_counted_twice_across_a_crash(
    cluster: DevCluster, kube: Kube, alone: Alone, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Placement folds the Pod's spend and dies before removing the finalizer; the next
    placement finds the uid in the ledger: it only removes the finalizer."""
    cluster.apply_manifest(budgeted_pool("crash"))
    pod = create_pod(kube, "crasher", "crash")
    now = time.time()
    write_billing(kube, "crasher", bill.EMPTY.opened(now - 3600, "i-1").closed_at(now - 1800))
    first = alone.placement
    wait_for(lambda: first.spend.pool_spend("crash").total.dollars == pytest.approx(5.0), what="$5 live")
    work: SpendWork = first.controller.spend
    crashed: list[str] = []
    monkeypatch.setattr(work, "_remove_finalizer", lambda p: crashed.append(p["metadata"]["uid"]))
    delete_now(kube, "crasher")
    wait_for(lambda: crashed, what="the fold, then the crash")
    first.stop()
    assert work.folds == 1 and crashed[0] == pod["metadata"]["uid"]
    stuck = kube.get(f"{PODS}/crasher")
    assert stuck["metadata"]["deletionTimestamp"] and names.SPEND_FINALIZER in stuck["metadata"]["finalizers"]
    assert settled_of(kube, "crash").pods == (pod["metadata"]["uid"],)
    assert first.spend.pool_spend("crash").total.dollars == pytest.approx(5.0)  # folded and present: once

    second = start_placement(
        alone.providers, kube=kube_for(cluster), watch_kube=kube_for(cluster), blocklist=alone.blocklist
    )
    try:
        wait_for(lambda: gone(kube, "crasher"), what="the finalizer removed by the next placement")
        assert second.controller.spend.folds == 0
        assert [round(r.dollars, 6) for r in settled_of(kube, "crash").total] == [5.0]
        published(second, kube, "crash", lambda s: not s["spend"]["settled"]["pods"], what="the gone uid pruned")
        assert second.spend.pool_spend("crash").total.dollars == pytest.approx(5.0)
        assert status_of(kube, "crash")["spend"]["total"] == "$5.00"
    finally:
        second.stop()


def test_I12_a_failed_ledger_write_keeps_the_finalizer_until_the_spend_is_folded(
    cluster: DevCluster, kube: Kube, alone: Alone, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The settled ledger's write fails (a 500, not a conflict): the Pod keeps its finalizer, so
    its spend is not lost, and the write is retried; once the API server takes it, the Pod goes
    with its $5 folded once."""
    cluster.apply_manifest(budgeted_pool("flaky"))
    create_pod(kube, "flake", "flaky")
    now = time.time()
    write_billing(kube, "flake", bill.EMPTY.opened(now - 3600, "i-1").closed_at(now - 1800))
    placement = alone.placement
    wait_for(lambda: placement.spend.pool_spend("flaky").total.dollars == pytest.approx(5.0), what="$5 live")
    pools_kube = placement.controller.spend._pools._kube
    replace = pools_kube.replace
    refused: list[str] = []

    def failing_replace(path: str, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        if path.endswith("/nodepools/flaky/status") and len(refused) < 3:
            refused.append(path)
            raise KubeError(500, "InternalError", "etcdserver: request timed out")
        return replace(path, body, **kwargs)

    monkeypatch.setattr(pools_kube, "replace", failing_replace)
    delete_now(kube, "flake")
    wait_for(lambda: len(refused) >= 1, what="the first ledger write refused")
    stuck = kube.get(f"{PODS}/flake")
    assert names.SPEND_FINALIZER in stuck["metadata"]["finalizers"]
    wait_for(lambda: gone(kube, "flake"), what="the Pod gone once the ledger is written")
    assert len(refused) == 3
    assert [round(r.dollars, 6) for r in settled_of(kube, "flaky").total] == [5.0]
    assert placement.controller.spend.folds == 1


def test_a_fake_clock_crossing_the_daily_limit_sets_budget_exceeded(
    cluster: DevCluster, kube: Kube, alone: Alone
) -> None:
    clock = ManualClock(bill.day_start(time.time()) + 12 * 3600)
    alone.placement.spend.clock = clock
    cluster.apply_manifest(budgeted_pool("daily", {"daily": 5, "maxHourlyCost": 50}))
    create_pod(kube, "spender", "daily")
    write_billing(kube, "spender", bill.EMPTY.opened(clock.now - 1200, "i-1"))  # $3.33 so far
    status = published(alone.placement, kube, "daily", lambda s: s["spend"]["today"] == "$3.33", what="$3.33 today")
    within = condition(status, names.CONDITION_BUDGET_EXCEEDED)
    assert (within["status"], within["reason"]) == ("False", "WithinBudget")
    assert status["spend"]["budget"] == "$50.00/h, $5.00/day"
    assert status["spend"]["hourly"] == "$10.00/h"
    assert status["spend"]["month"] == "$3.33" and status["spend"]["total"] == "$3.33"

    clock.advance(1200)  # $6.67: past $5.00
    status = published(alone.placement, kube, "daily", lambda s: s["spend"]["today"] == "$6.67", what="$6.67 today")
    held = condition(status, names.CONDITION_BUDGET_EXCEEDED)
    assert (held["status"], held["reason"]) == ("True", "Daily")
    assert held["message"] == "pool daily spent $6.67 today of $5.00 (UTC day)"

    clock.now = bill.next_day(clock.now) + 360  # a new UTC day: 6 minutes billed in it, $1.00
    status = published(alone.placement, kube, "daily", lambda s: s["spend"]["today"] == "$1.00", what="a new day")
    assert condition(status, names.CONDITION_BUDGET_EXCEEDED)["status"] == "False"


def test_stop_annotates_the_running_pods_newest_first(
    cluster: DevCluster, kube: Kube, alone: Alone, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(bill.day_start(time.time()) + 12 * 3600)
    cluster.apply_manifest(budgeted_pool("halt", {"daily": 5, "onExceeded": "Stop"}))
    old = create_pod(kube, "old", "halt")
    second_of = old["metadata"]["creationTimestamp"]
    wait_for(lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) > second_of, what="the next second")
    create_pod(kube, "new", "halt")
    alone.placement.spend.clock = clock
    work: SpendWork = alone.placement.controller.spend
    asked: list[str] = []
    annotate = work._annotate_stop

    def spy(pod: dict[str, Any], message: str) -> None:
        asked.append(pod["metadata"]["name"])
        annotate(pod, message)

    monkeypatch.setattr(work, "_annotate_stop", spy)
    published(alone.placement, kube, "halt", lambda s: s["spend"]["today"] == "$0.00", what="nothing spent yet")
    assert asked == []
    write_billing(kube, "old", bill.EMPTY.opened(clock.now - 3600, "i-1"))  # $10 today: past $5
    wait_for(lambda: alone.placement.spend.spent("halt")[0].dollars >= 5, what="the daily limit reached")
    alone.placement.controller.queue.add(TICK_KEY)
    wait_for(lambda: len(asked) == 2, what="both Pods asked to stop")
    assert asked == ["new", "old"]
    for name in asked:
        annotations = kube.get(f"{PODS}/{name}")["metadata"]["annotations"]
        assert annotations[names.STOP_REASON_ANNOTATION] == names.REASON_BUDGET_EXCEEDED
        assert annotations[names.STOP_MESSAGE_ANNOTATION] == "pool halt spent $10.00 today of $5.00 (UTC day)"
    published(alone.placement, kube, "halt", lambda s: s["spend"]["today"] == "$10.00", what="$10.00 published")
    assert asked == ["new", "old"]  # asked once each


def test_a_new_utc_day_wakes_the_budgeted_pools_waiters(
    cluster: DevCluster, kube: Kube, alone: Alone, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(bill.next_day(time.time()) - 10)  # 23:59:50 UTC
    alone.placement.spend.clock = clock
    cluster.apply_manifest(budgeted_pool("nightly", {"daily": 5}))
    cluster.apply_manifest(budgeted_pool("free"))
    wait_for(lambda: alone.placement.pools.get("free") and alone.placement.pools.get("nightly"), what="pools read")
    work: SpendWork = alone.placement.controller.spend
    woken: list[str] = []
    monkeypatch.setattr(work, "_wake", woken.append)
    synced = (alone.placement.controller.pods.synced, alone.placement.pools.synced)
    tick = wait_for(lambda: work.tick() if all(s.is_set() for s in synced) else None, what="a tick")
    assert tick.after == pytest.approx(10.05)  # the next tick is at midnight, not a minute later
    assert woken == []
    clock.advance(20)
    work.tick()
    assert woken == ["nightly"]  # the pool without a budget has nothing to wake
    work.tick()
    assert woken == ["nightly"]
