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
from providers.base import ClaimName, Instance, InstanceState, Provider
from vnode.model.tracking import Lookup, pod_claim, pod_key

_GOING = frozenset({InstanceState.TERMINATING, InstanceState.TERMINATED})


class Inventory:
    def __init__(
        self,
        provider: Provider,
        *,
        snapshot_ttl: float = 2.0,
        failure_ttl: Callable[[], float] = lambda: 15.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._provider = provider
        self._snapshot_ttl = snapshot_ttl
        self._failure_ttl = failure_ttl
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._snapshot: dict[ClaimName, Instance] | None = None
        self._snapshot_at = -1e18
        self._failed_at: float | None = None  # the last list failed then (monotonic)
        self._waiting: set[str] = set()  # Pod keys whose lookup could not ask
        self.last_list_ok: bool | None = None  # None until the first list
        self.last_list_error = ""
        self.last_list_seconds = 0.0
        self.lists_ok = 0  # successful lists so far (a test waits for polls by it)

    def list(self) -> dict[ClaimName, Instance]:
        """One provider.list(), by claim; raises errors.ProviderError. Feeds the snapshot."""
        name = self._provider.name
        started = self._monotonic()
        try:
            instances = self._provider.list()
        except errors.ProviderError as exc:
            self.last_list_ok, self.last_list_error = False, f"{type(exc).__name__}: {exc}"
            self.last_list_seconds = self._monotonic() - started
            self._failed_at = self._monotonic()
            observe.current().listed(name, self.last_list_seconds, ok=False)
            raise
        self.last_list_seconds = self._monotonic() - started
        self.last_list_ok, self.last_list_error = True, ""
        self.lists_ok += 1
        self._failed_at = None
        observe.current().listed(name, self.last_list_seconds, ok=True)
        snapshot: dict[ClaimName, Instance] = {}
        for instance in instances:
            kept = snapshot.get(instance.claim)
            if kept is None or _newer(instance, kept):
                snapshot[instance.claim] = instance
        self._snapshot, self._snapshot_at = snapshot, self._monotonic()
        return snapshot

    def lookup(self, pod: Mapping[str, Any]) -> tuple[Lookup, Instance | None]:
        """Is there an instance for this Pod's claim? Three outcomes stay distinct (I3).
        Lists at most once per `snapshot_ttl`, single flight: 500 cold Pods share one list().
        After a failed list, lookups answer UNKNOWN without asking again for `failure_ttl`
        (the poll interval): an outage costs one list per interval, not one per Pod per
        retry. Whoever got UNKNOWN is remembered; `take_waiting` hands them back once a
        list succeeds, so they are taken up within one interval of the provider's return."""
        claim = pod_claim(pod)
        with self._lock:
            snapshot = self._snapshot
            now = self._monotonic()
            # The poll tick retries every interval and refreshes `_failed_at`; a lookup lists on
            # its own only if no attempt was made for two intervals (a stuck poll loop).
            if self._failed_at is not None and now - self._failed_at < 2 * self._failure_ttl():
                self._waiting.add(pod_key(pod))
                return Lookup.UNKNOWN, None
            if snapshot is None or now - self._snapshot_at > self._snapshot_ttl:
                try:
                    snapshot = self.list()
                except errors.ProviderError:
                    self._waiting.add(pod_key(pod))
                    return Lookup.UNKNOWN, None
        instance = snapshot.get(claim)
        return (Lookup.FOUND, instance) if instance is not None else (Lookup.NOT_FOUND, None)

    def take_waiting(self) -> set[str]:
        """The keys of Pods whose lookup could not ask since the last call (cleared)."""
        with self._lock:
            waiting, self._waiting = self._waiting, set()
        return waiting

    def last_instances(self) -> dict[ClaimName, Instance]:
        """What the last successful list returned, by claim (orphans included)."""
        return dict(self._snapshot or {})


def _newer(instance: Instance, kept: Instance) -> bool:
    """Of two instances of one claim (a restart replaced one), the one that serves it: one
    whose workload may still run over one that ended, over one going away; else the later
    created."""
    if _rank(instance) != _rank(kept):
        return _rank(instance) > _rank(kept)
    return instance.created_at > kept.created_at


def _rank(instance: Instance) -> int:
    if instance.state in _GOING:
        return 0
    return 1 if instance.state in (InstanceState.SUCCEEDED, InstanceState.FAILED) else 2
