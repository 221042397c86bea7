"""The NodePool cache: list-and-watch of `nodepools.nebula.io`, each parsed once per change.

Started by `placement.wiring`; read by the placement controller (`get`), the blocklist
(`ttl_of`, `interrupted_ttl_of`), the vnode Handlers (`egress_of`, `provisioning_timeout_of`,
`replaces_on_rebalance`: it is a
`vnode.poolpolicy.PoolPolicies` by structure, tests/placement/test_pool_policy.py) and the
REST API (`pools`). Its one write is a NodePool's whole status (a PUT of the status
subresource, conditioned on the resourceVersion it was composed from, so a stale writer never
drops a settled ledger), asked for by the controller and the spend publisher, and only when the
status would change. Tested over the
devcluster in tests/console/api/test_api_e2e.py::test_an_invalid_pool_is_reported_in_its_status_and_on_its_pods
and tests/placement/test_e2e_pool_status.py (placedCount, providerNames).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kube import names
from kube.client import ConflictError, Kube, NotFoundError, path_for
from kube.reflector import Reflector
from placement.pools import NodePool, PoolError, parse_pool
from providers.egress import OPEN, Egress

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]
POLICY_SYNC_WAIT = 30.0  # seconds a vnode's egress_of / provisioning_timeout_of waits for the first list
NODEPOOLS = path_for(names.NODEPOOL_PLURAL, group=names.NODEPOOL_GROUP, version=names.NODEPOOL_VERSION)


@dataclass(frozen=True)
class PoolState:
    """One NodePool as last seen: parsed, or the error that makes it unusable."""

    name: str
    pool: NodePool | None
    error: str
    raw: JsonDict


class PoolCache:
    """Thread-safe. `on_change(name)` runs on the watch thread when a pool appears, goes, or
    its spec changes (generation), never for a status-only change."""

    def __init__(
        self,
        kube: Kube,
        watch_kube: Kube,
        *,
        on_change: Callable[[str], None] | None = None,
        policy_sync_wait: float = POLICY_SYNC_WAIT,
    ) -> None:
        self._kube = kube
        self._policy_sync_wait = policy_sync_wait
        self._on_change = on_change
        self._states: dict[str, PoolState] = {}
        self._lock = threading.Lock()
        self.reflector = Reflector(watch_kube, NODEPOOLS, on_change=self._changed)

    def start(self) -> None:
        self.reflector.start()

    def stop(self) -> None:
        self.reflector.stop()

    @property
    def synced(self) -> threading.Event:
        return self.reflector.synced

    def get(self, name: str) -> PoolState | None:
        with self._lock:
            return self._states.get(name)

    def pools(self) -> list[PoolState]:
        with self._lock:
            return sorted(self._states.values(), key=lambda s: s.name)

    def ttl_of(self, name: str) -> float | None:
        """The pool's blocklist TTL in seconds, or None for a missing or invalid pool."""
        state = self.get(name)
        return None if state is None or state.pool is None else state.pool.blocklist_ttl

    def interrupted_ttl_of(self, name: str) -> float | None:
        """The pool's `interruption.blocklistTTL` in seconds, or None for a missing or invalid pool."""
        state = self.get(name)
        return None if state is None or state.pool is None else state.pool.interruption.blocklist_ttl

    def replaces_on_rebalance(self, pool: str | None) -> bool:
        """The pool's `interruption.proactive`; False for None, a missing or an invalid pool."""
        state = self._policy_state(pool)
        return state is not None and state.pool is not None and state.pool.interruption.proactive

    def egress_of(self, pool: str | None) -> Egress:
        """The pool's egress policy; Open for None, a missing or an invalid pool (placement places
        no Pod of an invalid pool, so this is only read for Pods placed before it broke). Waits
        (up to `policy_sync_wait`) for the first list, so a Pod provisioned right after a start
        is not sent Open for a pool not read yet."""
        state = self._policy_state(pool)
        return OPEN if state is None or state.pool is None else state.pool.egress

    def provisioning_timeout_of(self, pool: str | None) -> float | None:
        """Seconds an instance of a Pod of `pool` may stay PROVISIONING; None for no pool, a
        missing or an invalid one (nothing would place its replacement elsewhere)."""
        state = self._policy_state(pool)
        return None if state is None or state.pool is None else state.pool.provisioning_timeout

    def _policy_state(self, pool: str | None) -> PoolState | None:
        if not pool:
            return None
        if not self.synced.wait(self._policy_sync_wait):
            with self._lock:
                first, self._policy_sync_wait = self._policy_sync_wait > 0, 0.0  # wait once, not per Pod
            if first:
                logger.warning("NodePools not listed yet; reading pool %s (and others until listed) as absent", pool)
        return self.get(pool)

    def _changed(self, key: str, obj: JsonDict | None) -> None:
        with self._lock:
            before = self._states.get(key)
            if obj is None:
                self._states.pop(key, None)
            else:
                self._states[key] = _parse(key, obj)
        spec_moved = obj is None or before is None or generation(before.raw) != generation(obj)
        if spec_moved and self._on_change is not None:
            self._on_change(key)

    def write_status(self, name: str, status: JsonDict, *, raw: JsonDict | None = None) -> bool:
        """Replace the pool's whole status (PUT of the status subresource, conditioned on the
        resourceVersion of `raw`, by default the cached object) if it differs from the one
        `raw` holds (transition times of unchanged conditions are kept). False: the object
        moved on since (409), the caller composes again from the newer one; True when written,
        unchanged or the pool is gone. Any other failure raises (KubeError): only the caller
        knows whether it may go on without the write (the settler must not: I12)."""
        state = self.get(name)
        if raw is None:
            if state is None:
                return True
            raw = state.raw
        current = raw.get("status") or {}
        status = _keep_transition_times(current, status)
        if current == status:
            return True
        path = path_for(
            names.NODEPOOL_PLURAL,
            name=name,
            subresource="status",
            group=names.NODEPOOL_GROUP,
            version=names.NODEPOOL_VERSION,
        )
        try:
            self._kube.replace(path, dict(raw, status=status))
        except ConflictError:
            return False
        except NotFoundError:
            return True
        return True


