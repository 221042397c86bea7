"""The BudgetBook: what each pool has committed (placed, unfinished Pods as the Pod reflector
shows them, plus reservations in flight), reserved and released under the pool's lock."""

from __future__ import annotations

import threading
import time
from typing import Any

from kube import names
from placement.budgets import BudgetBook, Limit
from placement.pools import Budget
from placement.spendview import Rate
from tests.support.factories import make_pod

HOURLY_20 = Budget(max_hourly_cost=20)


def pod(
    name: str, *, pool: str = "train", price: str | None = "10", phase: str = "Running", gated: bool = False
) -> Any:
    annotations = {names.POOL_ANNOTATION: pool}
    if price is not None:
        annotations[names.HOURLY_PRICE_ANNOTATION] = price
    gates = [{"name": names.PLACEMENT_GATE}] if gated else []
    made = make_pod(
        name,
        namespace="default",
        uid=f"u-{name}",
        labels={names.ENABLED_LABEL: "true", names.POOL_LABEL: pool},
        annotations=annotations,
        schedulingGates=gates,
    )
    made["status"] = {"phase": phase}
    return made


def test_placed_pods_are_the_commitment_and_a_finished_or_gone_one_releases_it() -> None:
    book = BudgetBook()
    assert book.observe("default/a", pod("a")) == ""
    assert book.observe("default/b", pod("b", price="5.5")) == ""
    assert book.observe("default/c", pod("c", price=None)) == ""
    assert book.state("train", HOURLY_20)[:2] == (Rate(15.5, 1), 3)
    revision = book.revision("train")
    assert book.observe("default/a", pod("a", phase="Succeeded")) == "train"
    assert book.observe("default/b", None) == "train"
    assert book.observe("default/b", None) == ""  # released once
    assert book.state("train", HOURLY_20)[:2] == (Rate(0.0, 1), 1)
    assert book.revision("train") == revision + 2


def test_a_price_annotation_that_is_not_a_finite_price_counts_as_unpriced_and_raises_nothing() -> None:
    """Anyone can annotate a Pod: "nan", "inf" or a negative price must not reach the book's
    integer arithmetic (its OverflowError or ValueError would end the Pod watch that calls
    `observe`), and reads as unpriced, as the spend book reads it."""
    book = BudgetBook()
    for name, price in (("nan", "nan"), ("inf", "inf"), ("minus", "-3"), ("words", "ten")):
        assert book.observe(f"default/{name}", pod(name, price=price)) == ""
    assert book.state("train", HOURLY_20)[:2] == (Rate(0.0, 4), 4)


def test_a_reservation_holds_room_until_the_pod_shows_placed_or_the_patch_fails() -> None:
    book = BudgetBook()
    book.observe("default/a", pod("a"))
    assert book.reserve("train", "default/b", "u-b", 10.0, HOURLY_20).allowed
    refused = book.reserve("train", "default/c", "u-c", 0.5, HOURLY_20)
    assert not refused.allowed and refused.limit is Limit.MAX_HOURLY_COST
    assert refused.message == "pool train at $20.00/h of $20.00/h"
    assert book.state("train", HOURLY_20)[2:] == ("pool train at $20.00/h of $20.00/h", Limit.MAX_HOURLY_COST)
    # The reflector may show the version before the patch: the reservation stands.
    book.observe("default/b", pod("b", gated=True))
    assert book.state("train", HOURLY_20)[0] == Rate(20.0, 0)
    book.observe("default/b", pod("b"))  # placed: the reservation became the commitment
    assert book.state("train", HOURLY_20)[:2] == (Rate(20.0, 0), 2)
    assert book.release("default/b") == ""  # nothing reserved any more: a placed Pod is not released
    assert book.reserve("train", "default/d", "u-d", 1.0, HOURLY_20).allowed is False
    assert book.release("default/d") == ""
    assert book.observe("default/a", None) == "train"
    assert book.state("train", HOURLY_20)[2:] == (None, None)  # room again: no longer exceeded
    assert book.reserve("train", "default/e", "u-e", 10.0, HOURLY_20).allowed
    assert book.release("default/e") == "train"
    assert book.state("train", HOURLY_20)[:2] == (Rate(10.0, 0), 1)


