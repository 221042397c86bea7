"""The provider's instances as its last `list()` returned them, and whether it answered.

Owned by the Handler; read by the status sync (one list per poll tick), the pod
controller's lookups (re-adoption on a cold map), the node controller (Ready follows
`last_list_ok`) and the console. Never provisions or terminates anything.

Invariant (I3): a failed list is "could not ask", never "no instances": `lookup` answers
`Lookup.UNKNOWN`; see
tests/vnode/test_invariants.py::test_I3_provider_unreachable_across_a_restart_changes_nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kube import observe
from providers import errors
from providers.base import ClaimName, Instance, Provider
from vnode.tracking import Lookup, pod_claim


class Inventory:
    def __init__(
        self,
        provider: Provider,
        *,
        snapshot_ttl: float = 2.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._provider = provider
        self._snapshot_ttl = snapshot_ttl
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._snapshot: dict[ClaimName, Instance] | None = None
        self._snapshot_at = -1e18
        self.last_list_ok: bool | None = None  # None until the first list
        self.last_list_error = ""
        self.last_list_seconds = 0.0

    def list(self) -> dict[ClaimName, Instance]:
        """One provider.list(), by claim; raises errors.ProviderError. Feeds the snapshot."""
        name = self._provider.name
        started = self._monotonic()
        try:
            instances = self._provider.list()
        except errors.ProviderError as exc:
            self.last_list_ok, self.last_list_error = False, f"{type(exc).__name__}: {exc}"
            self.last_list_seconds = self._monotonic() - started
            observe.current().listed(name, self.last_list_seconds, ok=False)
            raise
        self.last_list_seconds = self._monotonic() - started
        self.last_list_ok, self.last_list_error = True, ""
        observe.current().listed(name, self.last_list_seconds, ok=True)
        snapshot = {i.claim: i for i in instances}
        self._snapshot, self._snapshot_at = snapshot, self._monotonic()
        return snapshot

    def lookup(self, pod: Mapping[str, Any]) -> tuple[Lookup, Instance | None]:
        """Is there an instance for this Pod's claim? Three outcomes stay distinct (I3).
        Lists at most once per `snapshot_ttl`, single flight: 500 cold Pods share one list()."""
        claim = pod_claim(pod)
        with self._lock:
            snapshot = self._snapshot
            if snapshot is None or self._monotonic() - self._snapshot_at > self._snapshot_ttl:
                try:
                    snapshot = self.list()
                except errors.ProviderError:
                    return Lookup.UNKNOWN, None
        instance = snapshot.get(claim)
        return (Lookup.FOUND, instance) if instance is not None else (Lookup.NOT_FOUND, None)

    def last_instances(self) -> dict[ClaimName, Instance]:
        """What the last successful list returned, by claim (orphans included)."""
        return dict(self._snapshot or {})
