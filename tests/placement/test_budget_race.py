"""No race past a budget (design I12): 20 Pods created at once against room for 3 place exactly
3, and at no moment does the fake cloud hold a fourth live instance for the pool; in one manager
(the `stack`), and with two `manage.py runvnode --share-providers` replicas sharing the
providers (placement runs on the leader). A budgeted pool refuses an unpriced offering, and
places on it once `allowUnpriced` is set."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster import DevCluster
from kube import names
from kube.client import Kube, path_for
from placement.blocklist import Blocklist
from providers.fake import FakeProvider
from providers.fake.server import FakeCloudServer, start_server
from tests.support.fixtures import ROOT
from tests.support.polling import wait_for
from tests.support.rigs.managers import LIVE, Rig, shares
from tests.support.rigs.placement import (
    Stack,
    events_for,
    h100_pod_template,
    nodepool,
    pods_of,
    provider_of,
    start_nodes,
    stop_nodes,
)
from tests.support.servers.tls import TlsWsgiServer

PODS = path_for("pods", namespace="default")
POOLS = path_for(names.NODEPOOL_PLURAL, group=names.NODEPOOL_GROUP, version=names.NODEPOOL_VERSION)


class LiveCount:
    """Samples `count()` (live instances) every few milliseconds in a thread: the most seen."""

    def __init__(self, count: Callable[[], int]) -> None:
        self.count, self.most, self.samples = count, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LiveCount:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._sample()  # the moment the block ends is one too: a starved thread may not have seen it

    def _sample(self) -> None:
        self.most = max(self.most, self.count())
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self._sample()


def live(instances: list[dict[str, Any]]) -> int:
    return sum(1 for i in instances if i["state"] in LIVE)


def gated_pod(pool: str, name: str, *, accelerator: str = "H100", gpus: str = "8") -> dict[str, Any]:
    """An opted-in Pod that already carries placement's gate and the virtual-node toleration
    (what the webhook adds), so no webhook is needed."""
    template = h100_pod_template(pool, name.rsplit("-", 1)[0])
    labels = dict(template["metadata"]["labels"], **{names.ACCELERATOR_LABEL: accelerator})
    container = dict(template["spec"]["containers"][0], resources={"limits": {"nvidia.com/gpu": gpus}})
    spec = {
        "containers": [container],
        "schedulingGates": [{"name": names.PLACEMENT_GATE}],
        "tolerations": [{"key": names.PROVIDER_KEY, "operator": "Exists", "effect": "NoSchedule"}],
    }
    return {"metadata": {"name": name, "labels": labels}, "spec": spec}


def create_at_once(kube: Kube, pods: list[dict[str, Any]]) -> None:
    """Create every Pod from its own thread, released together."""
    start = threading.Barrier(len(pods))

    def create(pod: dict[str, Any]) -> None:
        start.wait()
        kube.create(PODS, pod)

    threads = [threading.Thread(target=create, args=(pod,)) for pod in pods]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)


def placed(kube: Kube, app: str) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods_of(kube, app) if provider_of(p))


def held(kube: Kube, app: str) -> set[str]:
    return {
        e["involvedObject"]["name"]
        for e in events_for(kube, names.EVENT_BUDGET_EXCEEDED)
        if e["involvedObject"]["name"].startswith(f"{app}-")
    }


def test_I12_no_instance_is_bought_past_a_budget_when_twenty_pods_race_for_room_for_three(
    cluster: DevCluster, kube: Kube, stack: Stack
) -> None:
    pool = nodepool("race", providers=["gpu-a"], capacity_types=["Spot"])
    pool["spec"]["budget"] = {"maxHourlyCost": 30}  # three at $10/h
    cluster.apply_manifest(pool)
    cloud = stack.providers["gpu-a"].cloud
    with LiveCount(lambda: live(cloud.instances())) as watch:
        create_at_once(kube, [gated_pod("race", f"race-{i}") for i in range(20)])
        wait_for(lambda: len(held(kube, "race")) == 17, what="seventeen Pods held by the budget")
        assert len(placed(kube, "race")) == 3
        wait_for(lambda: live(cloud.instances()) == 3, what="three instances")
    assert watch.samples > 10 and watch.most == 3
    assert stack.placement.controller.budgets.state("race")[:2][1] == 3


@pytest.fixture
def unpriced(cluster: DevCluster, webhook: TlsWsgiServer) -> Iterator[Stack]:
    """One fake provider `gpu-u` whose one A100 offering has no price."""
    cluster.load_manifests((ROOT / "deploy/crds/nodepool.yaml").read_text())
    scenario = {
        "poll_interval": 0.2,
        "regions": {"us": ["us-east-1"]},
        "offerings": [{"accelerator": "A100", "gpu_count": 1, "tier": "Spot", "region": "us-east-1"}],
    }
    providers = {"gpu-u": FakeProvider("gpu-u", {"cloud": f"gpu-u-{uuid.uuid4().hex[:8]}", "scenario": scenario})}
    nodes = start_nodes(cluster, providers, Blocklist())
    assert nodes.placement is not None
    yield Stack(providers, nodes.blocklist, nodes.runners, nodes.placement)
    stop_nodes(nodes)


def test_a_budgeted_pool_refuses_an_unpriced_offering_until_allow_unpriced(
    cluster: DevCluster, kube: Kube, unpriced: Stack
) -> None:
    pool = nodepool("dark", providers=["gpu-u"], capacity_types=["Spot"])
    pool["spec"]["budget"] = {"maxHourlyCost": 100}
    cluster.apply_manifest(pool)
    kube.create(PODS, gated_pod("dark", "dark-0", accelerator="A100", gpus="1"))
    message = wait_for(
        lambda: [e["message"] for e in events_for(kube, names.EVENT_NO_CANDIDATE) if "dark-0" in str(e)],
        what="the NoCandidate Event",
    )[0]
    assert message.startswith("the pool's spec.budget refuses unpriced offerings (spec.budget.allowUnpriced: true")
    assert "gpu-u/a100 x1 Spot in us-east-1 unpriced" in message
    assert placed(kube, "dark") == [] and unpriced.providers["gpu-u"].cloud.instances() == []

    kube.patch(f"{POOLS}/dark", {"spec": {"budget": {"maxHourlyCost": 100, "allowUnpriced": True}}})
    assert wait_for(lambda: placed(kube, "dark"), what="placed once unpriced offerings are allowed") == ["dark-0"]
    annotations = kube.get(f"{PODS}/dark-0")["metadata"]["annotations"]
    assert names.HOURLY_PRICE_ANNOTATION not in annotations  # unknown, never zero


@pytest.fixture
def cloud() -> Iterator[FakeCloudServer]:
    server = start_server()
    yield server
    server.close()


@pytest.mark.slow
def test_twenty_pods_against_room_for_three_place_three_with_two_replicas_sharing_the_providers(
    cluster: DevCluster, kube: Kube, cloud: FakeCloudServer, tmp_path: Path
) -> None:
    """Two replicas each hold one of the two providers; the leader's placement reserves for
    both (its fake cloud sells H100 Spot at $34.41/h: $110/h is room for three)."""
    cluster.load_manifests((ROOT / "deploy/crds/nodepool.yaml").read_text())
    pool = nodepool("shared", providers=["p0", "p1"], capacity_types=["Spot"])
    pool["spec"]["budget"] = {"maxHourlyCost": 110}
    cluster.apply_manifest(pool)
    assert cluster.kubeconfig_path is not None
    rig = Rig(cluster.kubeconfig_path, cloud, tmp_path, ["p0", "p1"], lease=4, poll=0.5)
    try:
        managers = [rig.manager(name) for name in ("a", "b")]
        for manager in managers:
            wait_for(manager.learn_identity, 60, 0.2, what=f"{manager.name} shares")
        identities = {m.identity for m in managers}
        wait_for(lambda: shares(kube, ["p0", "p1"]) == dict.fromkeys(identities, 1), 60, 0.2, what="one provider each")
        with LiveCount(lambda: live(cloud.cloud.instances())) as watch:
            create_at_once(kube, [gated_pod("shared", f"shared-{i}") for i in range(20)])
            wait_for(lambda: len(held(kube, "shared")) == 17, 90, 0.2, what="seventeen Pods held by the budget")
            assert len(placed(kube, "shared")) == 3
            wait_for(lambda: live(cloud.cloud.instances()) == 3, 60, 0.2, what="three instances")
        assert watch.most == 3
    finally:
        rig.close()
