"""What runs while this process leads: `Leading` (placement, the Runners it builds with
`runners.build_runner`, and the console's runtime, mirror and cluster view).

Started by `nebula_site.manager.main` (through a runner source, `sources`) and, without the
console, by the rigs that run placement beside virtual nodes (tests/support/rigs/placement.py).
Never starts listeners, never holds a Lease.
Tests: tests/nebula_site/test_manager.py::test_lead_publishes_to_the_console_and_clears_it_all_on_stop,
tests/placement/test_pool_egress_placement.py.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from console import runtime
from console.clusterpods import ClusterView
from console.mirror import Mirror
from kube.client import Kube
from kube.operations import OperationLimits
from kube.sharing import Term
from nebula_site.manager import config as manager_config
from nebula_site.manager import runners as manager_runners
from nebula_site.manager import shutdown as manager_shutdown
from placement.blocklist import Blocklist
from placement.blockstore import Blockstore
from placement.poolcache import PoolCache
from placement.settle import SPEND_INTERVAL
from placement.wiring import Placement
from providers.base import Provider
from vnode.blocklister import Blocklister
from vnode.kubelet.resolve import HandlerRegistry
from vnode.poolpolicy import PoolPolicies
from vnode.runner import Runner

logger = logging.getLogger(__name__)

BLOCKLIST_SYNC_WAIT = 10.0  # seconds a replica waits for the blocklist's first list before it seeks the Lease
BLOCKLIST_LAST_WAIT = 2.0  # seconds a new leader waits for it still (nothing renews the Lease meanwhile)


def await_blocklist(blockstore: Blockstore | None, timeout: float) -> None:
    """Wait up to `timeout` for the blocklist's cluster copy to be listed; log when it is not."""
    if blockstore is not None and not blockstore.wait_listed(timeout):
        logger.warning("the blocklist is not listed from the cluster; placing with what memory holds")


