"""Leases shared by replicas, with fencing: who is alive, and who serves which virtual node.

Used by `nebula_site.sharing`. Two kinds of coordination.k8s.io Lease in the manager's
namespace, labelled `nebula.io/lease`:
- `member`: `nebula-member-<identity>`, renewed by each replica while it runs; the live ones
  say how many replicas share the providers;
- `node`: `nebula-node-<alias>`, held by the one replica that serves that provider.

The rules (client-go's leaderelection, plus a fence):
- A Lease is alive while its (holder, renewTime) changed less than its leaseDurationSeconds
  ago *by this replica's monotonic clock* (`LeaseView`): no replica trusts another's wall
  clock, so a taker waits a full duration after it last saw a renewal.
- A Lease held by someone alive is never written; a free, released or dead one is taken by
  a write carrying the resourceVersion this replica read, so two takers never both win.
- A holder's `Fence` is valid until the start of its last successful renewal + the duration
  − `margin` (monotonic): it stops writing for that node `margin` seconds before any taker can
  have begun, even when its renewals hang or the process was paused.
Tests: tests/kube/test_leases.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kube import names
from kube.client import ConflictError, Kube, KubeError, NotFoundError, path_for
from kube.times import micro_time

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]
KIND_LABEL = f"{names.PREFIX}/lease"
MEMBER, NODE = "member", "node"
GROUP = "coordination.k8s.io"


def member_lease(identity: str) -> str:
    return f"nebula-member-{identity}"


def node_lease(alias: str) -> str:
    return f"nebula-node-{alias}"


class FencedError(KubeError):
    """A write refused before it was sent: this replica's Lease for it is no longer valid."""

    def __init__(self, lease: str) -> None:
        super().__init__(0, "Fenced", f"lease {lease} is not held (or ran out): not writing")


