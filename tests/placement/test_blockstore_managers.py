"""Replicas that share one truth (I6), end to end: three real `manage.py runvnode
--share-providers` processes on one embedded cluster and one fake cloud, each serving one
provider, the invariants of tests/vnode/test_invariants.py sampled throughout
(`tests.support.rigs.managers.InvariantWatch`).

- A refusal seen by a replica that does not lead gets its pool's TTL there and is honoured by
  placement on the leader, and still by the next leader once the first is SIGKILLed.
- The REST API of every replica (a standby's console forwards to the leader's) lists every Pod
  of every provider and the same blocklist, before the kill and after it.
- A clear sent to a replica that does not lead clears the entry for all: the object is gone,
  every console's blocklist is empty, and placement uses the provider again.
"""

from __future__ import annotations

import http.client
import json
import re
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
from tests.support.rigs.managers import InvariantWatch, Rig, SharedManager, node_holders, running, shares
from tests.support.rigs.placement import nodepool, provider_of
from tests.support.servers.tls import TlsWsgiServer

pytestmark = pytest.mark.slow

LEASE = 4  # seconds
POLL = 0.5
POOL = "shared"
CONSOLE = re.compile(r"console (http://[\d.]+:\d+)")


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


def console_of(manager: SharedManager) -> str | None:
    found = CONSOLE.findall(manager.log.read_text(errors="replace"))
    return found[-1] if found else None


def call(url: str, method: str, path: str, token: str) -> tuple[int, Any]:
    """One request to a replica's console (a standby relays it to the leader's)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(method, path, headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
        response = connection.getresponse()
        body = response.read()
        return response.status, json.loads(body) if body else None
    finally:
        connection.close()


def rows(url: str, resource: str, token: str) -> list[dict[str, Any]] | None:
    """/api/<resource>/ (one page of up to 1000 rows); None while the console cannot answer."""
    status, body = call(url, "GET", f"/api/{resource}/?limit=1000", token)
    return body["results"] if status == 200 else None


def lists_everything(url: str, token: str, pods: set[str], blocks: set[str]) -> bool:
    """The console at `url` lists (at least) every Pod in `pods` and exactly the entries `blocks`."""
    listed, blocked = rows(url, "pods", token), rows(url, "blocklist", token)
    if listed is None or blocked is None:
        return False
    return {row["name"] for row in listed} >= pods and {row["id"] for row in blocked} == blocks


def test_I6_a_refusal_on_a_replica_that_does_not_lead_is_honoured_by_every_leader_and_every_console(
    cluster: DevCluster, kube: Kube, cloud: FakeCloudServer, webhook: TlsWsgiServer, tmp_path: Path
) -> None:
    for crd in ("nodepool.yaml", "blocklistentry.yaml"):
        cluster.load_manifests((ROOT / "deploy/crds" / crd).read_text())
    assert cluster.kubeconfig_path is not None
    token = cluster.token  # the API server's admin: its TokenReview and SubjectAccessReview allow all
    aliases = ["p0", "p1", "p2"]
    pods = path_for("pods", namespace="default")
    rig = Rig(cluster.kubeconfig_path, cloud, tmp_path, aliases, lease=LEASE, poll=POLL)
    try:
        managers = [rig.manager(name) for name in ("a", "b", "c")]
        for manager in managers:
            wait_for(manager.learn_identity, 60, 0.2, what=f"{manager.name} shares")
        identities = {m.identity for m in managers}
        wait_for(lambda: shares(kube, aliases) == dict.fromkeys(identities, 1), 60, 0.2, what="one provider each")
        first_leader = wait_for(lambda: leader(kube), 30, what="a leader")
        consoles = {m.identity: wait_for(lambda m=m: console_of(m), 30, what=f"{m.name}'s console") for m in managers}
        holders = node_holders(kube, aliases)
        refuser = next(a for a in aliases if holders[a] != first_leader)  # served by a replica that does not lead
        fallback = next(a for a in aliases if a != refuser)
        pool = nodepool(POOL, providers=[refuser, fallback], capacity_types=["OnDemand"], ttl="17m")
        cluster.apply_manifest(pool)
        with InvariantWatch(kube, cloud) as watch:
            direct = {f"direct-{alias}" for alias in aliases}  # a Pod on every provider, whoever serves it
            for alias in aliases:
                kube.create(pods, make_pod(f"direct-{alias}", alias))
            wait_for(lambda: running(kube, direct), 90, 0.2, what="a Pod Running on every provider")
            # A Pod of the pool bound straight to the refuser's node; Unauthorized blocks the whole provider.
            refused = make_pod("refused", refuser, labels={names.POOL_LABEL: POOL})
            kube.create(pods, refused)
            cloud.cloud.refuse("auth", count=1)
            wait_for(lambda: phase(kube, "refused") == "Failed", 60, what="the refused Pod fails")
            (entry,) = wait_for(lambda: kube.list(ENTRIES)[0], 30, what="the refusal as a BlocklistEntry")
            spec, entry_id = entry["spec"], entry["metadata"]["name"]
            assert (spec["provider"], spec["breadth"], spec["pool"]) == (refuser, "provider", POOL)
            assert 17 * 60 - 10 <= spec["ttlSeconds"] <= 17 * 60 + 31, (
                "the pool's TTL, from a replica that does not lead"
            )

            kube.create(pods, opted_in("placed-1"))
            assert wait_for(lambda: placed_on(kube, "placed-1"), 60, what="placement places placed-1") == fallback
            everyone = direct | {"refused", "placed-1"}
            for identity, url in consoles.items():
                wait_for(
                    lambda u=url: lists_everything(u, token, everyone, {entry_id}),
                    60,
                    0.2,
                    what=f"the console of {identity} lists every Pod and the entry",
                )

            victim = next(m for m in managers if m.identity == first_leader)
            victim.kill()
            wait_for(lambda: leader(kube) not in ("", first_leader), 60, 0.2, what="another replica leads")
            kube.create(pods, opted_in("placed-2"))
            assert wait_for(lambda: placed_on(kube, "placed-2"), 60, what="the new leader places placed-2") == fallback
            assert len(kube.list(ENTRIES)[0]) == 1
            survivors = [m for m in managers if m is not victim]
            everyone |= {"placed-2"}
            for manager in survivors:
                wait_for(
                    lambda u=consoles[manager.identity]: lists_everything(u, token, everyone, {entry_id}),
                    60,
                    0.2,
                    what=f"after the kill, the console of {manager.name} lists every Pod and the entry",
                )

            # A clear sent to the replica that does not lead (its console relays it) clears it for all.
            standby = next(m for m in survivors if m.identity != leader(kube))
            status, _ = call(consoles[standby.identity], "DELETE", f"/api/blocklist/{entry_id}/", token)
            assert status == 204
            wait_for(lambda: not kube.list(ENTRIES)[0], 30, 0.2, what="the entry gone from the cluster")
            for manager in survivors:
                wait_for(
                    lambda u=consoles[manager.identity]: lists_everything(u, token, everyone, set()),
                    30,
                    0.2,
                    what=f"the console of {manager.name} shows the entry cleared",
                )
            kube.create(pods, opted_in("placed-3"))
            assert wait_for(lambda: placed_on(kube, "placed-3"), 60, what="placement places placed-3") == refuser
            wait_for(lambda: running(kube, direct | {"placed-1", "placed-2", "placed-3"}), 90, 0.2, what="all Running")
        assert watch.violations == []
    finally:
        rig.close()
