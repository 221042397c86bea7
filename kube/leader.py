"""Leader election on one Lease: only the leader runs controllers.

Used by `nebula_site.manager`. A thin holder over `kube.leases`, so the leader Lease follows the
same rules as every other: another's Lease is alive until it stayed unchanged for its duration
by this process's monotonic clock, writes carry the resourceVersion, and `fence` (valid until
`renew_deadline` after the start of the last successful renewal) is what the leader's own
writers check. Released on a clean shutdown so a standby takes over at once; the holder's
`annotations` are written with every acquisition and renewal, and removed on release. `holders`
decides only whom `holder()` names (a holder that is not a replica: nobody); never who may take it.
Tests: tests/kube/test_leader.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from kube import observe
from kube.client import Kube, KubeError
from kube.holders import ANY, Holders
from kube.leases import Fence, Holder, SharedLeases

logger = logging.getLogger(__name__)


class LeaderElector:
    """Acquire (`acquire`), keep (`keep`) and give up (`release`) one Lease. `now` is the wall
    clock written as renewTime (for people and other tools); `clock` is what judges."""

    def __init__(
        self,
        kube: Kube,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        annotations: Mapping[str, str] | None = None,
        holders: Holders = ANY,
    ) -> None:
        if not 0 < renew_deadline < lease_duration:
            raise ValueError(f"renew_deadline ({renew_deadline}s) must be between 0 and the lease duration")
        self._leases = SharedLeases(
            kube,
            namespace=namespace,
            identity=identity,
            duration=lease_duration,
            margin=lease_duration - renew_deadline,
            clock=clock,
            now=now,
            holders=holders,
        )
        self._namespace = namespace
        self._name = name
        self.identity = identity
        self._retry = retry_period
        self._annotations = dict(annotations or {})
        self.is_leader = False

    @property
    def fence(self) -> Fence:
        """Valid while this process may still write as the leader (see the module docstring)."""
        return self._leases.fence(self._name)

    def holder(self) -> Holder | None:
        """Read the Lease: who holds it now, by the one alive rule. Raises KubeError."""
        return self._leases.holder(self._name)

    def try_acquire_or_renew(self) -> bool:
        """One attempt (a read, then a write unless someone alive holds it); True if we hold the
        Lease afterwards. Raises KubeError but for a conflict (False)."""
        self._leases.observe(self._name)
        return self._leases.hold(self._name, annotations=self._annotations)

    def acquire(self, stop: threading.Event) -> bool:
        """Block until we lead (True) or `stop` is set (False). A Lease taken from a stranger
        (`kube.leases`) is renewed meanwhile, and led from once its fence is valid."""
        while not stop.is_set():
            try:
                if self.try_acquire_or_renew() and self.fence.valid():
                    self.is_leader = True
                    observe.current().leadership(True)
                    logger.info("%s is the leader (lease %s/%s)", self.identity, self._namespace, self._name)
                    return True
                observe.current().leadership(False)
            except KubeError as exc:
                observe.current().leadership(None)
                logger.warning("leader election: %s", exc)
            stop.wait(self._retry)
        return False

    def keep(self, stop: threading.Event) -> None:
        """Renew until `stop` is set; return early (leadership lost) once the fence is no longer
        valid: renewals kept failing for `renew_deadline`, or another holder was seen (and the
        Lease, taken back from a stranger since, is not written for yet)."""
        while not stop.wait(self._retry):
            try:
                renewed = self.try_acquire_or_renew()
                observe.current().leadership(renewed)
            except KubeError as exc:
                observe.current().leadership(None)
                logger.warning("leader election: renew failed: %s", exc)
            if not self.fence.valid():
                self.is_leader = False
                logger.error("%s lost the leader lease", self.identity)
                return

    def release(self) -> None:
        """Give the Lease up so a standby does not wait for it to expire."""
        if not self.is_leader:
            return
        self._leases.release(self._name, annotations=self._annotations)
        self.is_leader = False