class Fence:
    """Whether this replica may still write for one Lease; `check` raises FencedError when not."""

    def __init__(self, lease: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.lease = lease
        self._clock = clock
        self._until = float("-inf")

    def extend(self, until: float) -> None:
        self._until = until

    def revoke(self) -> None:
        self._until = float("-inf")

    def valid(self) -> bool:
        return self._clock() < self._until

    def check(self) -> None:
        if not self.valid():
            raise FencedError(self.lease)


@dataclass(frozen=True)
class Seen:
    """One Lease as last listed, and when (this replica's clock) its holder or renewTime last changed."""

    lease: JsonDict
    holder: str
    renew_time: str
    duration: float
    changed_at: float

    @property
    def resource_version(self) -> str:
        return str((self.lease.get("metadata") or {}).get("resourceVersion", ""))

    @property
    def kind(self) -> str:
        return str(((self.lease.get("metadata") or {}).get("labels") or {}).get(KIND_LABEL, ""))

    def alive(self, at: float) -> bool:
        return bool(self.holder) and at - self.changed_at < self.duration


class LeaseView:
    """Pure but for its memory: the Leases this replica listed, each with when it last changed."""

    def __init__(self) -> None:
        self._seen: dict[str, Seen] = {}

    def update(self, leases: list[JsonDict], at: float) -> None:
        """A full list: Leases not in it are forgotten (deleted)."""
        seen: dict[str, Seen] = {}
        for lease in leases:
            name = str((lease.get("metadata") or {}).get("name", ""))
            spec = lease.get("spec") or {}
            holder, renew = str(spec.get("holderIdentity") or ""), str(spec.get("renewTime") or "")
            before = self._seen.get(name)
            same = before is not None and (before.holder, before.renew_time) == (holder, renew)
            changed = before.changed_at if same and before is not None else at
            seen[name] = Seen(lease, holder, renew, float(spec.get("leaseDurationSeconds") or 0), changed)
        self._seen = seen

    def wrote(self, lease: JsonDict, at: float) -> None:
        """This replica wrote `lease` (the API server's answer)."""
        name = str((lease.get("metadata") or {}).get("name", ""))
        spec = lease.get("spec") or {}
        self._seen[name] = Seen(
            lease,
            str(spec.get("holderIdentity") or ""),
            str(spec.get("renewTime") or ""),
            float(spec.get("leaseDurationSeconds") or 0),
            at,
        )

    def get(self, name: str) -> Seen | None:
        return self._seen.get(name)

    def members(self, at: float) -> list[str]:
        """The identities of the live members."""
        return sorted(s.holder for s in self._seen.values() if s.kind == MEMBER and s.alive(at))

    def dead_members(self, at: float, *, after: float) -> list[Seen]:
        """Member Leases nobody renewed for `after` seconds (their replica is gone)."""
        return [s for s in self._seen.values() if s.kind == MEMBER and at - s.changed_at >= after]

    def takeable(self, name: str, identity: str, at: float) -> bool:
        """Not held by anyone else alive: missing, released, ours, or unchanged for its duration."""
        seen = self._seen.get(name)
        return seen is None or seen.holder in ("", identity) or not seen.alive(at)


class SharedLeases:
    """One replica's reads and writes of the shared Leases in `namespace`. Not thread-safe:
    one loop (`nebula_site.sharing`) drives it; the fences it hands out are read anywhere."""

    def __init__(
        self,
        kube: Kube,
        *,
        namespace: str,
        identity: str,
        duration: float,
        margin: float,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if not 0 < margin < duration:
            raise ValueError(f"the fencing margin ({margin}s) must be between 0 and the lease duration ({duration}s)")
        self._kube = kube
        self._namespace = namespace
        self.identity = identity
        self.duration = duration
        self._margin = margin
        self.clock = clock
        self._now = now
        self.view = LeaseView()
        self._fences: dict[str, Fence] = {}
        self._lock = threading.Lock()

    def _path(self, name: str | None = None) -> str:
        return path_for("leases", namespace=self._namespace, name=name, group=GROUP)

    def fence(self, name: str) -> Fence:
        with self._lock:
            return self._fences.setdefault(name, Fence(name, clock=self.clock))

    def refresh(self) -> None:
        """List the shared Leases. Raises KubeError."""
        at = self.clock()
        items, _ = self._kube.list(self._path(), labelSelector=KIND_LABEL)
        self.view.update(items, at)
        for name, fence in list(self._fences.items()):
            seen = self.view.get(name)
            if seen is not None and seen.holder != self.identity and fence.valid():
                logger.error("lease %s is now held by %s: this replica stops writing for it", name, seen.holder)
                fence.revoke()

    def hold(self, name: str, kind: str) -> bool:
        """Take or renew `name` (one write); True if this replica holds it now, its fence
        extended. Never writes a Lease someone alive holds. Raises KubeError but for a conflict
        (someone else wrote first: False)."""
        at = self.clock()
        if not self.view.takeable(name, self.identity, at):
            return False
        seen = self.view.get(name)
        renew = micro_time(self._now())
        spec: JsonDict = {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.duration)}
        spec["renewTime"] = renew
        try:
            if seen is None:
                body = {
                    "apiVersion": f"{GROUP}/v1",
                    "kind": "Lease",
                    "metadata": {"name": name, "namespace": self._namespace, "labels": {KIND_LABEL: kind}},
                    "spec": dict(spec, acquireTime=renew, leaseTransitions=0),
                }
                written = self._kube.create(self._path(), body)
            else:
                held = dict(seen.lease.get("spec") or {})
                if seen.holder != self.identity:
                    spec.update(acquireTime=renew, leaseTransitions=int(held.get("leaseTransitions") or 0) + 1)
                written = self._kube.replace(self._path(name), dict(seen.lease, spec=dict(held, **spec)))
        except (ConflictError, NotFoundError):
            return False
        self.view.wrote(written, at)
        self.fence(name).extend(at + self.duration - self._margin)
        return True

    def release(self, name: str) -> None:
        """Stop writing for `name`, then give it up so another replica takes it at once."""
        self.fence(name).revoke()
        seen = self.view.get(name)
        if seen is None or seen.holder != self.identity:
            return
        spec = dict(seen.lease.get("spec") or {}, holderIdentity="", leaseDurationSeconds=1)
        try:
            self.view.wrote(self._kube.replace(self._path(name), dict(seen.lease, spec=spec)), self.clock())
        except KubeError as exc:
            logger.warning("could not release lease %s (it runs out by itself): %s", name, exc)

    def forget(self, seen: Seen) -> None:
        """Delete a dead replica's member Lease (that object only: one created again since stays)."""
        uid = str((seen.lease.get("metadata") or {}).get("uid") or "") or None
        name = str((seen.lease.get("metadata") or {}).get("name", ""))
        try:
            self._kube.delete(self._path(name), uid=uid)
        except NotFoundError:
            pass

    def delete(self, name: str) -> None:
        """Remove our own Lease `name` (a member leaving). Raises nothing but logs."""
        self.fence(name).revoke()
        try:
            self._kube.delete(self._path(name))
        except NotFoundError:
            pass
        except KubeError as exc:
            logger.warning("could not delete lease %s: %s", name, exc)
