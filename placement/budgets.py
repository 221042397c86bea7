"""Budgets of NodePools (`spec.budget`): the pure verdict, and the book of what each pool has
committed, so a budget holds BEFORE an instance is bought.

`verdict` is pure (a pool's budget and where it stands -> may it place, and if not the
`BudgetExceeded` wording and which limit). `BudgetBook` is the thread-safe, memory-only state the
placement controller keeps: per pool the Pods placed through it and not finished (fed by its Pod
reflector: the Pod itself is the durable commitment) and the reservations of ungate patches in
flight, taken and released under the pool's lock so that concurrent workers never place past a
limit. Every check is O(1) (running sums in integer micro-dollars). Never does I/O: the spend
accrued today and this month comes from the injected `spent` (placement.spend supplies it).
Tests: tests/placement/test_budget_verdict.py::test_the_verdict_names_the_limit_that_holds,
tests/placement/test_budget_book.py::test_twenty_workers_reserve_exactly_the_room_there_is.
"""

from __future__ import annotations

import enum
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from kube import billing, names
from placement.optimizer import PRICE_SLACK
from placement.pools import Budget
from placement.request import is_placeable, placed_pool
from placement.spendview import Rate

MICRO = 1_000_000  # prices are summed in integer micro-dollars an hour: exact, order-free


class Limit(str, enum.Enum):
    """Which limit of `spec.budget` holds; the value is the NodePool condition's reason."""

    MAX_HOURLY_COST = "MaxHourlyCost"
    MAX_INSTANCES = "MaxInstances"
    DAILY = "Daily"
    MONTHLY = "Monthly"


WITHIN_BUDGET = "WithinBudget"  # the condition's reason while no limit holds


@dataclass(frozen=True)
class Verdict:
    """May the pool place one more Pod now? `allowed` False: `message` and `limit` say why and
    `resets_at` (epoch seconds) is when the limit lapses by itself (a new UTC day or month), if
    it does. `headroom`: dollars an hour `maxHourlyCost` has left (None: no such limit), and
    `hourly` its wording (`pool gpu-a at $19.20/h of $20.00/h`) for a Pod no candidate fits."""

    allowed: bool
    message: str | None = None
    limit: Limit | None = None
    resets_at: float | None = None
    headroom: float | None = None
    hourly: str | None = None


ALLOWED = Verdict(True)


def verdict(
    pool: str,
    budget: Budget | None,
    *,
    hourly: float,
    instances: int,
    today: float,
    month: float,
    now: float,
) -> Verdict:
    """Pure: `hourly` (dollars an hour committed: placed, unfinished Pods plus reservations),
    `instances` (their count), `today`/`month` (spend accrued in the current UTC day/month) ->
    the verdict. Checked in this order: maxInstances, daily, monthly; `maxHourlyCost` never
    refuses outright (a cheaper offering may fit) but gives the headroom."""
    if budget is None:
        return ALLOWED
    if budget.max_instances is not None and instances >= budget.max_instances:
        message = f"pool {pool} at {instances} of {budget.max_instances} instances"
        return Verdict(False, message, Limit.MAX_INSTANCES)
    if budget.daily is not None and today >= budget.daily:
        message = f"pool {pool} spent ${today:,.2f} today of ${budget.daily:,.2f} (UTC day)"
        return Verdict(False, message, Limit.DAILY, resets_at=billing.next_day(now))
    if budget.monthly is not None and month >= budget.monthly:
        message = f"pool {pool} spent ${month:,.2f} this month of ${budget.monthly:,.2f} (UTC month)"
        return Verdict(False, message, Limit.MONTHLY, resets_at=next_month(now))
    if budget.max_hourly_cost is None:
        return ALLOWED
    wording = f"pool {pool} at ${hourly:,.2f}/h of ${budget.max_hourly_cost:,.2f}/h"
    return Verdict(True, headroom=budget.max_hourly_cost - hourly, hourly=wording)


def fits(price: float | None, verdict: Verdict) -> bool:
    """Does an offering of `price` fit the verdict? An unpriced one (only `allowUnpriced` lets
    it this far) is not held by the hourly limit: it cannot be proven over it either."""
    if not verdict.allowed:
        return False
    return verdict.headroom is None or price is None or price <= verdict.headroom + PRICE_SLACK


