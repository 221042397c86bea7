"""Leader election on a coordination.k8s.io Lease: only the leader runs controllers.

Used by `nebula_site.process`. The same rules as client-go's leaderelection: a holder keeps the
Lease by renewing it before `lease_duration` passes; another candidate takes it only after
it expired; writes carry the resourceVersion, so two candidates never both win. Released
on a clean shutdown so a standby takes over at once.
Tests: tests/kube/test_leader.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from kube import observe
from kube.client import ConflictError, Kube, KubeError, NotFoundError, path_for
from kube.times import micro_time

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    for pattern in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.strptime(text, pattern).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


class LeaderElector:
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
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._kube = kube
        self._namespace = namespace
        self._name = name
        self.identity = identity
        self._duration = lease_duration
        self._renew_deadline = renew_deadline
        self._retry = retry_period
        self._now = now
        self._lease: JsonDict | None = None
        self.is_leader = False

    @property
    def _path(self) -> str:
        return path_for("leases", namespace=self._namespace, name=self._name, group="coordination.k8s.io")

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True if we hold the Lease afterwards."""
        now = self._now()
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self._duration),
            "renewTime": micro_time(now),
        }
        try:
            current = self._kube.get(self._path)
        except NotFoundError:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self._name, "namespace": self._namespace},
                "spec": dict(spec, acquireTime=micro_time(now), leaseTransitions=0),
            }
            try:
                self._lease = self._kube.create(
                    path_for("leases", namespace=self._namespace, group="coordination.k8s.io"), body
                )
            except ConflictError:
                return False
            return True
        held = current.get("spec") or {}
        holder = held.get("holderIdentity") or ""
        renewed = _parse_time(held.get("renewTime"))
        duration = float(held.get("leaseDurationSeconds") or self._duration)
        if holder and holder != self.identity and renewed and now < renewed + timedelta(seconds=duration):
            return False
        new_spec = dict(held, **spec)
        if holder != self.identity:
            new_spec["acquireTime"] = micro_time(now)
            new_spec["leaseTransitions"] = int(held.get("leaseTransitions") or 0) + 1
        try:
            self._lease = self._kube.replace(self._path, dict(current, spec=new_spec))
        except ConflictError:
            return False
        return True

    def acquire(self, stop: threading.Event) -> bool:
        """Block until we lead (True) or `stop` is set (False)."""
        while not stop.is_set():
            try:
                if self.try_acquire_or_renew():
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
        """Renew until `stop` is set; return early (leadership lost) if renewals keep failing
        for `renew_deadline`."""
        last_renewal = self._now()
        while not stop.wait(self._retry):
            try:
                if self.try_acquire_or_renew():
                    last_renewal = self._now()
                    observe.current().leadership(True)
                    continue
                observe.current().leadership(False)
            except KubeError as exc:
                observe.current().leadership(None)
                logger.warning("leader election: renew failed: %s", exc)
            if self._now() - last_renewal > timedelta(seconds=self._renew_deadline):
                self.is_leader = False
                logger.error("%s lost the leader lease", self.identity)
                return

    def release(self) -> None:
        """Give the Lease up so a standby does not wait for it to expire."""
        if not self.is_leader or self._lease is None:
            return
        lease = dict(self._lease)
        lease["spec"] = dict(lease.get("spec") or {}, holderIdentity="", leaseDurationSeconds=1)
        try:
            self._kube.replace(self._path, lease)
        except KubeError as exc:
            logger.warning("could not release the leader lease: %s", exc)
        self.is_leader = False
