"""The Handler: one per provider, what the controllers, the kubelet API and the console hold.

Builds the one `PhaseContext` (`vnode.phases.context`: the tracked map, the inventory, the writer and
reader, ...) and the phases over it, which its callers call directly: `provisioner`
(`vnode.phases.provision`), `status_sync` (`vnode.phases.statussync`), `teardown` (`vnode.phases.teardown`),
`lifecycle`, `serving` (the kubelet API's reads) and `inventory`. Itself it keeps the
provider's identity, the readers' view of the tracked map, and the pod controller's steps that
span phases (adopt, update, flush); never deletes Pods. Constructing it does no I/O. It builds
the prober (`vnode.probing.prober`), which the Runner starts and stops.
Tests: tests/vnode/test_controllers.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from kube import names
from kube.client import Kube
from kube.events import EventRecorder
from kube.times import rfc3339
from kube.worker import Retry
from providers import errors
from providers.base import (
    Capabilities,
    ClaimName,
    Instance,
    InstanceId,
    NoticeSource,
    Provider,
)
from vnode.blocklister import Blocklister
from vnode.ephemeral.budget import OutputBudget
from vnode.ephemeral.containers import Ephemerals
from vnode.model import assess
from vnode.model.reachability import with_reachability
from vnode.model.runs import DEFAULT_BACKOFF, BackoffPolicy
from vnode.model.tracking import Rules, Tracked, TrackedMap, pod_key
from vnode.phases.context import PhaseContext, Traits
from vnode.phases.giveup import GiveUp
from vnode.phases.inventory import Inventory
from vnode.phases.lifecycle import Lifecycle, stopped_status
from vnode.phases.notices import NoticeIntake
from vnode.phases.provision import Provisioner
from vnode.phases.serving import Serving
from vnode.phases.statussync import StatusSync
from vnode.phases.stopping import Stopping
from vnode.phases.teardown import OrphanSweep, Teardown
from vnode.podwriter import PodWriter
from vnode.poolpolicy import PoolPolicies
from vnode.probing.prober import DEFAULT_WORKERS, Prober
from vnode.sources.reader import PodReader

JsonDict = dict[str, Any]


class Handler:
    """Thread-safe; the pod controller never runs two operations on one Pod at once."""

    def __init__(
        self,
        provider: Provider,
        *,
        kube: Kube,
        events: EventRecorder,
        blocklister: Blocklister | None = None,
        pools: PoolPolicies | None = None,
        poll_interval: float | None = None,
        backoff: BackoffPolicy = DEFAULT_BACKOFF,
        snapshot_ttl: float = 2.0,
        probe_workers: int = DEFAULT_WORKERS,
        output_budget: OutputBudget | None = None,  # None: the process's (vnode.ephemeral.budget)
        monotonic: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.provider = provider
        self.traits = traits = Traits(provider, poll_interval=poll_interval, backoff=backoff)
        self._monotonic = monotonic
        self._now = now
        self._tracked = TrackedMap()
        # The pod controller's queue (set by the Runner): a key put there is flushed soon.
        self.queue_flush: Callable[[str], None] = lambda key: None
        self.ephemerals = Ephemerals(
            provider,
            now=now,
            changed=lambda key: self.queue_flush(key),
            pulls_images=lambda: traits.capabilities().pulls_images,
            several_containers=lambda: traits.capabilities().shapes.several_containers,
            budget=output_budget,
        )
        self.context = context = PhaseContext(
            provider,
            tracked=self._tracked,
            inventory=Inventory(
                provider, snapshot_ttl=snapshot_ttl, failure_ttl=traits.poll_interval, monotonic=monotonic
            ),
            writer=PodWriter(kube, events, provider=provider.name),
            reader=PodReader(kube),
            events=events,
            traits=traits,
            ephemerals=self.ephemerals,
            blocklister=blocklister,
            pools=pools,
            monotonic=monotonic,
            now=now,
        )
        self.writer, self.inventory = context.writer, context.inventory
        self.billing_seen = context.billing_seen  # written on the Node by the node controller
        # Set once the node controller read the node's billing-seen-at (or found none): Pods are
        # reconciled after it, so a span whose instance is gone closes at it (vnode.model.billing).
        self.billing_anchor_read = threading.Event()
        self.provisioner = Provisioner(context, flush=self.flush)
        self.sweep = OrphanSweep(context)
        self.give_up = GiveUp(context)
        self.status_sync = StatusSync(context, sweep=self.sweep, give_up=self.give_up)
        self.stopping = Stopping(context)
        self.teardown = Teardown(context, stopping=self.stopping)
        self.lifecycle = Lifecycle(
            context, provisioner=self.provisioner, teardown=self.teardown, stopping=self.stopping, give_up=self.give_up
        )
        self.serving = Serving(context)
        # A provider that hears of interruptions ahead: its notices, read on a thread of their own.
        self.notices = (
            NoticeIntake(context, provider, queue=lambda key: self.queue_flush(key))
            if isinstance(provider, NoticeSource)
            else None
        )
        self.prober = Prober(
            provider,
            tracked=self._tracked,
            events=events,
            on_change=self._probe_changed,
            kill=self.stopping.kill_container,
            workers=probe_workers,
            monotonic=monotonic,
            now=now,
        )

    # -- identity --------------------------------------------------------------------------
    @property
    def node_name(self) -> str:
        return names.node_name(self.provider.name)

    def capabilities(self) -> Capabilities:
        return self.traits.capabilities()

    @property
    def poll_interval(self) -> float:
        return self.traits.poll_interval()

    def rules(self) -> Rules:
        """What runs mean on this provider: restarts in place? does a finished instance bill?"""
        return self.traits.rules()

    # -- the tracked map (readers: controllers, kubelet API, console) ----------------------
    def tracks(self, namespace: str, name: str) -> bool:
        return f"{namespace}/{name}" in self._tracked

    def tracked(self, key: str) -> Tracked | None:
        return self._tracked.get(key)

    def claims_of(self, pods: Iterable[Mapping[str, Any]]) -> set[ClaimName]:
        """The claims of `pods` (`TrackedMap.claims_of`: a tracked Pod's from its entry)."""
        return self._tracked.claims_of(pods)

    def tracked_entries(self) -> list[Tracked]:
        """Every tracked Pod's record, for readers (the console's mirror); never mutate them."""
        return self._tracked.entries()

    def get_pods(self) -> list[JsonDict]:
        """The Pods this node serves, with the status Nebula computed for them."""
        return [dict(t.pod, status=t.desired_status or t.pod.get("status") or {}) for t in self._tracked.entries()]

    # -- the pod controller's operations ----------------------------------------------------
    def adopt(self, pod: JsonDict, instance: Instance) -> None:
        """Track an instance found again after a restart (no provider call)."""
        assess.adopt(self._tracked, pod, instance, at=self._monotonic(), now=self._now(), rules=self.rules())

    def restore_billing_anchor(self, at: float) -> None:
        """The node's billing-seen-at found at start-up (vnode.model.billing): Pods not seen
        billing since were, at the latest, then."""
        self._tracked.restore_billing_anchor(at)

    def confirm_gone(self, instance_id: InstanceId) -> Instance | None:
        """`get` of an instance a cold lookup did not find (a list may be late): its facts, or
        None when the provider says it is gone. Raises Retry if we could not ask (I3)."""
        try:
            return self.provider.get(instance_id)
        except errors.ProviderError as exc:
            raise Retry(f"cannot confirm instance {instance_id} is gone: {exc}", delay=self.poll_interval) from exc

    def lost_before_tracking(self, pod: JsonDict, instance_id: InstanceId, *, why: str) -> None:
        """A Pod that already had an instance, which is gone (found so by a cold map): under
        `Never` the Pod fails InstanceLost; else a new instance is a restart, counted."""
        entry = self._tracked.track(pod)
        entry.instance_id = instance_id
        entry.provisioned_at = self._monotonic()
        assess.lose(entry, now=self._now(), at=self._monotonic(), rules=self.rules(), why=why)

    def update_pod(self, pod: JsonDict) -> None:
        """A Pod's spec or metadata changed: nothing changes at the provider."""
        entry = self._tracked.get(pod_key(pod))
        if entry is not None and entry.uid == (pod.get("metadata") or {}).get("uid"):
            self._tracked.track(pod)  # the same entry; a Pod now terminal in the API is finished
            self.ephemerals.sync(entry)  # `kubectl debug` added one: a new process (vnode.ephemeral.containers)

    def flush(self, key: str, current: Mapping[str, Any] | None) -> None:
        """Write the Pod's pending metadata, then its status (see PodWriter.flush), the status
        first recomputed with the probes' current verdicts (`assess.reassess`)."""
        entry = self._tracked.get(key)
        if entry is not None:
            with entry.lock:
                assess.reassess(entry, now=self._now(), at=self._monotonic(), rules=self.rules())
                if entry.desired_status is not None:  # a deadline's, a budget's or an interruption's stop says so
                    entry.desired_status = stopped_status(entry, entry.desired_status, now=rfc3339(self._now()))
                self._say_reachability(entry)
                if (entry.desired_status or {}).get("phase") in ("Succeeded", "Failed"):
                    self.ephemerals.stop(key)  # I10: nothing of a terminal Pod keeps running
                self.ephemerals.overlay(entry)
            self.writer.flush(entry, current)

    def _say_reachability(self, entry: Tracked) -> None:
        """The Pod's `nebula.io/ProviderReachable` condition as the last lists say (under its lock)."""
        current = entry.desired_status if entry.desired_status is not None else entry.pod.get("status")
        if not current:
            return
        said = with_reachability(
            current,
            self.status_sync.reachability,
            provider=self.provider.name,
            now=rfc3339(self._now()),
            seen=(entry.written_status, entry.pod.get("status")),
        )
        if said is not current:
            entry.desired_status = dict(said)

    def _probe_changed(self, entry: Tracked) -> None:
        """The prober's `on_change` (on a probe worker): a readiness or startup verdict of
        `entry` changed, so its Pod is queued for a flush (`flush` writes what is new)."""
        self.queue_flush(entry.key)
