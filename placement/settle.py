"""The spend publisher and settler: the writes of spend (design §4, §5 Stop, the NodePool status).

Runs on the placement controller's WorkerPool under queue keys starting `spend:` (as the
catalog's does): `spend:tick` every `interval` seconds (and at each UTC midnight) publishes
every pool's whole status (`status.spend`, the `BudgetExceeded` condition), drops folded uids
whose Pods are gone and, for `onExceeded: Stop`, annotates the pool's running Pods newest
first once `daily`/`monthly` is reached; `spend:settle:<pool>` folds the spend of the pool's
deleted Pods that are due into its settled ledger (ONE status write for all of them, conditioned
on the NodePool's resourceVersion, their uids recorded) and then removes the `nebula.io/spend`
finalizer of each: a crash between the two finds the uids in the ledger and only removes the
finalizers.
`spend:publish:<pool>` writes a pool's status again after a conflict. Never deletes a Pod,
never touches a Pod without our finalizer (but for the Stop annotation), never folds a uid twice.
Tests: tests/placement/test_settle.py::test_I12_spend_is_never_counted_twice_across_a_crash,
tests/placement/test_settle.py::test_I12_a_failed_ledger_write_keeps_the_finalizer_until_the_spend_is_folded,
tests/placement/test_settle.py::test_I12_a_deleted_pods_spend_stays_in_its_pools_total.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kube import billing as bill
from kube import names
from kube.client import ConflictError, Kube, KubeError, NotFoundError, path_for
from kube.reflector import Reflector
from kube.times import micro_time, parse_rfc3339
from kube.worker import Requeue, Retry
from kube.workqueue import WorkQueue
from placement import ledger as led
from placement.budgets import WITHIN_BUDGET, price_of
from placement.poolcache import NODEPOOLS, PoolCache, PoolState, now_text, pool_status, state_of
from placement.pools import OnExceeded
from placement.spend import (
    SpendBook,
    Verdict,
    billing_of,
    budget_of,
    live_pod,
    pool_of,
    verdict_of,
)
from placement.spendview import PoolSpend
from placement.ungate import JSON_PATCH

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]
SPEND_KEY = "spend:"
TICK_KEY = SPEND_KEY + "tick"
SETTLE_KEY = SPEND_KEY + "settle:"
PUBLISH_KEY = SPEND_KEY + "publish:"
SPEND_INTERVAL = 60.0  # seconds between publications of the moving figures
SETTLE_MARGIN = 120.0  # seconds past a deleted Pod's grace after which an open billing span is settled anyway
CONFLICT_DELAY = 0.2  # seconds before composing again after a 409
MOVING = ("today", "month", "total", "dollars", "asOf")  # what changes by itself as time passes


def deleting_ours(pod: JsonDict | None) -> bool:
    """A Pod being deleted that still carries our finalizer: it waits to be settled."""
    meta = (pod or {}).get("metadata") or {}
    return bool(meta.get("deletionTimestamp")) and names.SPEND_FINALIZER in (meta.get("finalizers") or [])


def settle_due(pod: JsonDict, now: float) -> float:
    """Epoch seconds from which a deleting Pod may be settled: now if its billing record is
    closed or it was never bound, else when its grace + SETTLE_MARGIN has passed."""
    if not billing_of(pod).billing or not (pod.get("spec") or {}).get("nodeName"):
        return now
    meta = pod["metadata"]
    grace = meta.get("deletionGracePeriodSeconds")
    if grace is None:
        grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
    return parse_rfc3339(str(meta["deletionTimestamp"])).timestamp() + float(grace or 0) + SETTLE_MARGIN


def spend_status(spend: PoolSpend, settled: led.Ledger, now: float) -> JsonDict:
    return {
        "hourly": spend.rate.text(),
        "today": spend.today.text(),
        "month": spend.month.text(),
        "total": spend.total.text(),
        "budget": spend.budget.text() if spend.budget is not None else "none",
        "dollars": {
            "hourly": round(spend.rate.dollars, 6),
            "today": round(spend.today.dollars, 6),
            "month": round(spend.month.dollars, 6),
            "total": round(spend.total.dollars, 6),
            "unpricedInstances": spend.rate.unpriced,
        },
        "asOf": micro_time(datetime.fromtimestamp(now, UTC)),  # to the microsecond: the figures' own instant
        "settled": led.dump(settled),
    }


def budget_condition(spend: PoolSpend, verdict: Verdict | None) -> JsonDict | None:
    if spend.budget is None:
        return None
    reason, message = verdict if verdict is not None else (WITHIN_BUDGET, f"pool {spend.pool} is within its budget")
    return {
        "type": names.CONDITION_BUDGET_EXCEEDED,
        "status": "True" if verdict is not None else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now_text(),
    }


def _steady(status: JsonDict) -> JsonDict:
    """`status` without the figures that move by themselves."""
    spend = {k: v for k, v in (status.get("spend") or {}).items() if k not in MOVING}
    return dict(status, spend=spend)


class SpendWork:
    """Queued on the controller's queue; `sync(key)` runs on its WorkerPool."""

    def __init__(
        self,
        kube: Kube,
        book: SpendBook,
        pools: PoolCache,
        pods: Reflector,
        queue: WorkQueue,
        placed: Callable[[str], int],
        wake: Callable[[str], None],
        interval: float = SPEND_INTERVAL,
        *,
        verdict: Callable[[str], Verdict | None] | None = None,
    ) -> None:
        self._kube = kube
        self.book = book
        self._pools = pools
        self._pods = pods
        self._queue = queue
        self._placed = placed
        self._candidates: dict[str, int] = {}  # pool -> candidateCount, from the controller's pool sync
        self._wake = wake
        self.verdict = verdict
        self.interval = interval
        self._day = ""  # the UTC day of the last tick
        self._day_lock = threading.Lock()
        self._asked: set[str] = set()  # uids asked to stop (the reflector may not show the annotation yet)
        self.folds = 0  # ledger writes that folded a uid (tests)

    def start(self) -> None:
        self._queue.add(TICK_KEY)

    def pool_synced(self, name: str, candidates: int | None) -> None:
        """The controller counted the pool's candidates (None: the pool is gone): publish."""
        if candidates is None:
            self._candidates.pop(name, None)
            return
        self._candidates[name] = candidates
        self.publish(name)

    def counts(self, name: str) -> tuple[int | None, int]:
        """The pool's candidateCount (None before the controller's first sync of it) and placedCount."""
        return self._candidates.get(name), self._placed(name)

    def pod_changed(self, key: str, pod: JsonDict | None) -> None:
        """From the controller's `_on_pod`: index the Pod, and settle it if it is being deleted."""
        self.book.pod_changed(key, pod)
        if pod is not None and deleting_ours(pod):
            self._queue.add(SETTLE_KEY + pool_of(pod))  # coalesced: one fold per pool and burst

    def sync(self, key: str) -> Requeue | None:
        if key == TICK_KEY:
            return self.tick()
        if key.startswith(SETTLE_KEY):
            return self.settle(key[len(SETTLE_KEY) :])
        if key.startswith(PUBLISH_KEY):
            self.publish(key[len(PUBLISH_KEY) :], moving=True)
        return None

    # -- the status ----------------------------------------------------------------------------
    def compose(self, state: PoolState, candidates: int, placed: int, settled: led.Ledger | None = None) -> JsonDict:
        """The pool's whole status, with `settled` (default: the cached ledger)."""
        name = state.name
        spend = self.book.pool_spend(name, verdict=self.verdict, buckets=False)
        ledger = self.book.ledger(name) if settled is None else settled
        if self.verdict is not None:
            why = self.verdict(name)
        else:
            budget, now = budget_of(state), self.book.clock()
            why = verdict_of(name, budget, spend.rate, spend.instances, spend.today, spend.month, now)
        return pool_status(
            state,
            candidate_count=candidates,
            placed_count=placed,
            spend=spend_status(spend, ledger, self.book.clock()),
            budget=budget_condition(spend, why),
        )

    def publish(self, name: str, *, moving: bool = False) -> None:
        """Write the pool's status when something but the moving figures changed, or with
        `moving` (the tick); nothing before the controller's first sync of the pool."""
        state = self._pools.get(name)
        candidates, placed = self.counts(name)
        if state is None or candidates is None:
            return
        status = self.compose(state, candidates, placed)
        if not moving and _steady(status) == _steady(_with_times(state.raw.get("status") or {}, status)):
            return
        try:
            written = self._pools.write_status(name, status)
        except KubeError as exc:  # the next tick or change writes it again
            logger.warning("could not write the status of NodePool %s: %s", name, exc)
            return
        if not written:
            self._queue.add(PUBLISH_KEY + name, delay=CONFLICT_DELAY)

    # -- the tick ------------------------------------------------------------------------------
    def tick(self) -> Requeue:
        if not self._pools.synced.is_set() or not self._pods.synced.is_set():
            return Requeue(0.5)
        now = self.book.clock()
        day = led.day_key(now)
        with self._day_lock:  # a tick asked for by hand may run beside the queue's
            new_day, self._day = bool(self._day) and day != self._day, day
        present = {str(p["metadata"].get("uid", "")) for p in self._pods.snapshot()}
        for state in self._pools.pools():
            if self.book.ledger(state.name).pods and not set(self.book.ledger(state.name).pods) <= present:
                self._forget_gone(state.name, present)
            self.publish(state.name, moving=True)
            self._stop_if_exceeded(state)
            if new_day and budget_of(state) is not None:
                self._wake(state.name)  # a new UTC day (or month): daily / monthly limits start again
        return Requeue(max(0.0, min(self.interval, bill.next_day(now) - now + 0.05)))

    def _forget_gone(self, name: str, present: set[str]) -> None:
        """Drop the folded uids whose Pods are gone (they can never be folded again)."""
        try:
            obj = self._kube.get(f"{NODEPOOLS}/{name}")
        except KubeError:
            return
        settled = self._settled_of(name, obj)
        pruned = led.prune(settled, self.book.clock(), present=present)
        if pruned != settled:
            self._write_ledger(name, obj, pruned)

    def _stop_if_exceeded(self, state: PoolState) -> None:
        """`onExceeded: Stop`: once today's or this month's spend reached its limit, annotate the
        pool's running Pods, newest first, for the vnode to stop them."""
        budget = budget_of(state)
        if budget is None or budget.on_exceeded is not OnExceeded.STOP:
            return
        today, month = self.book.spent(state.name)
        if budget.daily is not None and today.dollars >= budget.daily:
            message = f"pool {state.name} spent {today.text()} today of ${budget.daily:,.2f} (UTC day)"
        elif budget.monthly is not None and month.dollars >= budget.monthly:
            message = f"pool {state.name} spent {month.text()} this month of ${budget.monthly:,.2f} (UTC month)"
        else:
            return
        running, present = [], set()
        for pod in self._pods.snapshot():
            meta = pod["metadata"]
            annotations = meta.get("annotations") or {}
            present.add(str(meta.get("uid", "")))
            if pool_of(pod) != state.name or not live_pod(pod).committed or meta.get("deletionTimestamp"):
                continue
            asked = names.STOP_REASON_ANNOTATION in annotations or meta.get("uid") in self._asked
            if (pod.get("spec") or {}).get("nodeName") and not asked:
                running.append(pod)
        self._asked &= present
        for pod in sorted(running, key=lambda p: str(p["metadata"].get("creationTimestamp", "")), reverse=True):
            self._asked.add(str(pod["metadata"].get("uid", "")))
            self._annotate_stop(pod, message)

    def _annotate_stop(self, pod: JsonDict, message: str) -> None:
        meta = pod["metadata"]
        path = path_for("pods", namespace=meta["namespace"], name=meta["name"])
        body = {
            "metadata": {
                "uid": meta.get("uid"),
                "annotations": {
                    names.STOP_REASON_ANNOTATION: names.REASON_BUDGET_EXCEEDED,
                    names.STOP_MESSAGE_ANNOTATION: message,
                },
            }
        }
        try:
            self._kube.patch(path, body)
        except (NotFoundError, ConflictError):
            return
        except KubeError as exc:
            logger.warning("could not ask Pod %s/%s to stop: %s", meta["namespace"], meta["name"], exc)
            return
        logger.info("Pod %s/%s asked to stop: %s", meta["namespace"], meta["name"], message)

    # -- settling ------------------------------------------------------------------------------
    def settle(self, pool: str) -> Requeue | None:
        """Fold the spend of every deleted Pod of `pool` that is due into its ledger (once each,
        in ONE status write), then remove our finalizer from each. A Pod not due yet is looked at
        again when it is; a conflicting write, after CONFLICT_DELAY."""
        now = self.book.clock()
        ready: list[JsonDict] = []
        next_due: float | None = None
        for pod in self._pods.snapshot():
            if pool_of(pod) != pool or not deleting_ours(pod):
                continue
            due = settle_due(pod, now)
            if due <= now:
                ready.append(pod)
            else:
                next_due = due if next_due is None else min(next_due, due)
        if ready and pool and not self._fold(pool, ready, now):
            return Requeue(CONFLICT_DELAY)
        for pod in ready:
            self._remove_finalizer(pod)
        return None if next_due is None else Requeue(next_due - now)

    def _settled_of(self, name: str, obj: JsonDict) -> led.Ledger:
        try:
            return led.parse(((obj.get("status") or {}).get("spend") or {}).get("settled"))
        except led.LedgerError as exc:
            logger.warning("NodePool %s: %s; starting it again", name, exc)
            return led.EMPTY

    def _fold(self, name: str, pods: list[JsonDict], now: float) -> bool:
        """Folded (or folded before, or no pool to fold into): True; a conflict: False."""
        try:
            obj = self._kube.get(f"{NODEPOOLS}/{name}")
        except NotFoundError:
            logger.info("NodePool %s is gone; the spend of %d deleted Pods is not kept", name, len(pods))
            return True
        except KubeError as exc:
            raise Retry(f"reading NodePool {name}: {exc}", delay=1.0) from exc
        settled = folded = self._settled_of(name, obj)
        for pod in pods:
            meta = pod["metadata"]
            provider = str(((pod.get("spec") or {}).get("nodeSelector") or {}).get(names.PROVIDER_KEY) or "")
            piece = led.Piece(provider, str(meta.get("namespace", "")), price_of(pod), billing_of(pod))
            # A uid folded before (a crash, another replica) is left as it is: only its finalizer is left.
            folded = led.fold(folded, [piece], str(meta.get("uid", "")), now)
        if folded is settled:
            return True
        before = len(settled.pods)
        if not self._write_ledger(name, obj, led.prune(folded, now)):
            return False
        self.folds += len(folded.pods) - before
        return True

    def _write_ledger(self, name: str, obj: JsonDict, settled: led.Ledger) -> bool:
        status = obj.get("status") or {}
        candidates, placed = self.counts(name)
        if candidates is None:
            candidates, placed = int(status.get("candidateCount") or 0), int(status.get("placedCount") or 0)
        composed = self.compose(state_of(name, obj), candidates, placed, settled)
        try:
            return self._pools.write_status(name, composed, raw=obj)
        except KubeError as exc:  # not folded: no finalizer may go until it is (I12)
            raise Retry(f"writing NodePool {name}'s settled ledger: {exc}", delay=1.0) from exc

    def _remove_finalizer(self, pod: JsonDict) -> None:
        meta = pod["metadata"]
        finalizers = meta.get("finalizers") or []
        index = finalizers.index(names.SPEND_FINALIZER)
        ops = [
            {"op": "test", "path": "/metadata/uid", "value": meta.get("uid")},
            {"op": "test", "path": f"/metadata/finalizers/{index}", "value": names.SPEND_FINALIZER},
            {"op": "remove", "path": f"/metadata/finalizers/{index}"},
        ]
        path = path_for("pods", namespace=meta["namespace"], name=meta["name"])
        try:
            self._kube.request("PATCH", path, body=ops, content_type=JSON_PATCH)
        except NotFoundError:
            return
        except KubeError as exc:
            if exc.status in (409, 422):  # the Pod moved on: its next version is settled again
                self._queue.add(SETTLE_KEY + pool_of(pod), delay=CONFLICT_DELAY)
                return
            raise Retry(f"removing {names.SPEND_FINALIZER} from {meta['name']}: {exc}", delay=1.0) from exc


def _with_times(current: JsonDict, new: JsonDict) -> JsonDict:
    """`current` with the conditions' transition times `new` would carry, for comparing."""
    times = {c.get("type"): c.get("lastTransitionTime") for c in new.get("conditions") or []}
    conditions = [dict(c, lastTransitionTime=times.get(c.get("type"))) for c in current.get("conditions") or []]
    return dict(current, conditions=conditions)
