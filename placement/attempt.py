"""How one placement attempt ended (`Attempt`), and the stable per-Pod spread of its next look.

Pure values; the placement controller returns them from its attempts and keeps `fresh_at` to
skip an attempt whose inputs have not changed. Never does I/O.
Tests: tests/placement/test_controller_outcomes.py::test_a_new_event_only_when_what_the_pod_waits_for_changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from kube.worker import Requeue


def fnv1a64(text: str) -> int:
    value = 0xCBF29CE484222325
    for byte in text.encode():
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


@dataclass(frozen=True)
class Attempt:
    """How one placement attempt ended. `requeue`: when to look again (None: not unless
    something changes). `fresh_at`: epoch seconds from which the same inputs deserve another
    attempt (None: never while they stay the same). `settled=False`: the next look is an
    attempt whatever the inputs."""

    requeue: Requeue | None = None
    fresh_at: float | None = None
    settled: bool = True
    placed: bool = False  # the ungate patch was applied (a reservation became a placement)


SETTLED = Attempt()
PLACED = Attempt(placed=True)