def test_the_daily_limit_reads_the_injected_spend_and_the_instances_count_reservations() -> None:
    spent = {"train": (300.0, 300.0)}
    book = BudgetBook(spent=lambda pool: spent.get(pool, (0.0, 0.0)), clock=lambda: 1_800_000_000.0)
    daily = Budget(daily=300)
    refused = book.reserve("train", "default/a", "u-a", 1.0, daily)
    assert (refused.allowed, refused.limit) == (False, Limit.DAILY)
    assert book.state("train", daily)[2] == "pool train spent $300.00 today of $300.00 (UTC day)"
    spent["train"] = (0.0, 300.0)
    assert book.reserve("train", "default/a", "u-a", 1.0, daily).allowed
    two = Budget(max_instances=2)
    assert book.reserve("train", "default/b", "u-b", 1.0, two).allowed
    refused = book.reserve("train", "default/c", "u-c", 1.0, two)
    assert (refused.allowed, refused.message) == (False, "pool train at 2 of 2 instances")


def reserve_at_once(budget: Budget, *, workers: int = 20) -> tuple[BudgetBook, list[str]]:
    """`workers` threads released together, each reserving $10/h for its own Pod: who won."""
    book = BudgetBook()
    start = threading.Barrier(workers)
    won: list[str] = []

    def place(index: int) -> None:
        start.wait()
        if book.reserve("train", f"default/p{index}", f"u-{index}", 10.0, budget).allowed:
            won.append(f"p{index}")

    threads = [threading.Thread(target=place, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return book, won


def test_twenty_workers_reserve_exactly_the_room_there_is() -> None:
    """20 threads at once against room for 3 (by dollars and by count): exactly 3 reservations."""
    for budget in (Budget(max_hourly_cost=30), Budget(max_instances=3)):
        book, won = reserve_at_once(budget)
        assert len(won) == 3, (budget, won)
        assert book.state("train", budget)[:2] == (Rate(30.0, 0), 3)


def test_a_pool_change_moves_the_commitment() -> None:
    book = BudgetBook()
    book.observe("default/a", pod("a", pool="one"))
    assert book.observe("default/a", pod("a", pool="two")) == "one"
    assert book.state("one")[:2] == (Rate(0.0, 0), 0)
    assert book.state("two")[:2] == (Rate(10.0, 0), 1)


def test_the_state_reads_the_pool_s_own_budget_when_none_is_given() -> None:
    book = BudgetBook(budget_of=lambda pool: Budget(max_instances=1) if pool == "train" else None)
    book.observe("default/a", pod("a"))
    assert book.state("train") == (Rate(10.0, 0), 1, "pool train at 1 of 1 instances", Limit.MAX_INSTANCES)
    book.observe("default/b", pod("b", pool="free"))
    assert book.state("free") == (Rate(10.0, 0), 1, None, None)


def test_a_release_racing_the_placed_pods_observe_leaves_no_commitment_behind() -> None:
    """The ungate patch timed out but took: the worker releases the reservation while the
    reflector observes the placed Pod. The release must not find the Pod's pool set and its
    commitment not yet there (it would forget the pool, and the Pod's later end would never drop
    the commitment: the pool held Pods back for good). The test holds the pool's lock so the
    observe stops inside; the release then waits for it to finish, and nothing is left once the
    Pod goes."""
    book = BudgetBook()
    assert book.reserve("train", "default/a", "u-a", 10.0, HOURLY_20).allowed
    pool_book = book._book("train")
    pool_book.lock.acquire()
    observing = threading.Thread(target=book.observe, args=("default/a", pod("a")))
    releasing = threading.Thread(target=book.release, args=("default/a",))
    try:
        # The pauses only give the broken order its chance: whatever order the threads take,
        # a correct book ends the same, so they cannot fail a correct book.
        observing.start()
        time.sleep(0.1)  # the observe runs up to the pool's lock
        releasing.start()
        time.sleep(0.1)  # a release that does not wait for the observe acts now
    finally:
        pool_book.lock.release()
    observing.join(5)
    releasing.join(5)
    assert book.state("train", HOURLY_20)[1] == 1  # the placed Pod is the commitment
    assert book.observe("default/a", None) == "train"
    assert book.state("train", HOURLY_20)[:2] == (Rate(0.0, 0), 0)
