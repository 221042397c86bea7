"""The blocklist shared by real `manage.py runvnode --share-providers` processes (I6): three
replicas on one embedded cluster and one fake cloud, each serving one provider. A refusal seen
by a replica that does not lead gets its pool's TTL there and is honoured by placement on the
leader, and still by the next leader once the first is SIGKILLed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster import DevCluster
from kube import names
from kube.client import Kube, path_for
from placement.blockobject import ENTRIES
from providers.fake.server import FakeCloudServer, start_server
from tests.support.factories import make_pod
from tests.support.fixtures import ROOT
from tests.support.polling import wait_for
from tests.support.rigs.managers import Rig, node_holders, shares
from tests.support.rigs.placement import nodepool, provider_of
from tests.support.servers.tls import TlsWsgiServer

pytestmark = pytest.mark.slow

LEASE = 4  # seconds
POLL = 0.5
POOL = "shared"


@pytest.fixture
def cloud() -> Iterator[FakeCloudServer]:
    server = start_server()
    yield server
    server.close()


def leader(kube: Kube) -> str:
    lease = kube.get(path_for("leases", namespace="default", name="nebula-manager", group="coordination.k8s.io"))
    return str(lease["spec"].get("holderIdentity") or "")


def opted_in(name: str) -> dict[str, Any]:
    pod = make_pod(name, "unused", labels={"app": name, names.ENABLED_LABEL: "true", names.POOL_LABEL: POOL})
    del pod["spec"]["nodeSelector"]
    return pod


def placed_on(kube: Kube, name: str) -> str | None:
    return provider_of(kube.get(path_for("pods", namespace="default", name=name)))


def phase(kube: Kube, name: str) -> str | None:
    return (kube.get(path_for("pods", namespace="default", name=name)).get("status") or {}).get("phase")


def test_I6_a_refusal_on_a_replica_that_does_not_lead_is_honoured_by_every_leader(
    cluster: DevCluster, kube: Kube, cloud: FakeCloudServer, webhook: TlsWsgiServer, tmp_path: Path
) -> None:
    for crd in ("nodepool.yaml", "blocklistentry.yaml"):
        cluster.load_manifests((ROOT / "deploy/crds" / crd).read_text())
    assert cluster.kubeconfig_path is not None
    aliases = ["p0", "p1", "p2"]
    rig = Rig(cluster.kubeconfig_path, cloud, tmp_path, aliases, lease=LEASE, poll=POLL)
    try:
        managers = [rig.manager(name) for name in ("a", "b", "c")]
        for manager in managers:
            wait_for(manager.learn_identity, 60, 0.2, what=f"{manager.name} shares")
        identities = {m.identity for m in managers}
        wait_for(lambda: shares(kube, aliases) == dict.fromkeys(identities, 1), 60, 0.2, what="one provider each")
        first_leader = wait_for(lambda: leader(kube), 30, what="a leader")
        holders = node_holders(kube, aliases)
        refuser = next(a for a in aliases if holders[a] != first_leader)  # served by a replica that does not lead
        fallback = next(a for a in aliases if a != refuser)
        pool = nodepool(POOL, providers=[refuser, fallback], capacity_types=["OnDemand"], ttl="17m")
        cluster.apply_manifest(pool)
        # A Pod of the pool bound straight to the refuser's node; Unauthorized blocks the whole provider.
        refused = make_pod("refused", refuser, labels={names.POOL_LABEL: POOL})
        kube.create(path_for("pods", namespace="default"), refused)
        cloud.cloud.refuse("auth", count=1)
        wait_for(lambda: phase(kube, "refused") == "Failed", 60, what="the refused Pod fails")
        (entry,) = wait_for(lambda: kube.list(ENTRIES)[0], 30, what="the refusal as a BlocklistEntry")
        spec = entry["spec"]
        assert (spec["provider"], spec["breadth"], spec["pool"]) == (refuser, "provider", POOL)
        assert 17 * 60 - 10 <= spec["ttlSeconds"] <= 17 * 60 + 31, "the pool's TTL, from a replica that does not lead"

        kube.create(path_for("pods", namespace="default"), opted_in("placed-1"))
        assert wait_for(lambda: placed_on(kube, "placed-1"), 60, what="placement places placed-1") == fallback

        victim = next(m for m in managers if m.identity == first_leader)
        victim.kill()
        wait_for(lambda: leader(kube) not in ("", first_leader), 60, 0.2, what="another replica leads")
        kube.create(path_for("pods", namespace="default"), opted_in("placed-2"))
        assert wait_for(lambda: placed_on(kube, "placed-2"), 60, what="the new leader places placed-2") == fallback
        assert len(kube.list(ENTRIES)[0]) == 1
    finally:
        rig.close()
