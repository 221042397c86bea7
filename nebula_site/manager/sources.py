"""Where a manager's Runners come from, behind one small interface (`RunnerSource`): the static
source (the leader runs every provider) and the shared one (every replica serves its share of
the providers on node Leases, `kube.sharing`, and leading adds placement and the console).

Chosen and driven by `nebula_site.manager.main`'s loop. Never touches the leader Lease itself.
Tests: tests/nebula_site/test_manager.py, tests/nebula_site/test_sharing_managers.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from kube.client import Kube, KubeError, path_for
from kube.holders import ANY, Holders
from kube.leases import SharedLeases
from kube.sharing import Sharing, Term
from nebula_site.manager import config as manager_config
from nebula_site.manager import leading as manager_leading
from nebula_site.manager import shutdown as manager_shutdown
from placement.blocklist import Blocklist
from placement.blockstore import Blockstore
from placement.poolcache import PoolCache
from providers.base import Provider
from vnode.kubelet.resolve import HandlerRegistry
from vnode.runner import Runner

logger = logging.getLogger(__name__)

ProviderFactory = Callable[[str], Mapping[str, Provider]]  # cluster identity -> providers by alias
IDENTITY_RETRY = 2.0  # seconds between reads of the kube-system Namespace while the API does not answer


def cluster_identity(
    kube: Kube, configured: str | None, stop: threading.Event, *, retry: float = IDENTITY_RETRY
) -> str | None:
    """Who this cluster is, for instance ownership: `configured` (`--cluster-name`,
    `NEBULA['CLUSTER_NAME']`), else the UID of the `kube-system` Namespace, which is stable
    for the cluster's life and differs between clusters. Waits for the API server (None if
    `stop` comes first): guessing would let this manager see another cluster's instances."""
    if configured:
        return configured
    while not stop.is_set():
        try:
            uid = str(kube.get(path_for("namespaces", name="kube-system"))["metadata"]["uid"])
        except (KubeError, KeyError, TypeError) as exc:
            logger.warning("cannot read the kube-system Namespace for the cluster identity (retrying): %s", exc)
        else:
            if uid:
                return uid
        stop.wait(retry)
    return None


@dataclass(frozen=True)
class Wiring:
    """What both sources build with: the process's clients, kubelet registry, Blocklist and its
    cluster copy (`blockstore`: the leader sweeps expired entries)."""

    config: manager_config.ManagerConfig
    kube: Kube
    watch_kube: Kube
    registry: HandlerRegistry
    blocklist: Blocklist
    options: manager_config.RunnerOptions  # with the bound kubelet port
    build_providers: ProviderFactory
    blockstore: Blockstore | None = None

    def leading(self, providers: Mapping[str, Provider]) -> manager_leading.Leading:
        return manager_leading.Leading(
            providers,
            self.registry,
            self.blocklist,
            self.options,
            operations=self.config.operations,
            spend_interval=self.config.spend_interval,
            blockstore=self.blockstore,
        )


class RunnerSource(Protocol):
    """One way of getting Runners: `prepare` before the leader Lease is sought (False: `stop`
    came first), `lead` once it is held (None: `stop` came first), `stop_steps` at the end."""

    stands_by: bool  # losing the leader Lease stands this replica by (True) or ends the process

    def prepare(self, stop: threading.Event) -> bool: ...

    def lead(self, stop: threading.Event) -> manager_leading.Leading | None: ...

    def stop_steps(self) -> list[manager_shutdown.Stopper]: ...


class StaticRunners:
    """The leader runs every provider: the cluster identity is learnt, and the providers and
    their Runners built, once this process leads; losing the Lease ends the process."""

    stands_by = False

    def __init__(self, wiring: Wiring) -> None:
        self._wiring = wiring
        self._leading: manager_leading.Leading | None = None

    def prepare(self, stop: threading.Event) -> bool:
        return True

    def lead(self, stop: threading.Event) -> manager_leading.Leading | None:
        wiring = self._wiring
        cluster = cluster_identity(wiring.kube, wiring.config.cluster_name, stop)
        if cluster is None:
            return None
        logger.info("cluster identity %s: only instances owned by it are listed, adopted or swept", cluster)
        self._leading = wiring.leading(wiring.build_providers(cluster))
        self._leading.start(wiring.kube, wiring.watch_kube)
        return self._leading

    def stop_steps(self) -> list[manager_shutdown.Stopper]:
        return self._leading.stop_steps() if self._leading is not None else []


class SharedRunners:
    """Every replica serves its share of the providers from before it seeks the leader Lease
    (`Sharing`, on node Leases, with a pool cache of its own, which also gives the blocklist its
    pools' TTLs: placement's runs only while leading); leading adds placement, the mirror and the
    console, and losing it stands by."""

    stands_by = True

    def __init__(self, wiring: Wiring, identity: str, holders: Holders = ANY) -> None:
        self._wiring = wiring
        self._identity = identity
        self._holders = holders  # who may hold a node or member Lease (a spoofed holder is nobody)
        self._leading: manager_leading.Leading | None = None
        self._sharing: Sharing | None = None
        self._pools: PoolCache | None = None

    def prepare(self, stop: threading.Event) -> bool:
        wiring, config = self._wiring, self._wiring.config
        cluster = cluster_identity(wiring.kube, config.cluster_name, stop)
        if cluster is None:
            return False
        providers = wiring.build_providers(cluster)
        self._pools = pools = PoolCache(wiring.kube, wiring.watch_kube)
        pools.start()
        self._leading = leading = wiring.leading(providers)
        # A refusal seen here gets its pool's TTL though placement (and its pool cache) runs on
        # the leader only: this replica's own pool cache answers, leading or not.
        leading.ttl_pools = pools
        wiring.blocklist.use_pool_ttls(pools.ttl_of, pools.interrupted_ttl_of)
        duration = config.lease_duration
        leases = SharedLeases(
            wiring.kube,
            namespace=config.namespace,
            identity=self._identity,
            duration=duration,
            margin=duration / 3,
            holders=self._holders,
        )

        def build(alias: str, term: Term) -> Runner:
            return leading.build_runner(alias, kube=wiring.kube, watch_kube=wiring.watch_kube, pools=pools, term=term)

        self._sharing = Sharing(
            leases,
            list(providers),
            build,
            retry=duration * 2 / 15,
            stop_timeout=config.shutdown_grace,
            on_change=leading.runners_changed,
        )
        self._sharing.start()
        logger.info("cluster identity %s; serving a share of the providers (lease %s)", cluster, self._identity)
        return True

    def lead(self, stop: threading.Event) -> manager_leading.Leading | None:
        assert self._leading is not None and self._sharing is not None, "prepared"
        self._leading.start(self._wiring.kube, self._wiring.watch_kube, runners=self._sharing.runners)
        return self._leading

    def stop_steps(self) -> list[manager_shutdown.Stopper]:
        """What leads, then the shared Runners (their Leases released as each stops), then the
        Runners' pool cache."""
        steps = self._leading.stop_steps() if self._leading is not None else []
        if self._sharing is not None:
            steps.append(self._sharing.stop)
        return [*steps, self._stop_pools]

    def _stop_pools(self, timeout: float) -> list[threading.Thread]:
        if self._pools is not None:
            self._pools.stop()
        return []