@dataclass
class Leading:
    """Placement and the Runners it places onto, sharing one Blocklist (`start_nodes`), and,
    in the manager, the console's runtime and mirror too (`start`); stopped by `stop_steps`.
    With `blockstore` (the Blocklist's cluster copy) placement waits for its first list and this
    process sweeps expired entries while placement runs; with `ttl_pools` (providers shared out)
    the Blocklist reads pool TTLs from it again once placement stops."""

    providers: Mapping[str, Provider]
    registry: HandlerRegistry
    blocklist: Blocklist
    options: manager_config.RunnerOptions
    operations: Mapping[str, OperationLimits] = field(default_factory=dict)  # alias -> limits
    requeue_spread: float = 1.0  # placement's: seconds over which a refused Pod's retries spread
    spend_interval: float = SPEND_INTERVAL  # placement's: seconds between publications of the pools' spend
    runners: list[Runner] = field(default_factory=list)
    placement: Placement | None = None
    mirror: Mirror | None = None
    cluster: ClusterView | None = None  # the console's copy of the nodes other replicas serve
    blockstore: Blockstore | None = None
    ttl_pools: PoolCache | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _publishing: bool = False  # the console reads this process's Runners (it leads)

    def build_runner(
        self, alias: str, *, kube: Kube, watch_kube: Kube, pools: PoolPolicies | None, term: Term | None = None
    ) -> Runner:
        """The Runner of provider `alias`, reporting refusals to the shared Blocklist."""
        # The one place the two siblings meet: placement's Blocklist is what the vnode reports
        # refusals to, by structure alone (vnode never imports placement); mypy checks it here.
        blocklister: Blocklister = self.blocklist
        return manager_runners.build_runner(
            self.providers[alias],
            self.options,
            kube=kube,
            watch_kube=watch_kube,
            blocklister=blocklister,
            pools=pools,
            operations=self.operations.get(alias),
            term=term,
        )

    def start(self, kube: Kube, watch_kube: Kube, *, runners: Callable[[], Sequence[Runner]] | None = None) -> None:
        """Runners first (the nodes appear), then what serves and reads their Handlers. With
        `runners` (providers shared out: the sharing loop's, read once publishing), placement,
        the mirror and the console only."""
        self.start_nodes(kube, watch_kube, own_runners=runners is None)
        self.cluster = ClusterView(watch_kube, [provider.name for provider in self.providers.values()])
        self._publishing = True
        self.runners_changed(self.runners if runners is None else runners())
        runtime.set_leading(True)  # the console serves from here on, and standbys forward here
        self.mirror = Mirror()
        self.mirror.start()

    def start_nodes(self, kube: Kube, watch_kube: Kube, *, own_runners: bool = True) -> Placement:
        """Placement and (with `own_runners`) one started Runner per provider, in the registry."""
        # Placement's pool cache is what the Handlers read a pool's egress and provisioning
        # timeout from; it is built now and started after the Runners.
        placement = Placement(
            self.providers,
            kube=kube,
            watch_kube=watch_kube,
            blocklist=self.blocklist,
            requeue_spread=self.requeue_spread,
            spend_interval=self.spend_interval,
        )
        pools: PoolPolicies = placement.pools
        if own_runners:
            self.runners = [
                self.build_runner(alias, kube=kube, watch_kube=watch_kube, pools=pools) for alias in self.providers
            ]
            for runner in self.runners:
                runner.start()
                logger.info("virtual node %s started", runner.handler.node_name)
            self.registry.add_all([r.handler for r in self.runners])
        self._await_blocklist()
        placement.start()
        self.placement = placement
        if self.blockstore is not None:
            self.blockstore.lead(True)
        return placement

    def _await_blocklist(self) -> None:
        """A new leader places nothing before it holds every replica's refusals (I6). The
        manager waited before it sought the Lease (`await_blocklist`): this is the short last
        check, well inside the Lease's renew deadline."""
        await_blocklist(self.blockstore, BLOCKLIST_LAST_WAIT)

    def runners_changed(self, runners: Sequence[Runner]) -> None:
        """The Runners serving here now: the kubelet registry follows, and the console while leading."""
        handlers = [r.handler for r in runners]
        runtime.set_served([h.node_name for h in handlers])
        with self._lock:
            for gone in set(self.registry.handlers()) - set(handlers):
                self.registry.remove(gone)
            self.registry.add_all(handlers)
            if self._publishing and self.placement is not None:
                if self.cluster is not None:
                    self.cluster.serve_here(handler.node_name for handler in handlers)
                runtime.install(handlers=handlers, placement=self.placement, cluster=self.cluster)

    def stop_steps(self) -> list[manager_shutdown.Stopper]:
        """Placement first (no new placements), then the mirror and the console's registry,
        then the Runners (their in-flight provider calls finish)."""
        return [self._stop_placement, self._stop_mirror, *self._runner_stops()]

    def stop_nodes_steps(self) -> list[manager_shutdown.Stopper]:
        """`stop_steps` of what `start_nodes` started: placement, then the Runners."""
        return [self._stop_placement, *self._runner_stops()]

    def _runner_stops(self) -> list[manager_shutdown.Stopper]:
        return [runner.stop for runner in self.runners]

    def _stop_placement(self, timeout: float) -> list[threading.Thread]:
        placement, self.placement = self.placement, None  # once: a later start builds a new one
        if self.blockstore is not None:
            self.blockstore.lead(False)
        busy = placement.stop(timeout) if placement is not None else []
        if self.ttl_pools is not None:
            self.blocklist.use_pool_ttls(self.ttl_pools.ttl_of, self.ttl_pools.interrupted_ttl_of)
        return busy

    def _stop_mirror(self, timeout: float) -> list[threading.Thread]:
        mirror, self.mirror = self.mirror, None
        busy = mirror.stop(timeout) if mirror is not None else []
        runtime.set_leading(False)
        with self._lock:
            self._publishing = False
            runtime.clear()
            cluster, self.cluster = self.cluster, None
        if cluster is not None:
            cluster.stop()
        return busy


def with_port(options: manager_config.RunnerOptions, kubelet_port: int) -> manager_config.RunnerOptions:
    """`options` with the kubelet listener's bound port (the configured one may be 0)."""
    return dataclasses.replace(options, kubelet_port=kubelet_port)
