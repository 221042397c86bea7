"""The placement controller: gated, opted-in Pods get a provider, a tier and a region.

Started by `placement.wiring`. Watches Pods labelled `nebula.io/enabled=true`; for each gated
one it resolves the pool, asks the optimizer, and in ONE Pod patch writes the nodeSelector and
annotations and removes only its own gate. A Pod with no candidate stays gated, noted in the
`GatedRegister` with what it waits for (one Event per change of that), and is looked at again
when a block lapses or is cleared, when its offerings come back, when its pool's budget regains
room, and at least every `PLACEMENT_RECHECK` seconds; past its pool's `waitForCapacity` it is
failed (`placement.capacitywait`). A budgeted pool's price is reserved before the patch. The
`InterruptionBook` counts each workload's interruptions from the Pod watch (fallback to
OnDemand). It warns once of a Pod without the gate (`placement.notgated`), deletes given-up
Pods a ReplicaSet owns, and publishes each NodePool's status through `placement.settle.SpendWork`.
Runs on `kube.worker.WorkerPool`: `sync` returns a named `Requeue` or None and raises `Retry`;
never writes the blocklist (the vnode Handler records refusals with their pool).

Invariant (no spin): a Pod gets at most one placement attempt per change of its own, of its
pool, of the blocklist (an expiry included) or of the offerings (one gaining an available
row), and one per `PLACEMENT_RECHECK` while it waits; see
tests/placement/test_e2e_failover.py::test_every_candidate_refusing_keeps_pods_gated_without_spinning.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kube import names, observe
from kube.client import Kube
from kube.events import EventRecorder
from kube.reflector import Reflector
from kube.worker import Requeue, WorkerPool
from kube.workqueue import WorkQueue
from placement import capacitywait, notgated
from placement.attempt import PLACED, SETTLED, Attempt, fnv1a64
from placement.blocklist import Blocklist
from placement.budgets import BudgetBook, Verdict, budget_from
from placement.catalog import Catalog
from placement.gated import GatedPod, GatedRegister, Waiting, gated_pods
from placement.interruptions import Fallback, InterruptionBook, fall_back, fallback_of, workload_of
from placement.optimizer import Decision, blocklist_lookup, count_candidates, decide
from placement.poolcache import PoolCache, generation
from placement.pools import NodePool
from placement.replacing import replace_given_up
from placement.request import (
    RequestError,
    WorkloadRequest,
    is_placeable,
    is_replaceable_failure,
    labels,
    placed_pool,
    workload_request,
)
from placement.settle import SPEND_INTERVAL, SPEND_KEY, SpendWork
from placement.spend import SpendBook
from placement.spendview import dollars
from placement.ungate import LOOK_AGAIN_NOW, placement_annotations, send, ungate_patch, with_history
from placement.ungate import PATCH_RETRY_DELAY as PATCH_RETRY_DELAY
from placement.waiting import PLACEMENT_RECHECK, wait_for

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]
POOL_KEY = "pool:"  # queue keys of NodePools; a namespace never contains ':'
PLACED_KEY = "placed:"  # a NodePool's placedCount changed: publish it
CATALOG_KEY = "catalog:"  # the queue key that asks the catalog again while Pods wait for offerings
MAX_EVENT_MESSAGE = 1000
POOLS_UNSYNCED = Requeue(0.5)  # the pool cache has not listed NodePools yet: look again shortly
EXPIRY_MARGIN = 0.05  # seconds past an expiry before looking again, so the entry has lapsed


class PlacementController:
    def __init__(
        self,
        *,
        kube: Kube,
        watch_kube: Kube,
        catalog: Catalog,
        pools: PoolCache,
        blocklist: Blocklist,
        events: EventRecorder,
        workers: int = 8,
        requeue_spread: float = 1.0,
        recheck: float = PLACEMENT_RECHECK,
        queue: WorkQueue | None = None,
        budgets: BudgetBook | None = None,
        clock: Callable[[], float] = time.time,
        spend_interval: float = SPEND_INTERVAL,
    ) -> None:
        self._kube = kube
        self._catalog = catalog
        self._pools = pools
        self._blocklist = blocklist
        self._events = events
        self._spread = requeue_spread
        self._recheck = recheck
        self.queue = queue if queue is not None else WorkQueue()
        self.attempts: Counter[str] = Counter()  # placement attempts per Pod key (tests, metrics)
        self.gated = GatedRegister()
        self.not_gated = notgated.NotGatedRegister()
        self._last: dict[str, tuple[Any, float | None]] = {}  # key -> (inputs signature, fresh_at)
        self._placed: dict[str, str] = {}  # Pod key -> the pool it was placed through (unfinished)
        self.placed_counts: Counter[str] = Counter()  # pool -> len of its entries in _placed
        self._lock = threading.Lock()
        self.interruptions = InterruptionBook(blocklist.now)  # per workload, for fallbackToOnDemandAfter
        self.workers = WorkerPool(self.queue, self.sync, name="placement", workers=workers)
        self.pods = Reflector(
            watch_kube, "/api/v1/pods", on_change=self._on_pod, label_selector=f"{names.ENABLED_LABEL}=true"
        )
        book = SpendBook(self.pods, pools, clock=clock)
        # One clock for both books: the budget's day and month are the accrual's (a test's fake one too).
        self.budgets = budgets if budgets is not None else BudgetBook(clock=lambda: book.clock())
        self.budgets.budget_of = budget_from(pools)
        self.spend = SpendWork(kube, book, pools, self.pods, self.queue, self.placed_count, self.pool_changed)
        self.spend.interval = spend_interval  # its writes run here, under `spend:` keys (placement.settle)
        self.spend.verdict = self._budget_verdict  # one verdict: the budget book's, reservations included
        self.budgets.spent = lambda pool: dollars(book.spent(pool))

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self.pods.start()
        self.workers.start()
        self.spend.start()

    def stop(self, timeout: float = 30.0) -> list[threading.Thread]:
        """Stop intake (the workers end when the queue closes); returns those still busy after `timeout`."""
        self.pods.stop()
        return self.workers.stop(timeout)

    # -- inputs ------------------------------------------------------------------------------
    def _on_pod(self, key: str, pod: JsonDict | None) -> None:
        self.queue.add(key)
        self.interruptions.observe(pod)  # a newly interrupted Pod, or the history a placed one carries
        self._budget_released(self.budgets.observe(key, pod))
        self.spend.pod_changed(key, pod)  # the spend book's index; a deleted Pod is settled
        pool = "" if pod is None else placed_pool(pod)
        with self._lock:
            before = self._placed.pop(key, "")
            if pool:
                self._placed[key] = pool
            if before == pool:
                return
            if before:
                self.placed_counts[before] -= 1
            if pool:
                self.placed_counts[pool] += 1
        for name in (before, pool):
            if name:
                self.queue.add(PLACED_KEY + name)  # coalesced: one status write per burst

    def pool_changed(self, name: str) -> None:
        """A NodePool appeared, went, or changed its spec."""
        self.queue.add(POOL_KEY + name)

    def _budget_verdict(self, pool: str) -> tuple[str, str] | None:
        """(reason, message) while the pool's budget holds new Pods back, else None (SpendWork's)."""
        _, _, message, limit = self.budgets.state(pool)
        return None if message is None or limit is None else (limit.value, message)

    def _budget_released(self, pool: str) -> None:
        """`pool` released a commitment: the Pods its budget holds look again now."""
        for key in self.gated.woken_by_budget(pool) if pool else ():
            self.queue.add(key)

    def blocklist_changed(self) -> None:
        """An entry was cleared: Pods waiting for a blocked candidate look again now."""
        for key in self.gated.woken_by_blocklist():
            self.queue.add(key)

    def offerings_changed(self, provider: str) -> None:
        """The catalog saw `provider` offer something it did not: Pods waiting for it look again now."""
        for key in self.gated.woken_by_offerings(provider):
            self.queue.add(key)

    # -- the read side -----------------------------------------------------------------------
    def gated_pods(self) -> list[GatedPod]:
        """Every Pod placement holds back, with what its last Event said, by namespace and name."""
        return gated_pods(self.pods.snapshot(), self.gated)

    # -- work --------------------------------------------------------------------------------
    def sync(self, key: str) -> Requeue | None:
        """Process one key (run by the WorkerPool). Returns when to look again, or None;
        raises Retry when a write failed."""
        if key == CATALOG_KEY:
            return self._sync_catalog()
        if key.startswith(POOL_KEY):
            self._sync_pool(key[len(POOL_KEY) :])
            return None
        if key.startswith(PLACED_KEY):  # the whole status, placedCount and spend (nothing before the pool's sync)
            self.spend.publish(key[len(PLACED_KEY) :])
            return None
        if key.startswith(SPEND_KEY):
            return self.spend.sync(key)
        with self.pods.lock:
            pod = self.pods.cache.get(key)
        if pod is None:
            self._forget(key)
            self.not_gated.warn(key, None, self._event)
            return None
        if is_replaceable_failure(pod):
            self._forget(key)
            replace_given_up(self._kube, pod, self._event)
            return None
        if not is_placeable(pod):
            self._forget(key)
            self.not_gated.warn(key, pod, self._event)
            return None
        if not self._pools.synced.is_set():
            return POOLS_UNSYNCED
        signature = self._signature(pod)
        now = self._blocklist.now()
        with self._lock:
            last = self._last.get(key)
        if last is not None and last[0] == signature and (last[1] is None or now < last[1]):
            # Nothing this attempt depends on has changed: no new attempt. The look that is due
            # is kept, since this early one (a status write, say) took its place in the queue.
            return None if last[1] is None else Requeue(self._look_delay(pod, last[1], now))
        self.attempts[key] += 1
        self.gated.begin(key)
        try:
            attempt = self._place(key, pod)
        except Exception:
            with self._lock:
                self._last.pop(key, None)  # a failed attempt settles nothing: the retry is a real attempt
            raise
        finally:
            self.gated.end(key)
        with self._lock:
            if attempt.settled:
                self._last[key] = (signature, attempt.fresh_at)
            else:
                self._last.pop(key, None)
        return attempt.requeue

    def _forget(self, key: str) -> None:
        with self._lock:
            self._last.pop(key, None)
        self.gated.forget(key)

    def _look_delay(self, pod: JsonDict, at: float, now: float) -> float:
        """Seconds until the look due at `at` (epoch), just past it, plus the Pod's stable offset
        (FNV-1a of its uid, up to `requeue_spread`) so a crowd of Pods does not wake at once."""
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        return max(0.0, at - now) + EXPIRY_MARGIN + self._spread * (fnv1a64(uid) % 1000) / 1000

    def _signature(self, pod: JsonDict) -> tuple[Any, ...]:
        pool_name = labels(pod).get(names.POOL_LABEL, "")
        state = self._pools.get(pool_name) if pool_name else None
        pool_sig = None if state is None else (generation(state.raw), state.error)
        meta = pod.get("metadata") or {}
        # What placement reads of the Pod; its status (the scheduler's SchedulingGated
        # condition, say) is left out so a status write does not buy another attempt.
        placement_inputs = json.dumps([meta.get("uid"), meta.get("labels"), pod.get("spec")], sort_keys=True)
        budget_room = self.budgets.revision(pool_name) if pool_name else 0
        return (
            placement_inputs,
            pool_name,
            pool_sig,
            self._blocklist.revision(),
            self._catalog.revision(),
            budget_room,
        )

    # -- one placement attempt -----------------------------------------------------------------
    def _place(self, key: str, pod: JsonDict) -> Attempt:
        """One attempt: writes the Pod, or notes what it waits for (an Event when that changed)."""
        pool_name = labels(pod).get(names.POOL_LABEL, "")
        if not pool_name:
            return self._misconfigured(
                key, pod, names.EVENT_NO_POOL, f"label the Pod {names.POOL_LABEL}=<NodePool name>"
            )
        state = self._pools.get(pool_name)
        if state is None:
            message = f"NodePool {pool_name!r} does not exist; create it or fix the {names.POOL_LABEL} label"
            return self._misconfigured(key, pod, names.EVENT_NO_POOL, message)
        if state.pool is None:
            message = f"NodePool {pool_name!r} is invalid: {state.error}"
            return self._misconfigured(key, pod, names.EVENT_POOL_INVALID, message)
        try:
            request = workload_request(pod)
        except RequestError as exc:
            return self._misconfigured(key, pod, names.EVENT_INVALID_REQUEST, str(exc))
        now = self._blocklist.now()
        budget = state.pool.budget
        verdict = None if budget is None else self.budgets.check(pool_name, budget)
        if verdict is not None and not verdict.allowed:
            return self._wait(key, pod, request, Decision(None, "", ()), now, verdict, state.pool)
        lookup = blocklist_lookup(self._blocklist, request.accelerator)
        headroom = None if verdict is None else verdict.headroom
        history = self.interruptions.recent(workload_of(pod), state.pool.interruption.window, now)
        fallback = fallback_of(state.pool, history)
        pool, skip = fall_back(state.pool, fallback)  # OnDemand only, once the workload was interrupted enough
        decision = decide(pool, request, self._catalog.views(), lookup, now=now, headroom=headroom)
        decision = decision if skip is None else replace(decision, skipped=(skip, *decision.skipped))
        if decision.chosen is None:
            return self._wait(key, pod, request, decision, now, verdict, state.pool)
        if budget is None:
            return self._ungate(key, pod, state.pool, decision, fallback, history)
        uid = str(pod["metadata"].get("uid", ""))
        if not self.budgets.reserve(pool_name, key, uid, decision.chosen.hourly_price, budget).allowed:
            return Attempt(LOOK_AGAIN_NOW, settled=False)  # another worker took the room: decide again
        attempt = Attempt(settled=False)
        try:
            attempt = self._ungate(key, pod, state.pool, decision, fallback, history)
            return attempt
        finally:
            if not attempt.placed:  # the patch failed or met another version: the reservation goes
                self._budget_released(self.budgets.release(key))

    def _wait(
        self,
        key: str,
        pod: JsonDict,
        request: WorkloadRequest,
        decision: Decision,
        now: float,
        budget: Verdict | None,
        pool: NodePool,
    ) -> Attempt:
        """Hold the Pod for what the decision (and `pool`'s budget verdict) says it waits for."""
        wait = wait_for(decision, request, now=now, recheck=self._recheck, budget=budget, pool=pool.name)
        held = capacitywait.enforce(self._kube, pod, wait, request, pool.wait_for_capacity, now, self._event)
        if isinstance(held, Attempt):  # failover.waitForCapacity ran out: the Pod ended (or moved)
            if held.settled:
                self._forget(key)
            return held
        wait = held  # looked at again by the time its wait runs out
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        self._hold(key, pod, wait.waiting(uid))
        if wait.budget_pool and budget is not None:
            self.budgets.note_held(pool.name, budget)
        outcome = "budget" if wait.budget_pool else "blocked" if decision.retry_at is not None else "no_candidate"
        observe.current().placement_decided(outcome)
        if wait.watched:  # ask the catalog again after its TTL, while someone waits for it
            self.queue.add(CATALOG_KEY, delay=self._catalog.ttl + EXPIRY_MARGIN)
        return Attempt(Requeue(self._look_delay(pod, wait.next_look, now)), fresh_at=wait.next_look)

    def _misconfigured(self, key: str, pod: JsonDict, reason: str, message: str) -> Attempt:
        """The Pod or its pool must change before it can be placed: held, no look on a timer."""
        self._hold(key, pod, Waiting(str((pod.get("metadata") or {}).get("uid", "")), reason, message))
        observe.current().placement_decided("invalid")
        return SETTLED

    def _hold(self, key: str, pod: JsonDict, waiting: Waiting) -> None:
        if self.gated.note(key, waiting):
            self._event(pod, "Warning", waiting.reason, waiting.message)

    def _ungate(
        self, key: str, pod: JsonDict, pool: NodePool, decision: Decision, fell: Fallback | None, history: list[float]
    ) -> Attempt:
        """One JSON patch: nodeSelector, annotations (the workload's recent interruptions, `history`),
        our gate removed (others kept). Its `test` ops make it apply only to the Pod as placement
        saw it; a concurrent status write (the scheduler's) does not conflict, as an update would."""
        chosen = decision.chosen
        assert chosen is not None
        ops = ungate_patch(pod, chosen.provider, with_history(placement_annotations(chosen, pool.name), history))
        outcome = send(self._kube, pod, ops)  # None: applied; else the Pod moved (look again) or went
        if outcome is None or outcome.settled:
            self.gated.forget(key)
        if outcome is not None:
            return outcome
        message = f"placed on {chosen.label()} at {chosen.price_text()}: {decision.why}"
        if decision.skipped:
            message += "; skipped " + "; ".join(s.text() for s in decision.skipped)
        observe.current().placement_decided("placed")
        self._event(pod, "Normal", names.EVENT_PLACED, message)
        if fell is not None:  # spec.interruption.fallbackToOnDemandAfter moved the workload to OnDemand
            self._event(pod, "Normal", names.EVENT_FALLBACK_TO_ON_DEMAND, fell.message)
        return PLACED

    # -- offerings and pools -------------------------------------------------------------------
    def _sync_catalog(self) -> Requeue | None:
        """Ask the catalog again (it calls only the providers whose answer is older than its
        TTL; a gained offering wakes its Pods through `offerings_changed`), and again after
        another TTL while some Pod still waits for offerings."""
        self._catalog.views()
        return Requeue(self._catalog.ttl + EXPIRY_MARGIN) if self.gated.watching_offerings() else None

    def _sync_pool(self, name: str) -> None:
        state = self._pools.get(name)
        pool = state.pool if state is not None else None
        count = count_candidates(pool, self._catalog.views()) if pool is not None else 0
        self.spend.pool_synced(name, None if state is None else count)
        for pod in self.pods.snapshot():
            if labels(pod).get(names.POOL_LABEL) == name and is_placeable(pod):
                meta = pod["metadata"]
                self.queue.add(f"{meta['namespace']}/{meta['name']}")

    def placed_count(self, pool: str) -> int:
        return self.placed_counts[pool]  # one read of a Counter: atomic under the GIL

    def _event(self, pod: JsonDict, kind: str, reason: str, message: str) -> None:
        if len(message) > MAX_EVENT_MESSAGE:
            message = message[: MAX_EVENT_MESSAGE - 3] + "..."
        self._events.pod(pod, kind, reason, message)
