"""Replicas of the blocklist's cluster copy for tests: each a Blocklist with its Blockstore on one
devcluster over HTTP (`start_replicas`, which the `replicas` fixtures of
tests/placement/test_blockstore.py and tests/placement/test_blockstore_clear.py wrap). Nothing
here is a test.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from devcluster import DevCluster
from kube.client import Kube
from placement.blocklist import Blocklist
from placement.blockobject import ENTRIES
from placement.blockstore import Blockstore
from providers.base import BlockBreadth, BlockScope, Tier
from tests.support.fixtures import ROOT, kube_for
from tests.support.polling import wait_for

CANDIDATE: dict[str, Any] = {"accelerator": "h100", "tier": Tier.SPOT, "region": "us-east-1"}


def offering(provider: str = "gpu-a", region: str = "us-east-1") -> BlockScope:
    return BlockScope(
        provider, BlockBreadth.OFFERING, tier=Tier.SPOT, accelerator="h100", region=region, reason="NoCapacity: full"
    )


@dataclass
class Replica:
    blocklist: Blocklist
    store: Blockstore
    kube: Kube
    told: list[int] = field(default_factory=list)  # one per blocklist_changed call

    def blocked(self) -> bool:
        return self.blocklist.blocked("gpu-a", **CANDIDATE) is not None


def start_replicas(cluster: DevCluster) -> Iterator[Callable[..., Replica]]:
    """Start replicas on `cluster` (the BlocklistEntry CRD loaded); all stopped at the end."""
    cluster.load_manifests((ROOT / "deploy/crds/blocklistentry.yaml").read_text())
    started: list[Replica] = []

    def start(
        name: str,
        *,
        clock: Callable[[], float] = time.time,
        default_ttl: float = 300.0,
        writer_kube: Kube | None = None,
        **options: Any,
    ) -> Replica:
        blocklist = Blocklist(clock=clock, uniform=lambda: 0.0, default_ttl=default_ttl)
        kube = kube_for(cluster, user_agent=f"{name}/1")
        store = Blockstore(blocklist, writer_kube or kube, kube_for(cluster, user_agent=f"{name}/1"), **options)
        replica = Replica(blocklist, store, kube)
        blocklist.subscribe(lambda: replica.told.append(1))
        store.start()
        wait_for(store.synced.is_set, what=f"{name} listed the blocklist")
        started.append(replica)
        return replica

    yield start
    for replica in started:
        replica.store.stop(5.0)


def objects(kube: Kube) -> list[dict[str, Any]]:
    return kube.list(ENTRIES)[0]
