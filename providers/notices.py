"""The optional `NoticeSource` protocol: a provider that learns of an interruption before it
happens tells the vnode (the capacity taken back, a maintenance, a stop the provider began).

Part of the provider seam (re-exported by `providers.base`). The vnode's notice intake
(`vnode.phases.notices`) asks `notices(wait)` in a loop on a thread of its own, records each
notice on its Pod, and then `ack`s it: delivery is at least once, so a notice not acked (the
manager died between reading and recording it) comes again, and the vnode takes a repeat
(same `id`) as already known. A provider that can only see an interruption after the fact
(an instance gone, `Instance.preempted`) does not implement this protocol.
Tests: tests/providers/test_notices.py.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from providers.ids import InstanceId

MAX_DETAIL = 500  # characters of the provider's own words a notice carries


class NoticeKind(str, enum.Enum):
    """What the provider announced. The value is the metric's `kind` label and the docs' word."""

    SPOT_INTERRUPTION = "SpotInterruption"  # the (spot) capacity is taken back at the deadline
    REBALANCE = "RebalanceRecommendation"  # an interruption is likely soon; nothing is taken yet
    MAINTENANCE = "ScheduledMaintenance"  # the provider stops, retires or reboots it at the deadline
    STOPPING = "InstanceStopping"  # the provider is stopping or terminating it now (not asked by us)


@dataclass(frozen=True)
class Notice:
    """One notice about one instance.

    `id` names the notice itself (a repeat delivery has the same id); `receipt` is what `ack`
    needs (opaque to the vnode: a queue message's receipt handle, say). `deadline` is when the
    capacity goes (None: at once, or not said); `issued_at` when the provider issued it.
    `detail` is the provider's own words, bounded to `MAX_DETAIL` characters, never a secret.
    """

    id: str
    instance_id: InstanceId
    kind: NoticeKind
    issued_at: datetime
    deadline: datetime | None = None
    detail: str = ""
    receipt: str = ""

    def __post_init__(self) -> None:
        if len(self.detail) > MAX_DETAIL:
            object.__setattr__(self, "detail", self.detail[: MAX_DETAIL - 3] + "...")

    @property
    def takes_capacity(self) -> bool:
        """Whether the instance goes (every kind but a rebalance recommendation)."""
        return self.kind is not NoticeKind.REBALANCE


@runtime_checkable
class NoticeSource(Protocol):
    """Optional: a provider that hears of interruptions before they happen."""

    def notices(self, wait: float) -> Sequence[Notice]:
        """The notices not yet acknowledged about this owner's instances, waiting at most `wait`
        seconds for one to arrive (a long poll; an empty sequence when none came). A bounded
        batch. Raises `providers.errors.Unavailable` when it could not ask (the vnode backs off
        and asks again; nothing is lost: unacked notices stay)."""
        ...

    def ack(self, notice: Notice) -> None:
        """`notice` is handled (recorded on its Pod, or known to be about no Pod of this node):
        never deliver it again. Idempotent; raises `Unavailable` when it could not ask (the
        notice then comes again, and a repeat is harmless)."""
        ...


def handling_order(notices: Sequence[Notice]) -> list[Notice]:
    """`notices` with the capacity-taking kinds first, each by its deadline (soonest first):
    the order in which the vnode handles one batch."""
    return sorted(notices, key=lambda n: (not n.takes_capacity, n.deadline or n.issued_at))
