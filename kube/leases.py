"""Leases held by replicas, judged by one rule and fenced: who leads, who is alive, who serves which node.

Used by `kube.leader` (the leader Lease), `kube.sharing` (the shared Leases) and the console's
leader peer (reading who holds the leader Lease). The shared Leases live in the manager's
namespace, labelled `nebula.io/lease`:
- `member`: `nebula-member-<identity>`, renewed by each replica while it runs; the live ones
  say how many replicas share the providers;
- `node`: `nebula-node-<alias>`, held by the one replica that serves that provider.

The rules, for every Lease here (client-go's leaderelection, plus a fence):
- A Lease is alive while it names a holder and its (holder, renewTime) changed less than its
  leaseDurationSeconds ago *by this replica's monotonic clock* (`LeaseView`): no replica trusts
  another's wall clock, so a taker waits a full duration after it last saw a renewal. A change
  is dated when the read that showed it *answered*, not when it was sent: a renewal may have
  begun after a slow read was sent, and its holder's fence runs from that beginning.
- A Lease held by someone alive is never written, unless `kube.holders` knows that someone
  for a `stranger` (not a replica of this install, by a list of the Pods begun after it was
  first seen). A free, released, dead or stranger's one is taken by a write carrying the
  resourceVersion this replica read, so two takers never both win.
- A Lease taken from a live holder (a stranger, or this replica's identity that this process
  did not write last) is held (renewed) at once but written for only `takeover_wait` after
  the take (the longer of the two durations): had the judgement been wrong, the holder's last
  renewal began before this write, so its fence has ended by then. A stranger that writes the
  Lease again takes it back like anyone (every change of holder ends a fence). A writer who
  fakes a release or deletes a Lease is not guarded against here: RBAC is (docs/deploy.md).
- A member Lease counts only if it is named for its holder and `kube.holders` trusts that
  holder (a replica of this install), once per replica: made-up members never shrink a share.
  Taking and fencing do not depend on it (a wrong judgement there could let two replicas
  serve one provider); `LeaseReader.holder` names only a trusted holder (who leads, for the
  console).
- A holder's `Fence` is valid until the start of its last successful renewal + the duration
  − `margin` (monotonic): it stops writing for that Lease `margin` seconds before any taker can
  have begun, even when its renewals hang or the process was paused.
Tests: tests/kube/test_leases.py, tests/kube/test_leader.py, tests/kube/test_holders.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kube import names
from kube.client import ConflictError, Kube, KubeError, NotFoundError, path_for
from kube.fence import Fence as Fence
from kube.fence import FencedError as FencedError
from kube.holders import ANY, Holders
from kube.times import micro_time

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]
GROUP = "coordination.k8s.io"  # the Lease's API group: the one place product code spells it
API_VERSION = f"{GROUP}/v1"
KIND_LABEL = f"{names.PREFIX}/lease"
MEMBER, NODE = "member", "node"
MAX_TAKEOVER_WAIT = 4  # lease durations at most that a takeover from a live holder waits


def member_lease(identity: str) -> str:
    return f"nebula-member-{identity}"


def node_lease(alias: str) -> str:
    return f"nebula-node-{alias}"


def lease_path(namespace: str, name: str | None = None) -> str:
    """The API path of the Lease `namespace/name` (of the namespace's Leases without a name)."""
    return path_for("leases", namespace=namespace, name=name, group=GROUP)


@dataclass(frozen=True)
class Holder:
    """Who holds a Lease now, and the annotations it published."""

    identity: str
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Seen:
    """One Lease as last read, and when (this replica's clock) its holder or renewTime last changed."""

    lease: JsonDict
    holder: str
    renew_time: str
    duration: float
    changed_at: float
    held_since: float  # when this holder was first seen holding it (this replica's clock)

    @classmethod
    def of(cls, lease: JsonDict, at: float, before: Seen | None = None) -> Seen:
        """Pure: `lease` read at `at`; unchanged since `before`, it keeps `before`'s change time
        (and, held by the same holder, when that holder was first seen)."""
        spec = lease.get("spec") or {}
        holder, renew = str(spec.get("holderIdentity") or ""), str(spec.get("renewTime") or "")
        same = before is not None and (before.holder, before.renew_time) == (holder, renew)
        changed = before.changed_at if before is not None and same else at
        since = before.held_since if before is not None and before.holder == holder else at
        return cls(lease, holder, renew, float(spec.get("leaseDurationSeconds") or 0), changed, since)

    @property
    def resource_version(self) -> str:
        return str((self.lease.get("metadata") or {}).get("resourceVersion", ""))

    @property
    def kind(self) -> str:
        return str(((self.lease.get("metadata") or {}).get("labels") or {}).get(KIND_LABEL, ""))

    def alive(self, at: float) -> bool:
        """The one alive rule: held, renewed, and changed less than a duration ago here."""
        return bool(self.holder) and bool(self.renew_time) and at - self.changed_at < self.duration

    def holder_at(self, at: float) -> Holder | None:
        """Pure: the Lease's holder and what it published, if alive at `at`, else None."""
        if not self.alive(at):
            return None
        annotations = (self.lease.get("metadata") or {}).get("annotations") or {}
        return Holder(self.holder, {str(k): str(v) for k, v in annotations.items()})


class LeaseView:
    """Pure but for its memory: the Leases this replica read, each with when it last changed.
    `holders` judges who may count as a member."""

    def __init__(self, holders: Holders = ANY) -> None:
        self._seen: dict[str, Seen] = {}
        self.holders = holders

    def update(self, leases: list[JsonDict], at: float) -> None:
        """A full list: Leases not in it are forgotten (deleted)."""
        seen: dict[str, Seen] = {}
        for lease in leases:
            name = str((lease.get("metadata") or {}).get("name", ""))
            seen[name] = Seen.of(lease, at, self._seen.get(name))
        self._seen = seen

    def saw(self, name: str, lease: JsonDict | None, at: float) -> Seen | None:
        """One Lease read at `at` (None: it does not exist, so it is forgotten)."""
        if lease is None:
            self._seen.pop(name, None)
            return None
        self._seen[name] = seen = Seen.of(lease, at, self._seen.get(name))
        return seen

    def wrote(self, lease: JsonDict, at: float) -> None:
        """This replica wrote `lease` (the API server's answer)."""
        name = str((lease.get("metadata") or {}).get("name", ""))
        self._seen[name] = Seen.of(lease, at)

    def get(self, name: str) -> Seen | None:
        return self._seen.get(name)

    def members(self, at: float) -> list[str]:
        """The identities of the live members: member Leases named for their holder, holders
        `holders` trusts, one per replica (`holders.replica_of`)."""
        by_replica: dict[str, str] = {}
        for name, seen in sorted(self._seen.items()):
            if seen.kind != MEMBER or name != member_lease(seen.holder) or not seen.alive(at):
                continue
            if self.holders.trusted(seen.holder):
                by_replica.setdefault(self.holders.replica_of(seen.holder), seen.holder)
        return sorted(by_replica.values())

    def dead_members(self, at: float, *, after: float) -> list[Seen]:
        """Member Leases nobody renewed for `after` seconds (their replica is gone)."""
        return [s for s in self._seen.values() if s.kind == MEMBER and at - s.changed_at >= after]

    def takeable(self, name: str, identity: str, at: float) -> bool:
        """Not held by a replica alive: missing, released, ours, unchanged for its duration, or
        held by a `stranger` (which may list the Pods: see `kube.holders`)."""
        seen = self._seen.get(name)
        if seen is None or seen.holder in ("", identity) or not seen.alive(at):
            return True
        return bool(self.stranger(seen))

    def stranger(self, seen: Seen) -> str:
        """Why the holder of `seen` is known not to be a replica ("": it may be one)."""
        return self.holders.stranger(seen.holder, seen.held_since)


def annotated(metadata: JsonDict, ours: Mapping[str, str], *, keep: bool) -> JsonDict:
    """Pure: `metadata` with the annotations `ours` set (`keep`) or removed; others' stay."""
    annotations = {k: v for k, v in (metadata.get("annotations") or {}).items() if k not in ours}
    if keep:
        annotations.update(ours)
    return dict(metadata, annotations=annotations)


class LeaseReader:
    """Reads Leases of `namespace` into a `LeaseView` on this process's monotonic clock: who
    holds one is judged by the one alive rule. Safe to call from any thread."""

    def __init__(
        self, kube: Kube, *, namespace: str, clock: Callable[[], float] = time.monotonic, holders: Holders = ANY
    ) -> None:
        self._kube = kube
        self._namespace = namespace
        self.clock = clock
        self.view = LeaseView(holders)
        self._reading = threading.Lock()

    def _path(self, name: str | None = None) -> str:
        return lease_path(self._namespace, name)

    def observe(self, name: str) -> Seen | None:
        """Read the Lease `name` (None: it does not exist). Raises KubeError. A change is dated
        when the read answered, not when it was sent (see the module docstring)."""
        try:
            lease: JsonDict | None = self._kube.get(self._path(name))
        except NotFoundError:
            lease = None
        at = self.clock()
        with self._reading:
            return self.view.saw(name, lease, at)

    def holder(self, name: str) -> Holder | None:
        """Who holds the Lease `name` now (None: nobody, it ran out, or it does not exist).
        A holder first seen now is alive for a full duration from now; one that is not a
        replica of this install is nobody. Raises KubeError."""
        seen = self.observe(name)
        holder = None if seen is None else seen.holder_at(self.clock())
        return holder if holder is not None and self.view.holders.trusted(holder.identity) else None


class SharedLeases(LeaseReader):
    """One replica's reads and writes of the Leases in `namespace`, each write fenced. Not
    thread-safe but for `fence`: one loop drives it (the sharing loop, or the leader elector);
    the fences it hands out are read anywhere."""

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
        holders: Holders = ANY,
    ) -> None:
        if not 0 < margin < duration:
            raise ValueError(f"the fencing margin ({margin}s) must be between 0 and the lease duration ({duration}s)")
        super().__init__(kube, namespace=namespace, clock=clock, holders=holders)
        self.identity = identity
        self.duration = duration
        self._margin = margin
        self._now = now
        self._fences: dict[str, Fence] = {}
        self._written: dict[str, str] = {}  # Lease -> the resourceVersion of this process's last write of it
        self._lock = threading.Lock()

    def fence(self, name: str) -> Fence:
        with self._lock:
            return self._fences.setdefault(name, Fence(name, clock=self.clock))

    def refresh(self) -> None:
        """List the shared Leases (labelled with their kind). Raises KubeError."""
        items, _ = self._kube.list(self._path(), labelSelector=KIND_LABEL)
        self.view.update(items, self.clock())  # dated when it answered, as `observe`
        for name in list(self._fences):
            self._revoke_if_taken(name)

    def observe(self, name: str) -> Seen | None:
        """Read one Lease (see `LeaseReader.observe`); its fence ends if someone else holds it."""
        seen = super().observe(name)
        self._revoke_if_taken(name)
        return seen

    def _revoke_if_taken(self, name: str) -> None:
        seen, fence = self.view.get(name), self._fences.get(name)
        if seen is not None and fence is not None and seen.holder != self.identity and fence.held():
            logger.error("lease %s is now held by %s: this replica stops writing for it", name, seen.holder)
            fence.revoke()

    def hold(self, name: str, kind: str | None = None, *, annotations: Mapping[str, str] | None = None) -> bool:
        """Take or renew `name` (one write), labelled with `kind` when created and carrying
        `annotations` (others' kept); True if this replica holds it now, its fence extended.
        Never writes a Lease someone alive holds. Raises KubeError but for a conflict (someone
        else wrote first: False)."""
        at = self.clock()
        if not self.view.takeable(name, self.identity, at):
            return False
        seen = self.view.get(name)
        # Taken from a live holder (a stranger, as `takeable` said, or this replica's own identity
        # written by someone else or by this process before a restart): written for only a
        # duration on, whatever the judgement says now.
        ours = (
            seen is not None
            and seen.holder == self.identity
            and (self.fence(name).held() or seen.resource_version == self._written.get(name))
        )  # held, or at least last written by this process: nobody else wrote since
        from_live = seen is not None and seen.holder != "" and not ours and seen.alive(at)
        published = annotations or {}
        renew = micro_time(self._now())
        spec: JsonDict = {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.duration)}
        spec["renewTime"] = renew
        try:
            if seen is None:
                metadata: JsonDict = {"name": name, "namespace": self._namespace, "annotations": dict(published)}
                if kind is not None:
                    metadata["labels"] = {KIND_LABEL: kind}
                body = {"apiVersion": API_VERSION, "kind": "Lease", "metadata": metadata}
                body["spec"] = dict(spec, acquireTime=renew, leaseTransitions=0)
                written = self._kube.create(self._path(), body)
            else:
                held = dict(seen.lease.get("spec") or {})
                if seen.holder != self.identity:
                    spec.update(acquireTime=renew, leaseTransitions=int(held.get("leaseTransitions") or 0) + 1)
                metadata = annotated(seen.lease.get("metadata") or {}, published, keep=True)
                lease = dict(seen.lease, metadata=metadata, spec=dict(held, **spec))
                written = self._kube.replace(self._path(name), lease)
        except (ConflictError, NotFoundError):
            return False
        self.view.wrote(written, at)
        self._written[name] = str((written.get("metadata") or {}).get("resourceVersion", ""))
        if from_live:
            assert seen is not None
            wait = self.takeover_wait(seen)
            if seen.holder == self.identity:
                why = "names this replica, but not as this process held it (a restart, or someone else wrote it)"
            else:
                why = f"was held by {seen.holder[:300]!r}, not a replica of this install "
                why += f"({self.view.stranger(seen) or 'judged so before the write'})"
            logger.warning("lease %s %s: taken over; written for in %.0f s", name, why, wait)
            begins: float | None = at + wait
        else:
            begins = None if ours else float("-inf")  # None: a renewal keeps when validity began
        self.fence(name).extend(at + self.duration - self._margin, not_before=begins)
        return True

    def takeover_wait(self, seen: Seen) -> float:
        """How long after taking `seen` from a live holder this replica may write for it: the
        longer of its own duration and the holder's (whose fence runs on its own), the
        holder's counted up to MAX_TAKEOVER_WAIT durations of ours (a made-up one cannot
        postpone the takeover for ever)."""
        return max(self.duration, min(seen.duration, MAX_TAKEOVER_WAIT * self.duration))

    def release(self, name: str, *, annotations: Mapping[str, str] | None = None) -> None:
        """Stop writing for `name`, then give it up (its `annotations` removed) so another
        replica takes it at once."""
        self.fence(name).revoke()
        seen = self.view.get(name)
        if seen is None or seen.holder != self.identity:
            return
        spec = dict(seen.lease.get("spec") or {}, holderIdentity="", leaseDurationSeconds=1)
        metadata = annotated(seen.lease.get("metadata") or {}, annotations or {}, keep=False)
        try:
            released = self._kube.replace(self._path(name), dict(seen.lease, metadata=metadata, spec=spec))
            self.view.wrote(released, self.clock())
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
