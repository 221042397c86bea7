"""The manager's one ordered stop: every piece that starts pushes how to stop it, and `run`
stops them last-started first within one grace (`stop_in_order`), naming what is left busy.

Filled and run by `nebula_site.manager.main` (start-up and the leading loop alike). Never
decides what to stop: the order is the order things started in; a step that raises does not
keep the later ones from running (the first error is raised once all ran).

Invariant: shutdown takes at most one grace, each step getting what the earlier ones left; see
tests/nebula_site/test_manager.py::test_stop_in_order_shares_one_grace_and_names_what_is_left.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from kube.worker import describe

logger = logging.getLogger(__name__)

Stopper = Callable[[float], list[threading.Thread]]  # seconds left -> the threads it left busy


def stop_in_order(
    steps: Sequence[Stopper], grace: float, *, monotonic: Callable[[], float] = time.monotonic
) -> list[threading.Thread]:
    """Run each step with the seconds left of `grace` (never negative); returns every thread
    a step left busy, so the caller can name them."""
    deadline = monotonic() + grace
    busy: list[threading.Thread] = []
    for step in steps:
        busy += step(max(0.0, deadline - monotonic()))
    return busy


def untimed(stop: Callable[[], object]) -> Stopper:
    """A step for a piece whose stop takes no timeout (a listener, the embedded cluster)."""

    def step(timeout: float) -> list[threading.Thread]:
        stop()
        return []

    return step


class Shutdown:
    """The stack of stop steps of one process, run once, last pushed first."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self._steps: list[Stopper] = []
        self._lock = threading.Lock()

    def push(self, step: Stopper) -> None:
        with self._lock:
            self._steps.append(step)

    def push_untimed(self, stop: Callable[[], object]) -> None:
        self.push(untimed(stop))

    def run(self) -> list[threading.Thread]:
        """Every step, last pushed first, within `grace` in all; logs the threads left busy."""
        with self._lock:
            steps, self._steps = self._steps[::-1], []
        failed: list[BaseException] = []

        def guarded(step: Stopper) -> Stopper:
            def run(timeout: float) -> list[threading.Thread]:
                try:
                    return step(timeout)
                except Exception as exc:  # the later steps still run; the first error is raised after
                    failed.append(exc)
                    return []

            return run

        busy = stop_in_order([guarded(step) for step in steps], self.grace)
        if busy:
            logger.warning("stopped with work still in flight after %.0fs: %s", self.grace, describe(busy))
        if failed:
            raise failed[0]
        return busy