def next_month(now: float) -> float:
    """Epoch seconds of the first instant of the UTC month after `now`'s."""
    moment = datetime.fromtimestamp(billing.month_start(now), UTC)
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    return moment.replace(year=year, month=month).timestamp()


def price_of(pod: Mapping[str, Any]) -> float | None:
    """The hourly price placement wrote on the Pod (`nebula.io/hourly-price`); None when absent
    or not a finite number >= 0 (anyone can annotate a Pod: "nan" or "inf" must not reach the
    book's integer arithmetic, whose error would end the Pod watch that calls it). The one reader
    of the annotation (placement.spend, placement.settle)."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(names.HOURLY_PRICE_ANNOTATION)
    try:
        price = float(text) if text is not None else math.nan
    except ValueError:
        return None
    return price if math.isfinite(price) and price >= 0 else None


def _micro(price: float | None) -> int:
    return 0 if price is None else round(price * MICRO)


@dataclass
class _PoolBook:
    """One pool's commitments: key -> (uid, price) placed, and key -> (uid, price) in flight."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    placed: dict[str, tuple[str, float | None]] = field(default_factory=dict)
    reserved: dict[str, tuple[str, float | None]] = field(default_factory=dict)
    micro: int = 0  # micro-dollars an hour of every priced entry in `placed` and `reserved`
    unpriced: int = 0  # entries without a price
    revision: int = 0  # bumped whenever a commitment is released (waiting Pods deserve a look)
    held: Verdict | None = None  # the last verdict that held a Pod back, until a commitment ends

    def add(self, entry: tuple[str, float | None]) -> None:
        self.micro += _micro(entry[1])
        self.unpriced += entry[1] is None

    def drop(self, entry: tuple[str, float | None] | None) -> bool:
        if entry is None:
            return False
        self.micro -= _micro(entry[1])
        self.unpriced -= entry[1] is None
        return True

    def hourly(self) -> float:
        return self.micro / MICRO

    def count(self) -> int:
        return len(self.placed) + len(self.reserved)


Spent = Callable[[str], tuple[float, float]]  # pool -> (dollars today, dollars this month)


def nothing_spent(pool: str) -> tuple[float, float]:
    return 0.0, 0.0


def no_budget(pool: str) -> Budget | None:
    return None


class PoolLookup(Protocol):
    def get(self, name: str) -> Any: ...  # a `poolcache.PoolState` (its `.pool` a NodePool or None) or None


def budget_from(pools: PoolLookup) -> Callable[[str], Budget | None]:
    """`pool name -> its spec.budget` over the pool cache (None: no budget, or no valid pool)."""

    def budget_of(name: str) -> Budget | None:
        state = pools.get(name)
        pool = None if state is None else state.pool
        return None if pool is None else pool.budget

    return budget_of


