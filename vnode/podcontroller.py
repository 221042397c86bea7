"""The pod controller: Pods bound to one virtual node, kept in step with the provider.

Started by the Runner. Lists and watches Pods with `spec.nodeName=<node>` (re-listing
after 410), queues their keys, and performs `decisions.decide` for each (and
`decisions.take_up` for one the Handler does not track yet) on a
`kube.worker.WorkerPool`, never two at once for one key. Its poll thread runs
`StatusSync.run` and queues the Pods whose status changed. It writes nothing itself but
the final grace-0 delete of a Pod whose instance is gone. Tested in tests/vnode/test_controllers.py.

Invariant (I7): at most MAX_SOURCE_WATCHES Secret/ConfigMap watches at once; see
tests/vnode/test_controllers.py::test_I7_missing_sources_watched_at_once_are_bounded.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kube import billing, names
from kube.client import ConflictError, Kube, KubeError, NotFoundError, path_for
from kube.events import EventRecorder
from kube.operations import OperationLimits, OperationPool
from kube.reflector import Reflector
from kube.worker import Handoff, Requeue, Retry, WorkerPool, join_within
from kube.workqueue import WorkQueue
from providers.base import ClaimName
from vnode.handler import Handler
from vnode.model import decisions
from vnode.model.decisions import Action, Decision, TakeUp
from vnode.model.tracking import pod_claim
from vnode.phases.provision import WaitingForSource
from vnode.phases.teardown import Tombstone
from vnode.sources.env import MissingSource

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]
STILL_RETRYING_AFTER = 20  # failures in a row before an Event says we keep trying
# Missing Secrets/ConfigMaps watched at once (one watch of that one object each); Pods
# waiting for more fall back to their retry backoff, which finds the object too, later.
MAX_SOURCE_WATCHES = 64
DELETED_MEMORY = 30.0  # seconds a sent final delete is remembered (its watch event comes well before)
ANCHOR_WAIT = 10.0  # seconds the first reconcile waits for the node's billing-seen-at to be read
Source = tuple[str, str, str]  # kind, namespace, name


class PodController:
    def __init__(
        self,
        handler: Handler,
        *,
        kube: Kube,
        watch_kube: Kube,
        events: EventRecorder,
        workers: int = 8,
        queue: WorkQueue | None = None,
        operations: OperationLimits | None = None,
    ) -> None:
        self.handler = handler
        self._kube = kube
        self._watch_kube = watch_kube
        self._events = events
        self.queue = queue if queue is not None else WorkQueue()
        self.operations = OperationPool(operations or OperationLimits(), name=handler.node_name)
        self.workers = WorkerPool(
            self.queue,
            self.sync,
            name=f"{handler.node_name} pod",
            workers=workers,
            on_retry=self._on_retry,
            operations=self.operations,
        )
        self._tombstones: dict[str, JsonDict] = {}
        # key -> (UID, monotonic time) of a Pod whose final delete was sent: a wake-up before its
        # watch event comes (our own final status write brings one) does not delete it again.
        # Kept DELETED_MEMORY seconds, so it stays small whatever the watch does.
        self._deleted: dict[str, tuple[str, float]] = {}
        self._waiting: dict[Source, set[str]] = {}  # missing source -> Pod keys
        self._source_reflectors: dict[Source, Reflector] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._reconciled = threading.Event()
        self.pods = Reflector(
            watch_kube,
            "/api/v1/pods",
            on_change=self._on_pod,
            field_selector=f"spec.nodeName={handler.node_name}",
        )

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """List, then reconcile every Pod, then start the workers and the poll loop."""
        self.pods.start()
        self._spawn(self._startup, "startup")

    def _startup(self) -> None:
        while not self.pods.synced.wait(0.1):
            if self._stop.is_set():
                return
        # The node's billing-seen-at first (read by the node controller's first round), bounded:
        # a node that cannot be read holds nothing else back.
        self.handler.billing_anchor_read.wait(ANCHOR_WAIT)
        # The first list already queued every Pod on the node (through `_on_pod`).
        self._reconciled.set()
        self.workers.start()
        handler = self.handler
        self._spawn(
            lambda: handler.status_sync.run(
                self._stop,
                interval=lambda: handler.poll_interval,
                live_claims=self.live_claims,
                changed=self.queue.add,
                open_spans=self.open_billing_claims,
            ),
            "poll",
        )
        intake = handler.notices
        if intake is not None:  # after the Pods are reconciled, so a notice finds its Pod
            # Not joined by `stop`: its long poll may wait seconds, and what it read after the
            # stop is left unacknowledged, so it comes again (vnode.phases.notices).
            thread = threading.Thread(
                target=lambda: intake.run(self._stop), name=f"{handler.node_name} notices", daemon=True
            )
            thread.start()

    def _spawn(self, target: Callable[[], None], label: str) -> None:
        thread = threading.Thread(target=target, name=f"{self.handler.node_name} {label}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def stop(self, timeout: float = 30.0) -> list[threading.Thread]:
        """Stop intake, let in-flight work finish (up to `timeout` in all); returns the
        threads still busy then. Operations not yet started are dropped: the next start
        finds their Pods again."""
        self._stop.set()
        self.pods.stop()
        for reflector in list(self._source_reflectors.values()):
            reflector.stop()
        self.queue.close()
        self.operations.stop(0.0)  # nothing new starts; those running finish below
        return join_within([*self._threads, *self.workers.threads, *self.operations.threads], timeout)

    # -- inputs ------------------------------------------------------------------------------
    def _on_pod(self, key: str, pod: JsonDict | None) -> None:
        if pod is None:
            return self._on_pod_deleted(key)
        self.queue.add(key)

    def _on_pod_deleted(self, key: str) -> None:
        entry = self.handler.tracked(key)
        unwatched = []
        with self._lock:
            if entry is not None:
                self._tombstones[key] = entry.pod
            for source in [source for source, keys in self._waiting.items() if key in keys]:
                self._waiting[source].discard(key)
                if not self._waiting[source]:  # nobody waits for it any more
                    del self._waiting[source]
                    unwatched.append(self._source_reflectors.pop(source, None))
        for reflector in unwatched:
            if reflector is not None:
                reflector.stop()
        self.queue.add(key)

    def _on_source(self, source: Source, key: str, obj: JsonDict | None) -> None:
        if obj is None:
            return
        with self._lock:
            waiting = self._waiting.pop(source, set())
            reflector = self._source_reflectors.pop(source, None)
        if reflector is not None:
            reflector.stop()  # it is there now: the watch has done its job
        for pod_key in waiting:
            self.queue.add(pod_key)

    def _wait_for(self, missing: MissingSource, key: str) -> None:
        """Re-queue `key` as soon as the Secret or ConfigMap it needs appears: a watch of
        that one object (never of every Secret in the cluster, which would hold them all
        in memory)."""
        source = (missing.kind, missing.namespace, missing.name)
        with self._lock:
            # The Pod may have been deleted while its sync failed: the reflector drops it from
            # the cache before `_on_pod_deleted` runs, so a key no longer cached never waits.
            if key not in self.pods.cache:
                return
            self._waiting.setdefault(source, set()).add(key)
            if source in self._source_reflectors or len(self._source_reflectors) >= MAX_SOURCE_WATCHES:
                return
            resource = "secrets" if missing.kind == "Secret" else "configmaps"
            reflector = Reflector(
                self._watch_kube,
                path_for(resource, namespace=missing.namespace),
                on_change=functools.partial(self._on_source, source),
                field_selector=f"metadata.name={missing.name}",
            )
            self._source_reflectors[source] = reflector
        reflector.start()

    def live_claims(self) -> set[ClaimName] | None:
        """Claims of every Pod on the node, or None until the startup reconcile is done."""
        if not self._reconciled.is_set():
            return None
        return self.handler.claims_of(self.pods.snapshot())

    # -- work ---------------------------------------------------------------------------
    def open_billing_claims(self) -> set[ClaimName] | None:
        """Claims of the node's Pods whose billing record (`nebula.io/billing`) has an open span,
        or None until the startup reconcile is done."""
        if not self._reconciled.is_set():
            return None
        claims = set()
        for pod in self.pods.snapshot():
            text = ((pod.get("metadata") or {}).get("annotations") or {}).get(names.BILLING_ANNOTATION)
            try:
                if text and billing.parse(text).open is not None:
                    claims.add(pod_claim(pod))
            except billing.BillingError:
                continue  # not a record Nebula wrote
        return claims

    def _on_retry(self, key: str, error: Retry, failures: int) -> None:
        if isinstance(error, WaitingForSource):
            self._wait_for(error.missing, key)
        if failures == STILL_RETRYING_AFTER:
            pod = self.pods.cache.get(key)
            if pod is not None:
                message = f"failed {STILL_RETRYING_AFTER} times in a row; still retrying with capped backoff: {error}"
                self._events.pod(pod, "Warning", names.EVENT_STILL_RETRYING, message)

    def sync(self, key: str) -> Requeue | Handoff | None:
        """Process one Pod key: decide, then perform. Requeue: look again after a while.
        Steps that call the provider to change something (provision, terminate, a restart
        or replacement, a get of an instance the list missed) are handed off to the
        provider's operation pool; the rest (adopting, status writes) run here."""
        with self.pods.lock:
            pod = self.pods.cache.get(key)
        with self._lock:
            tombstone = self._tombstones.get(key)
        decision = decisions.decide(pod, self.handler.tracked(key), tombstone)
        logger.debug("pod %s: %s (%s)", key, decision.action.name, decision.why)
        if decision.action is Action.TERMINATE_GONE:
            return Handoff(lambda: self._terminate_gone(key, decision))
        if decision.action is Action.TERMINATE_TOMBSTONE:
            return Handoff(lambda: self._terminate_tombstone(key, decision))
        if decision.pod is None or decision.action is Action.NOTHING:
            return None
        pod = dict(decision.pod)
        if decision.action is Action.TERMINATE_THEN_DELETE:
            if self._deleted_already(key, pod["metadata"].get("uid")):
                return None  # the status write's own watch event, after the delete: nothing to hand off
            return Handoff(lambda: self._terminate_then_delete(pod))
        if decision.action is Action.UPDATE:
            self.handler.update_pod(pod)
        else:  # CREATE_OR_ADOPT, ADOPT_FINISHED: the Handler does not track the Pod
            seen = decisions.Seen(*self.handler.inventory.lookup(pod))
            step = decisions.take_up(pod, seen, retry_after=self.handler.poll_interval)
            logger.debug("pod %s: %s (%s)", key, step.step.name, step.why)
            if step.slow:
                return Handoff(lambda: self._take_up_slowly(key, pod, seen, step))
            if not self._take_up(pod, step):
                return None
        if self.handler.lifecycle.step_due(key):
            return Handoff(lambda: self._carry_out(key, pod))
        return self._carry_out(key, pod)

    def _carry_out(self, key: str, pod: JsonDict) -> Requeue | None:
        after = self.handler.lifecycle.carry_out(key, pod)
        self.handler.flush(key, pod)
        return None if after is None else Requeue(after)

    def _take_up(self, pod: JsonDict, step: decisions.Untracked) -> bool:
        """Perform `decisions.take_up`'s step for a Pod the Handler does not track: the Pod is
        tracked when this returns True. Raises Retry to wait (the poll tick queues the key
        again as soon as a list succeeds: Inventory.take_waiting)."""
        if step.step is TakeUp.WAIT:
            raise Retry(step.why, delay=step.delay)
        if step.step is TakeUp.NOTHING:
            # A span left open by a manager that died between releasing the instance and writing
            # the record would count on until the Pod is deleted: it closes now.
            self.handler.teardown.close_untracked(pod, None)
            return False
        if step.step is TakeUp.ADOPT:
            assert step.instance is not None
            self.handler.adopt(pod, step.instance)
        elif step.step is TakeUp.PROVISION:
            self.handler.provisioner.create_pod(pod)
        else:
            assert step.step is TakeUp.LOSE and step.instance_id is not None
            self.handler.lost_before_tracking(pod, step.instance_id, why=step.why)
        if not step.finished:
            self.handler.update_pod(pod)
        return True

    def _take_up_slowly(
        self, key: str, pod: JsonDict, seen: decisions.Seen, step: decisions.Untracked
    ) -> Requeue | None:
        """On the operation pool: provision, or `get` the instance recorded on the Pod (a list
        may be late) and take the step that answer decides; then the due step, if any."""
        if step.step is TakeUp.CONFIRM_GONE:
            assert step.instance_id is not None
            got = self.handler.confirm_gone(step.instance_id)
            seen = dataclasses.replace(seen, confirmed=True, got=got)
            step = decisions.take_up(pod, seen, retry_after=self.handler.poll_interval)
        self._take_up(pod, step)
        return self._carry_out(key, pod)

    def _terminate_gone(self, key: str, decision: Decision) -> Requeue | None:
        after = self.handler.teardown.terminate(Tombstone(key, decision.uid))
        if after is not None:
            return Requeue(after)
        with self._lock:
            if (self._tombstones.get(key) or {}).get("metadata", {}).get("uid") == decision.uid:
                del self._tombstones[key]  # its instance is gone: nothing left to remember
        return Requeue(0.0) if decision.successor else None  # then serve the Pod that took the name

    def _deleted_already(self, key: str, uid: str | None) -> bool:
        """This manager deleted the Pod of `uid` (grace 0) and its DELETED event is on its way.
        Checked before a teardown is handed off too: a handoff takes one of the provider's
        operation tokens (its API quota), and the watch event of the final status write, which
        lands after the delete, would otherwise spend one on a step that calls nothing."""
        with self._lock:
            return self._deleted.get(key, ("", 0.0))[0] == uid

    def _terminate_tombstone(self, key: str, decision: Decision) -> Requeue | None:
        assert decision.pod is not None
        after = self.handler.teardown.terminate(decision.pod, gone=True)  # its name may be a new Pod's
        if after is not None:
            return Requeue(after)
        with self._lock:
            if self._tombstones.get(key) is decision.pod:
                del self._tombstones[key]
        return None

    def _terminate_then_delete(self, pod: JsonDict) -> Requeue | None:
        """Graceful deletion: terminate, and delete the object with grace 0 once the
        provider reports the instance gone."""
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        with self.pods.lock:
            cached = self.pods.cache.get(key)
        if (cached or {}).get("metadata", {}).get("uid") != meta["uid"]:
            return None  # gone from the API since this step was handed off (a tombstone terminates it)
        if self._deleted_already(key, meta["uid"]):
            return None
        after = self.handler.teardown.terminate(pod)
        if after is not None:
            return Requeue(after)
        try:
            self._kube.delete(
                path_for("pods", namespace=meta["namespace"], name=meta["name"]), grace_seconds=0, uid=meta["uid"]
            )
        except (NotFoundError, ConflictError):
            pass  # already gone, or a new Pod took the name
        except KubeError as exc:
            raise Retry(f"final delete failed: {exc}") from exc
        now = time.monotonic()
        with self._lock:
            while self._deleted and now - next(iter(self._deleted.values()))[1] >= DELETED_MEMORY:
                del self._deleted[next(iter(self._deleted))]  # the oldest first: insertion order is time order
            self._deleted.pop(key, None)
            self._deleted[key] = (meta["uid"], now)
        return None