def state_of(name: str, obj: JsonDict) -> PoolState:
    """`obj` (a NodePool as read) parsed, as the cache would hold it."""
    return _parse(name, obj)


def _parse(name: str, obj: JsonDict) -> PoolState:
    try:
        return PoolState(name, parse_pool(obj), "", obj)
    except PoolError as exc:
        return PoolState(name, None, str(exc), obj)


def generation(obj: JsonDict) -> Any:
    return (obj.get("metadata") or {}).get("generation")


def pool_status(
    state: PoolState,
    *,
    candidate_count: int,
    placed_count: int = 0,
    spend: JsonDict | None = None,
    budget: JsonDict | None = None,
) -> JsonDict:
    """The whole status placement publishes (every writer writes all of it, so no writer drops
    another's part): observed generation, candidates, the Pods placed through the pool that
    have not finished, the providers' names (one string, for `kubectl get`'s Providers column:
    kube-apiserver prints only the first match of a `[*]` column path), a Ready condition, and,
    from the spend publisher, `spend` and the `BudgetExceeded` condition (`budget`)."""
    valid = state.pool is not None
    message = f"{candidate_count} candidates from the registered providers" if valid else f"invalid pool: {state.error}"
    providers = (state.raw.get("spec") or {}).get("providers")
    named = (
        [str(p["name"]) for p in providers if isinstance(p, dict) and p.get("name")]
        if isinstance(providers, list)
        else []
    )
    status: JsonDict = {
        "observedGeneration": generation(state.raw) or 0,
        "candidateCount": candidate_count if valid else 0,
        "placedCount": placed_count,
        "providerNames": ",".join(named),
        "conditions": [
            {
                "type": "Ready",
                "status": "True" if valid and candidate_count else "False",
                "reason": ("Valid" if candidate_count else "NoCandidates") if valid else "Invalid",
                "message": message,
                "lastTransitionTime": now_text(),
            }
        ],
    }
    if budget is not None:
        status["conditions"].append(budget)
    if spend is not None:
        status["spend"] = spend
    return status


def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _keep_transition_times(current: JsonDict, new: JsonDict) -> JsonDict:
    old = {c.get("type"): c for c in current.get("conditions") or [] if isinstance(c, dict)}
    conditions = []
    for condition in new.get("conditions") or []:
        previous = old.get(condition.get("type"))
        if previous is not None and all(previous.get(k) == condition.get(k) for k in ("status", "reason", "message")):
            condition = dict(condition, lastTransitionTime=previous.get("lastTransitionTime"))
        conditions.append(condition)
    return dict(new, conditions=conditions)