class BudgetBook:
    """Per pool: the committed Pods and the in-flight reservations. Thread-safe: the Pod
    reflector's callback `observe`s, the placement workers `check`, `reserve` and `release`.

    Invariant (no race): `reserve` re-checks the verdict and adds the reservation under the
    pool's lock, so N workers placing at once never take the pool past a limit; see
    tests/placement/test_budget_book.py::test_twenty_workers_reserve_exactly_the_room_there_is."""

    def __init__(
        self,
        *,
        spent: Spent = nothing_spent,
        clock: Callable[[], float] = time.time,
        budget_of: Callable[[str], Budget | None] = no_budget,
    ) -> None:
        self.spent = spent  # SPEND's accrual: (dollars today, dollars this month) of a pool
        self.clock = clock
        self.budget_of = budget_of  # `state` reads a pool's budget through it (the controller sets it)
        # Guards the two dicts below; taken before a pool's lock, never while holding one. A Pod's
        # `_pool_of` entry and its `placed` entry change under it together (`observe`), so `release`
        # never reads one moved without the other.
        self._lock = threading.Lock()
        self._pools: dict[str, _PoolBook] = {}
        self._pool_of: dict[str, str] = {}  # Pod key -> the pool it is committed to or reserved in

    def _book(self, pool: str) -> _PoolBook:
        with self._lock:
            return self._book_held(pool)

    def _book_held(self, pool: str) -> _PoolBook:
        """`_book` for a caller holding `_lock`."""
        book = self._pools.get(pool)
        if book is None:
            book = self._pools[pool] = _PoolBook()
        return book

    def _verdict(self, pool: str, book: _PoolBook, budget: Budget | None) -> Verdict:
        needs_spend = budget is not None and (budget.daily is not None or budget.monthly is not None)
        today, month = self.spent(pool) if needs_spend else (0.0, 0.0)
        return verdict(
            pool, budget, hourly=book.hourly(), instances=book.count(), today=today, month=month, now=self.clock()
        )

    def check(self, pool: str, budget: Budget | None) -> Verdict:
        """The pool's verdict now (not binding: `reserve` decides)."""
        book = self._book(pool)
        with book.lock:
            return self._verdict(pool, book, budget)

    def reserve(self, pool: str, key: str, uid: str, price: float | None, budget: Budget | None) -> Verdict:
        """Reserve `price` for the Pod `key` before its ungate patch; the verdict it was taken
        under. Not `allowed` (or the price no longer fits): nothing reserved, and the pool
        remembers what held the Pod back."""
        book = self._book(pool)
        with book.lock:
            found = self._verdict(pool, book, budget)
            if not fits(price, found):
                book.held = found
                return Verdict(False, found.message or found.hourly, found.limit or Limit.MAX_HOURLY_COST)
            book.drop(book.reserved.pop(key, None))
            book.reserved[key] = (uid, price)
            book.add((uid, price))
            book.held = None
        with self._lock:
            self._pool_of[key] = pool
        return found

    def note_held(self, pool: str, held: Verdict) -> None:
        """A Pod of `pool` waits for its budget (`held` says why): shown by `state` until a
        commitment of the pool ends."""
        book = self._book(pool)
        with book.lock:
            book.held = held

    def release(self, key: str) -> str:
        """The ungate patch of `key` failed (or it is gone): its reservation is dropped. Returns
        the pool that regained room ("" if none)."""
        return self._drop(key, placed=False)

    def observe(self, key: str, pod: Mapping[str, Any] | None) -> str:
        """The Pod reflector saw `key` change: a placed, unfinished Pod is a commitment (its
        reservation becomes it); a finished or gone one releases what it held. Returns the pool
        that regained room ("" if none): its BudgetExceeded waiters deserve a look."""
        pool = "" if pod is None else placed_pool(pod)
        if not pool:
            if pod is not None and is_placeable(pod):
                return ""  # the version before our patch, seen late: the reservation stands
            return self._drop(key, placed=True)
        entry = (str((pod or {}).get("metadata", {}).get("uid", "")), price_of(pod or {}))
        with self._lock:
            before = self._pool_of.get(key, "")
            self._pool_of[key] = pool
            book = self._book_held(pool)
            with book.lock:
                book.drop(book.reserved.pop(key, None))
                book.drop(book.placed.pop(key, None))
                book.placed[key] = entry
                book.add(entry)
        return self._drop_from(before, key) if before and before != pool else ""

    def _drop(self, key: str, *, placed: bool) -> str:
        with self._lock:
            pool = self._pool_of.get(key, "")
            if pool and (placed or key not in self._pools[pool].placed):
                del self._pool_of[key]
        return self._drop_from(pool, key, placed=placed) if pool else ""

    def _drop_from(self, pool: str, key: str, *, placed: bool = True) -> str:
        book = self._book(pool)
        with book.lock:
            dropped = book.drop(book.reserved.pop(key, None))
            if placed:
                dropped = book.drop(book.placed.pop(key, None)) or dropped
            if not dropped:
                return ""
            book.revision += 1
            book.held = None
        return pool

    def revision(self, pool: str) -> int:
        """Bumped each time `pool` releases a commitment (part of a placement attempt's inputs)."""
        book = self._book(pool)
        with book.lock:
            return book.revision

    def state(self, pool: str, budget: Budget | None = None) -> tuple[Rate, int, str | None, Limit | None]:
        """For SPEND and the console: the pool's committed rate (placed + reserved), its
        instances, and the BudgetExceeded message and limit while a budget holds Pods back
        (None, None otherwise). `budget` defaults to the pool's own (`budget_of`)."""
        budget = budget if budget is not None else self.budget_of(pool)
        book = self._book(pool)
        with book.lock:
            rate = Rate(book.hourly(), book.unpriced)
            found = self._verdict(pool, book, budget)
            held = book.held if budget is not None else None
            count = book.count()
        if not found.allowed:
            return rate, count, found.message, found.limit
        if held is not None:
            return rate, count, held.message or held.hourly, held.limit or Limit.MAX_HOURLY_COST
        return rate, count, None, None
