"""Placement assembled: the pool cache, the offerings catalog and the placement controller.

`runvnode` builds a `Placement` under leader election, after the Blocklist it hands to every
Runner (the Handlers write it, placement reads it), hands its `pools` (the NodePools' egress
and provisioning timeout) to every Runner too, and starts it after them (`start_placement`
builds and starts one at once). Returns a `Placement`
whose `stop()` stops intake and joins the workers. The console reads `Placement` through
`console.runtime` (pools, the blocklist, `gated_pods`); its one write is `clear_block`, an
operator's action; `spend_report()` is the spend book's report (`placement.spend`), and
`spend` the book itself (`spent(pool)` for budgets). `clock` (epoch seconds) and
`spend_interval` (seconds between spend publications) are injectable for tests. Assembled end to end in
tests/placement/test_e2e_failover.py::test_deployment_lands_on_cheap_spot_fails_over_within_2s_and_returns_after_ttl.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from kube import names
from kube.client import Kube
from kube.events import EventRecorder
from placement.blocklist import Blocklist, describe_scope
from placement.catalog import Catalog
from placement.controller import PlacementController
from placement.gated import GatedPod
from placement.poolcache import PoolCache
from placement.settle import SPEND_INTERVAL
from placement.spend import SpendBook
from placement.spendview import SpendReport
from providers.base import Provider

logger = logging.getLogger(__name__)
COMPONENT = "nebula-placement"


class Placement:
    """The running placement machinery; constructed by `start_placement`."""

    def __init__(
        self,
        providers: Mapping[str, Provider],
        *,
        kube: Kube,
        watch_kube: Kube,
        blocklist: Blocklist,
        workers: int = 8,
        offerings_ttl: float = 10.0,
        requeue_spread: float = 1.0,
        clock: Callable[[], float] = time.time,
        spend_interval: float = SPEND_INTERVAL,
    ) -> None:
        self.blocklist = blocklist
        self.providers = dict(providers)
        self.events = EventRecorder(kube, component=COMPONENT, host=COMPONENT)
        self.catalog = Catalog(self.providers, ttl=offerings_ttl)
        self.pools = PoolCache(kube, watch_kube, on_change=lambda name: self.controller.pool_changed(name))
        self.controller = PlacementController(
            kube=kube,
            watch_kube=watch_kube,
            catalog=self.catalog,
            pools=self.pools,
            blocklist=blocklist,
            events=self.events,
            workers=workers,
            requeue_spread=requeue_spread,
            clock=clock,
            spend_interval=spend_interval,
        )
        self.spend: SpendBook = self.controller.spend.book  # what each pool spent (the budget book reads `spent`)

    def start(self) -> None:
        self.blocklist.use_pool_ttls(self.pools.ttl_of, self.pools.interrupted_ttl_of)
        self.blocklist.subscribe(self.controller.blocklist_changed)
        self.catalog.subscribe(self.controller.offerings_changed)
        self.pools.start()
        self.controller.start()

    def stop(self, timeout: float = 30.0) -> list[threading.Thread]:
        """Stop intake; in-flight placements finish (bounded by `timeout`). Returns the
        workers still busy then."""
        self.blocklist.unsubscribe(self.controller.blocklist_changed)
        self.pools.stop()
        return self.controller.stop(timeout)

    def gated_pods(self) -> list[GatedPod]:
        """The Pods placement holds back, each with what it waits for (read by the console)."""
        return self.controller.gated_pods()

    def spend_report(self, *, charts: bool = True) -> SpendReport:
        """Spend and budgets as of now, for the console and the REST API (the metrics read it
        without `charts`: no buckets, no Pods)."""
        return self.spend.report(verdict=self.controller.spend.verdict, charts=charts)

    def clear_block(self, entry_id: str, *, actor: str) -> bool:
        """An operator removes a blocklist entry: logged, and an Event on the provider's node."""
        entry = self.blocklist.get(entry_id)
        if entry is None or not self.blocklist.clear(entry_id):
            return False
        scope = describe_scope(entry.provider, entry.scope)
        logger.info("blocklist entry %s (%s) cleared by %s", entry_id, scope, actor)
        node = {"metadata": {"name": names.node_name(entry.provider), "uid": names.node_name(entry.provider)}}
        self.events.node(
            node, "Normal", names.EVENT_BLOCK_CLEARED, f"blocklist entry {entry_id} ({scope}) cleared by {actor}"
        )
        return True


def start_placement(
    providers: Mapping[str, Provider],
    *,
    kube: Kube,
    watch_kube: Kube,
    blocklist: Blocklist,
    workers: int = 8,
    offerings_ttl: float = 10.0,
    requeue_spread: float = 1.0,
    clock: Callable[[], float] = time.time,
    spend_interval: float = SPEND_INTERVAL,
) -> Placement:
    """Build and start placement over the providers registered on this manager."""
    placement = Placement(
        providers,
        kube=kube,
        watch_kube=watch_kube,
        blocklist=blocklist,
        workers=workers,
        offerings_ttl=offerings_ttl,
        requeue_spread=requeue_spread,
        clock=clock,
        spend_interval=spend_interval,
    )
    placement.start()
    return placement
