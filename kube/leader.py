"""Leader election on a coordination.k8s.io Lease: only the leader runs controllers.

Used by `nebula_site.process`. The same rules as client-go's leaderelection: a holder keeps the
Lease by renewing it before `lease_duration` passes; another candidate takes it only after
it expired; writes carry the resourceVersion, so two candidates never both win. Released
on a clean shutdown so a standby takes over at once. The holder may publish facts about
itself as the Lease's annotations (written with every acquisition and renewal, removed on
release); `current_holder` reads who holds a Lease and what it published.
Tests: tests/kube/test_leader.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class Holder:
    """Who holds a Lease now, and the annotations it published."""

    identity: str
    annotations: Mapping[str, str] = field(default_factory=dict)


def holder_of(lease: JsonDict, now: datetime) -> Holder | None:
    """Pure: the Lease's holder if it is held and not expired at `now`, else None."""
    spec = lease.get("spec") or {}
    identity = spec.get("holderIdentity") or ""
    renewed = _parse_time(spec.get("renewTime"))
    duration = float(spec.get("leaseDurationSeconds") or 0)
    if not identity or renewed is None or now >= renewed + timedelta(seconds=duration):
        return None
    annotations = (lease.get("metadata") or {}).get("annotations") or {}
    return Holder(str(identity), {str(k): str(v) for k, v in annotations.items()})


def current_holder(
    kube: Kube, *, namespace: str, name: str, now: Callable[[], datetime] = lambda: datetime.now(UTC)
) -> Holder | None:
    """Who holds the Lease `namespace/name` now (None: nobody, or it expired, or it does not
    exist). Raises KubeError when the API server does not answer."""
    try:
        lease = kube.get(path_for("leases", namespace=namespace, name=name, group="coordination.k8s.io"))
    except NotFoundError:
        return None
    return holder_of(lease, now())


class LeaderElector:
    """Acquire (`acquire`), keep (`keep`) and give up (`release`) one Lease. `annotations`
    are written on the Lease with every acquisition and renewal, and removed on release."""

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
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        self._kube = kube
        self._namespace = namespace
        self._name = name
        self.identity = identity
        self._duration = lease_duration
        self._renew_deadline = renew_deadline
        self._retry = retry_period
        self._now = now
        self._annotations = dict(annotations or {})
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
                "metadata": {"name": self._name, "namespace": self._namespace, "annotations": self._annotations},
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
            lease = dict(current, metadata=self._annotated(current), spec=new_spec)
            self._lease = self._kube.replace(self._path, lease)
        except ConflictError:
            return False
        return True

    def _annotated(self, lease: JsonDict, *, ours: bool = True) -> JsonDict:
        """The Lease's metadata with our annotations set (`ours`) or removed."""
        metadata = dict(lease.get("metadata") or {})
        annotations = {k: v for k, v in (metadata.get("annotations") or {}).items() if k not in self._annotations}
        if ours:
            annotations.update(self._annotations)
        metadata["annotations"] = annotations
        return metadata

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
        lease = dict(self._lease, metadata=self._annotated(self._lease, ours=False))
        lease["spec"] = dict(lease.get("spec") or {}, holderIdentity="", leaseDurationSeconds=1)
        try:
            self._kube.replace(self._path, lease)
        except KubeError as exc:
            logger.warning("could not release the leader lease: %s", exc)
        self.is_leader = False
