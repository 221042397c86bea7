"""The one `PhaseContext` every phase takes: what provisioning, status sync, teardown, lifecycle,
give-up, serving and the inventory share (the provider, the tracked map, the inventory, the
writer and reader, Events, the provider's traits, the pools and the clocks).

Built once per provider by the Handler; frozen, so no phase swaps a piece another phase sees.
Does no I/O: the provider's capabilities are asked on first use (`Traits`). Never imports the
writer's module: phases write through the `Writer` protocol.
Tests: tests/vnode/test_context.py, tests/vnode/test_controllers.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from kube.events import EventRecorder
from providers.base import Capabilities, Provider, Restarter
from vnode.blocklister import Blocklister
from vnode.ephemeral.containers import Ephemerals
from vnode.model.billing import BillingSeen
from vnode.model.runs import DEFAULT_BACKOFF, BackoffPolicy, Rules
from vnode.model.tracking import Tracked, TrackedMap
from vnode.phases.inventory import Inventory
from vnode.poolpolicy import PoolPolicies
from vnode.sources.reader import PodReader


class Writer(Protocol):
    """Every write about a Pod (`vnode.podwriter.PodWriter`)."""

    def needs_flush(self, entry: Tracked) -> bool: ...

    def flush(self, entry: Tracked, current: Mapping[str, Any] | None) -> None: ...

    def write_status(self, pod: Mapping[str, Any], desired: Mapping[str, Any]) -> bool: ...

    def advertise_node(self, addresses: Sequence[Mapping[str, str]]) -> None: ...


class Traits:
    """What the provider is, asked once on first use: its capabilities, its poll interval
    (`poll_interval` overrides the provider's), and what runs mean on it (`Rules`)."""

    def __init__(
        self, provider: Provider, *, poll_interval: float | None = None, backoff: BackoffPolicy = DEFAULT_BACKOFF
    ) -> None:
        self._provider = provider
        self._poll_interval = poll_interval
        self._backoff = backoff
        self._capabilities: Capabilities | None = None
        self._rules: Rules | None = None

    def capabilities(self) -> Capabilities:
        if self._capabilities is None:
            self._capabilities = self._provider.capabilities()
        return self._capabilities

    def poll_interval(self) -> float:
        return self._poll_interval or self.capabilities().poll_interval

    def rules(self) -> Rules:
        """What runs mean on this provider: restarts in place? does a finished instance bill?"""
        if self._rules is None:
            caps = self.capabilities()
            in_place = caps.restarts_in_place and isinstance(self._provider, Restarter)
            self._rules = Rules(
                in_place=in_place, bills=caps.bills_after_exit, backoff=self._backoff, starts=caps.billing_starts
            )
        return self._rules


@dataclass(frozen=True)
class PhaseContext:
    """What the phases share. `inventory` is shared state like the tracked map, so it is
    built before the context (over the same provider and clock), not from it. `blocklister`
    and `pools` are None without placement; `ephemerals` None where no Pod runs one."""

    provider: Provider
    tracked: TrackedMap
    inventory: Inventory
    writer: Writer
    reader: PodReader
    events: EventRecorder
    traits: Traits
    ephemerals: Ephemerals | None = None
    blocklister: Blocklister | None = None
    pools: PoolPolicies | None = None
    monotonic: Callable[[], float] = time.monotonic
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    billing_seen: BillingSeen = field(default_factory=BillingSeen)  # the node's billing-seen-at

    def capabilities(self) -> Capabilities:
        return self.traits.capabilities()

    def rules(self) -> Rules:
        return self.traits.rules()

    def poll_interval(self) -> float:
        return self.traits.poll_interval()
