"""The placement controller: gated, opted-in Pods get a provider, a tier and a region.

Started by `placement.wiring`. Lists and watches Pods labelled `nebula.io/enabled=true`;
for each gated one it resolves the pool, asks the optimizer, and in ONE Pod update writes
the nodeSelector and annotations and removes only its own gate. It deletes refused Pods a
controller owns (so the owner recreates them) and publishes each NodePool's status. Runs on
`kube.worker.WorkerPool`: `sync` returns a named `Requeue` or None and raises `Retry`; never
writes the blocklist (the vnode Handler records refusals with their pool).

Invariant (no spin): a Pod gets at most one placement attempt per change of its own, of its
pool, or of the blocklist (an expiry included); see
tests/placement/test_e2e_failover.py::test_every_candidate_refusing_keeps_pods_gated_without_spinning.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kube import names, observe
from kube.client import ConflictError, Kube, KubeError, NotFoundError, path_for
from kube.events import EventRecorder
from kube.reflector import Reflector
from kube.worker import Requeue, Retry, WorkerPool
from kube.workqueue import WorkQueue
from placement.blocklist import Blocklist
from placement.catalog import Catalog
from placement.optimizer import BlockedUntil, Candidate, Decision, count_candidates, decide
from placement.poolcache import PoolCache, generation, pool_status
from placement.request import RequestError, is_placeable, is_replaceable_failure, labels, workload_request

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]
JSON_PATCH = "application/json-patch+json"
POOL_KEY = "pool:"  # queue keys of NodePools; a namespace never contains ':'
MAX_EVENT_MESSAGE = 1000
UNKNOWN_OFFERINGS_RECHECK = 10.0  # seconds before asking again when a provider's offerings were unknown
POOLS_UNSYNCED = Requeue(0.5)  # the pool cache has not listed NodePools yet: look again shortly
LOOK_AGAIN_NOW = Requeue(0.0)  # the Pod changed under our patch: the next look is a fresh attempt
PATCH_RETRY_DELAY = 1.0  # seconds before retrying a Pod patch the API server failed
EXPIRY_MARGIN = 0.05  # seconds past an expiry before looking again, so the entry has lapsed


def fnv1a64(text: str) -> int:
    value = 0xCBF29CE484222325
    for byte in text.encode():
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


@dataclass(frozen=True)
class Attempt:
    """How one placement attempt ended. `requeue`: when to look again (None: not unless
    something changes). `fresh_at`: epoch seconds from which the same inputs deserve another
    attempt (None: never while they stay the same). `settled=False`: the next look is an
    attempt whatever the inputs."""

    requeue: Requeue | None = None
    fresh_at: float | None = None
    settled: bool = True


SETTLED = Attempt()


class PlacementController:
    def __init__(
        self,
        *,
        kube: Kube,
        watch_kube: Kube,
        catalog: Catalog,
        pools: PoolCache,
        blocklist: Blocklist,
        events: EventRecorder,
        workers: int = 8,
        requeue_spread: float = 1.0,
        queue: WorkQueue | None = None,
    ) -> None:
        self._kube = kube
        self._catalog = catalog
        self._pools = pools
        self._blocklist = blocklist
        self._events = events
        self._spread = requeue_spread
        self.queue = queue if queue is not None else WorkQueue()
        self.attempts: Counter[str] = Counter()  # placement attempts per Pod key (tests, metrics)
        self._last: dict[str, tuple[Any, float | None]] = {}  # key -> (inputs signature, retry_at)
        self._waiting: set[str] = set()  # keys waiting for a blocklist expiry
        self._lock = threading.Lock()
        self.workers = WorkerPool(self.queue, self.sync, name="placement", workers=workers)
        self.pods = Reflector(
            watch_kube, "/api/v1/pods", on_change=self._on_pod, label_selector=f"{names.ENABLED_LABEL}=true"
        )

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self.pods.start()
        self.workers.start()

    def stop(self, timeout: float = 30.0) -> list[threading.Thread]:
        """Stop intake (the workers end when the queue closes); returns those still busy after `timeout`."""
        self.pods.stop()
        return self.workers.stop(timeout)

    # -- inputs ------------------------------------------------------------------------------
    def _on_pod(self, key: str, pod: JsonDict | None) -> None:
        self.queue.add(key)

    def pool_changed(self, name: str) -> None:
        """A NodePool appeared, went, or changed its spec."""
        self.queue.add(POOL_KEY + name)

    def blocklist_changed(self) -> None:
        """An entry was cleared or shortened: Pods waiting for an expiry look again now."""
        with self._lock:
            waiting, self._waiting = self._waiting, set()
        for key in waiting:
            self.queue.add(key)

    # -- work --------------------------------------------------------------------------------
    def sync(self, key: str) -> Requeue | None:
        """Process one key (run by the WorkerPool). Returns when to look again, or None;
        raises Retry when a write failed."""
        if key.startswith(POOL_KEY):
            self._sync_pool(key[len(POOL_KEY) :])
            return None
        with self.pods.lock:
            pod = self.pods.cache.get(key)
        if pod is None:
            self._forget(key)
            return None
        if is_replaceable_failure(pod):
            self._replace(pod)
            return None
        if not is_placeable(pod):
            self._forget(key)
            return None
        if not self._pools.synced.is_set():
            return POOLS_UNSYNCED
        signature = self._signature(pod)
        now = self._blocklist.now()
        with self._lock:
            last = self._last.get(key)
        if last is not None and last[0] == signature and (last[1] is None or now < last[1]):
            return None  # nothing this attempt depends on has changed: no new attempt
        self.attempts[key] += 1
        try:
            attempt = self._place(key, pod)
        except Exception:
            self._forget(key)  # a failed attempt settles nothing: the retry is a real attempt
            raise
        with self._lock:
            if attempt.settled:
                self._last[key] = (signature, attempt.fresh_at)
            else:
                self._last.pop(key, None)
        return attempt.requeue

    def _forget(self, key: str) -> None:
        with self._lock:
            self._last.pop(key, None)
            self._waiting.discard(key)

    def _signature(self, pod: JsonDict) -> tuple[Any, ...]:
        pool_name = labels(pod).get(names.POOL_LABEL, "")
        state = self._pools.get(pool_name) if pool_name else None
        pool_sig = None if state is None else (generation(state.raw), state.error)
        meta = pod.get("metadata") or {}
        # What placement reads of the Pod; its status (the scheduler's SchedulingGated
        # condition, say) is left out so a status write does not buy another attempt.
        placement_inputs = json.dumps([meta.get("uid"), meta.get("labels"), pod.get("spec")], sort_keys=True)
        return (placement_inputs, pool_name, pool_sig, self._blocklist.revision())

    # -- one placement attempt -----------------------------------------------------------------
    def _place(self, key: str, pod: JsonDict) -> Attempt:
        """One attempt: writes the Pod, or an Event saying why not."""
        pool_name = labels(pod).get(names.POOL_LABEL, "")
        if not pool_name:
            self._event(pod, "Warning", names.EVENT_NO_POOL, f"label the Pod {names.POOL_LABEL}=<NodePool name>")
            observe.current().placement_decided("invalid")
            return SETTLED
        state = self._pools.get(pool_name)
        if state is None:
            message = f"NodePool {pool_name!r} does not exist; create it or fix the {names.POOL_LABEL} label"
            self._event(pod, "Warning", names.EVENT_NO_POOL, message)
            observe.current().placement_decided("invalid")
            return SETTLED
        if state.pool is None:
            self._event(pod, "Warning", names.EVENT_POOL_INVALID, f"NodePool {pool_name!r} is invalid: {state.error}")
            observe.current().placement_decided("invalid")
            return SETTLED
        try:
            request = workload_request(pod)
        except RequestError as exc:
            self._event(pod, "Warning", names.EVENT_INVALID_REQUEST, str(exc))
            observe.current().placement_decided("invalid")
            return SETTLED
        now = self._blocklist.now()
        decision = decide(
            state.pool, request, self._catalog.views(), blocklist_lookup(self._blocklist, request.accelerator), now=now
        )
        if decision.chosen is not None:
            return self._ungate(pod, pool_name, decision)
        skipped = "; ".join(s.text() for s in decision.skipped) or "the pool lists no servable candidate"
        if decision.retry_at is not None:
            with self._lock:
                self._waiting.add(key)
            uid = str((pod.get("metadata") or {}).get("uid", ""))
            delay = decision.retry_at - now + EXPIRY_MARGIN + self._spread * (fnv1a64(uid) % 1000) / 1000
            when = datetime.fromtimestamp(decision.retry_at, UTC).strftime("%H:%M:%SZ")
            message = f"no candidate in pool {pool_name!r} can serve {request.describe()} now: {skipped}"
            self._event(pod, "Warning", names.EVENT_NO_CANDIDATE, message)
            message = f"every servable candidate is blocked; trying again at {when}, when the first one frees"
            self._event(pod, "Normal", names.EVENT_BLOCKED, message)
            observe.current().placement_decided("blocked")
            return Attempt(Requeue(delay), fresh_at=decision.retry_at)
        message = f"no candidate in pool {pool_name!r} can serve {request.describe()}: {skipped}"
        self._event(pod, "Warning", names.EVENT_NO_CANDIDATE, message)
        observe.current().placement_decided("no_candidate")
        if decision.unknown:  # a provider's offerings could not be read: ask it again later
            return Attempt(Requeue(UNKNOWN_OFFERINGS_RECHECK + EXPIRY_MARGIN), fresh_at=now + UNKNOWN_OFFERINGS_RECHECK)
        return SETTLED

    def _ungate(self, pod: JsonDict, pool_name: str, decision: Decision) -> Attempt:
        """One JSON patch: nodeSelector, annotations, our gate removed (others kept). Its
        `test` ops make it apply only to the Pod as placement saw it; a concurrent status
        write (the scheduler's) does not conflict with it, as a full update would."""
        chosen = decision.chosen
        assert chosen is not None
        meta = pod["metadata"]
        annotations = {
            names.CAPACITY_TYPE_ANNOTATION: chosen.tier.value,
            names.REGION_ANNOTATION: chosen.region,
            names.POOL_ANNOTATION: pool_name,
        }
        if chosen.hourly_price is not None:
            annotations[names.HOURLY_PRICE_ANNOTATION] = f"{chosen.hourly_price:.4f}".rstrip("0").rstrip(".")
        path = path_for("pods", namespace=meta["namespace"], name=meta["name"])
        try:
            ops = ungate_patch(pod, chosen.provider, annotations)
            self._kube.request("PATCH", path, body=ops, content_type=JSON_PATCH)
        except ConflictError:
            return Attempt(LOOK_AGAIN_NOW, settled=False)  # the Pod moved under us: look at the new version
        except NotFoundError:
            return SETTLED
        except KubeError as exc:
            if exc.status == 422:  # a `test` op failed: the uid or our gate's position changed
                return Attempt(LOOK_AGAIN_NOW, settled=False)
            raise Retry(f"placing {meta['namespace']}/{meta['name']} failed: {exc}", delay=PATCH_RETRY_DELAY) from exc
        message = f"placed on {chosen.label()} at {chosen.price_text()}: {decision.why}"
        if decision.skipped:
            message += "; skipped " + "; ".join(s.text() for s in decision.skipped)
        observe.current().placement_decided("placed")
        self._event(pod, "Normal", names.EVENT_PLACED, message)
        return SETTLED

    # -- refused Pods ----------------------------------------------------------------------------
    def _replace(self, pod: JsonDict) -> None:
        """Delete a refused Pod its controller owns, so the owner makes a fresh gated one."""
        meta = pod["metadata"]
        path = path_for("pods", namespace=meta["namespace"], name=meta["name"])
        try:
            self._kube.delete(path, uid=meta.get("uid"))
        except (NotFoundError, ConflictError):
            return  # gone already, or the name now belongs to a new Pod
        except KubeError as exc:
            logger.warning("could not delete refused Pod %s/%s: %s", meta["namespace"], meta["name"], exc)
            return
        logger.info("deleted refused Pod %s/%s so its owner replaces it", meta["namespace"], meta["name"])
        message = "deleted after the provider refused it; its owner creates a replacement that skips the refusal"
        self._event(pod, "Normal", names.EVENT_REPLACING, message)

    # -- pools -------------------------------------------------------------------------------
    def _sync_pool(self, name: str) -> None:
        state = self._pools.get(name)
        if state is not None:
            count = 0 if state.pool is None else count_candidates(state.pool, self._catalog.views())
            self._pools.write_status(name, pool_status(state, candidate_count=count))
        for pod in self.pods.snapshot():
            if labels(pod).get(names.POOL_LABEL) == name and is_placeable(pod):
                meta = pod["metadata"]
                self.queue.add(f"{meta['namespace']}/{meta['name']}")

    def _event(self, pod: JsonDict, kind: str, reason: str, message: str) -> None:
        if len(message) > MAX_EVENT_MESSAGE:
            message = message[: MAX_EVENT_MESSAGE - 3] + "..."
        self._events.pod(pod, kind, reason, message)


def blocklist_lookup(blocklist: Blocklist, accelerator: str | None) -> BlockedUntil:
    """The optimizer's view of the blocklist for a request of `accelerator`: when each candidate
    is blocked until (epoch seconds), or None. The scope a provider built from the same PodSpec
    covers it: tests/placement/test_one_reader.py::test_placement_the_provider_and_the_blocklist_read_one_pod_alike."""

    def lookup(candidate: Candidate) -> float | None:
        entry = blocklist.blocked(
            candidate.provider, accelerator=accelerator, tier=candidate.tier, region=candidate.region
        )
        return None if entry is None else entry.expires_at.timestamp()

    return lookup


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def ungate_patch(pod: JsonDict, provider: str, annotations: dict[str, str]) -> list[JsonDict]:
    """Pure: the JSON patch (RFC 6902) that places `pod`; fails as a whole if the Pod's uid
    or our gate's position changed since it was read."""
    meta, spec = pod["metadata"], pod["spec"]
    gates = spec.get("schedulingGates") or []
    index = next(i for i, g in enumerate(gates) if g.get("name") == names.PLACEMENT_GATE)
    ops: list[JsonDict] = [
        {"op": "test", "path": "/metadata/uid", "value": meta.get("uid")},
        {"op": "test", "path": f"/spec/schedulingGates/{index}/name", "value": names.PLACEMENT_GATE},
        {"op": "remove", "path": f"/spec/schedulingGates/{index}"},
    ]
    if spec.get("nodeSelector"):
        ops.append({"op": "add", "path": f"/spec/nodeSelector/{_pointer(names.PROVIDER_KEY)}", "value": provider})
    else:
        ops.append({"op": "add", "path": "/spec/nodeSelector", "value": {names.PROVIDER_KEY: provider}})
    if meta.get("annotations"):
        for key, value in annotations.items():
            ops.append({"op": "add", "path": f"/metadata/annotations/{_pointer(key)}", "value": value})
    else:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": annotations})
    return ops
