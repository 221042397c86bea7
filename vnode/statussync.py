"""Status sync from the provider: the poll loop and its tick, one `provider.list()` per poll interval.

The pod controller starts `StatusSync.run` on its poll thread; `Handler.poll_once` is one
tick. A tick recomputes every tracked Pod's desired metadata and status from the list,
sweeps orphans, and hands back the keys due for a write (the pod controller's workers
write them through `PodWriter.flush`). Never writes to the API itself.

Invariant (I3): a failed list changes nothing; see
tests/vnode/test_invariants.py::test_I3_provider_unreachable_across_a_restart_changes_nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime

from providers import errors
from providers.base import Capabilities, ClaimName, Provider
from vnode.inventory import Inventory
from vnode.podwriter import PodWriter
from vnode.teardown import OrphanSweep
from vnode.tracking import TrackedMap

logger = logging.getLogger(__name__)


class StatusSync:
    def __init__(
        self,
        provider: Provider,
        *,
        tracked: TrackedMap,
        inventory: Inventory,
        writer: PodWriter,
        sweep: OrphanSweep,
        capabilities: Callable[[], Capabilities],
        monotonic: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime],
    ) -> None:
        self._provider = provider
        self._tracked = tracked
        self._inventory = inventory
        self._writer = writer
        self._sweep = sweep
        self._capabilities = capabilities
        self._monotonic = monotonic
        self._now = now

    def poll_once(self, live_claims: Iterable[ClaimName] | None = None) -> list[str]:
        """One tick: one provider.list(), statuses recomputed, orphans swept.

        Returns the keys whose desired metadata or status changed (to be flushed). A failed
        list changes nothing (I3). `live_claims` (the claims of every Pod on the node, or
        None while the Pod cache is not synced) enables the orphan sweep.
        """
        begun = self._monotonic()
        try:
            snapshot = self._inventory.list()
        except errors.ProviderError as exc:
            logger.warning("list on %s failed; nothing changes this tick: %s", self._provider.name, exc)
            return []
        changed: list[str] = []
        lag = self._capabilities().list_lag
        for entry in self._tracked.entries():
            if entry.terminal or entry.instance_id is None:
                continue
            instance = snapshot.get(entry.claim)
            moved = False
            if instance is not None:
                moved = entry.observe(instance, now=self._now())
            # Only a list begun `lag` after the instance was recorded can say it is gone: one
            # begun earlier may have been read before the provision completed.
            elif begun - entry.provisioned_at >= lag and entry.last_instance is not None:
                entry.lose(now=self._now())
                moved = True
            if moved or self._writer.needs_flush(entry):
                changed.append(entry.key)
        if live_claims is not None:
            self._sweep.sweep(snapshot, set(live_claims) | self._tracked.claims())
        return changed

    def run(
        self,
        stop: threading.Event,
        *,
        interval: Callable[[], float],
        live_claims: Callable[[], set[ClaimName] | None],
        changed: Callable[[str], None],
    ) -> None:
        """The poll loop: a tick every `interval()` seconds until `stop`; each changed key
        goes to `changed` (the pod controller's queue)."""
        while not stop.is_set():
            for key in self.poll_once(live_claims()):
                changed(key)
            stop.wait(interval())
