"""The per-claim lock map: one holder per claim at a time, and no lock left for an idle claim."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from providers import claimlocks


def test_claim_locks_are_pruned_when_idle() -> None:
    """1,000 claims held and released one after the other, then from eight threads at once
    (each claim several times), leave no lock behind."""
    locks = claimlocks.ClaimLocks()
    for n in range(1000):
        with locks.held(f"claim-{n}"):
            assert len(locks) == 1
    assert len(locks) == 0

    def hold(n: int) -> None:
        with locks.held(f"claim-{n % 1000}"):
            pass

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(hold, range(4000)))
    assert len(locks) == 0


def test_one_holder_per_claim_at_a_time() -> None:
    """Callers of one claim take turns; a waiter keeps the claim's lock alive until it is done."""
    locks = claimlocks.ClaimLocks()
    inside = 0
    most = 0
    guard = threading.Lock()

    def hold(_: int) -> None:
        nonlocal inside, most
        with locks.held("same"):
            with guard:
                inside += 1
                most = max(most, inside)
            threading.Event().wait(0.001)
            with guard:
                inside -= 1

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(hold, range(64)))
    assert most == 1
    assert len(locks) == 0


def test_other_claims_do_not_wait() -> None:
    """While one claim is held, another claim's lock is taken at once."""
    locks = claimlocks.ClaimLocks()
    with locks.held("a"):
        taken = threading.Event()

        def other() -> None:
            with locks.held("b"):
                taken.set()

        thread = threading.Thread(target=other)
        thread.start()
        assert taken.wait(5)
        thread.join()
        assert len(locks) == 1
    assert len(locks) == 0
