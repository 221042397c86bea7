"""Accrued spend survives the manager (design I6, I12): `manage.py runvnode` processes with
leader election, one fake cloud over HTTP (it outlives them), a NodePool whose one offering costs
$36 an hour (a cent a second). After `kill -9` of the manager and a fresh start, and after a
leader handoff between two replicas, the pool's published total equals price x the time the
cloud says each instance billed (its own `created_at`: the fake bills from creation) to within
one minute of accrual, a deleted Pod's settled spend is in it exactly once, and nothing is
counted twice.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster import DevCluster
from kube import names
from kube.client import Kube, NotFoundError, path_for
from kube.times import parse_rfc3339
from providers.fake.server import FakeCloudServer, start_server
from tests.support.pods import get_pod, phase_of
from tests.support.polling import wait_for
from tests.support.rigs.process import ManagerProcess

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PROVIDER = "gpu"
POOL = "acct"
PRICE = 36.0  # dollars an hour: one cent a second
MINUTE_OF_ACCRUAL = PRICE * 60 / 3600  # the bound the issue sets: $0.60
LEASE_SECONDS = 4
NODEPOOLS = path_for(names.NODEPOOL_PLURAL, group=names.NODEPOOL_GROUP, version=names.NODEPOOL_VERSION)
SCENARIO = {
    "poll_interval": 0.3,
    "regions": {"us": ["us-east-1"]},
    "offerings": [
        {"accelerator": None, "gpu_count": 0, "tier": "OnDemand", "region": "us-east-1", "hourly_price": PRICE}
    ],
}


class Manager(ManagerProcess):
    """One `runvnode` process with leader election, a short Lease and its own folder."""

    def __init__(self, name: str, cluster: DevCluster, tmp: Path) -> None:
        folder = tmp / name
        folder.mkdir()
        env = dict(
            os.environ,
            NEBULA_STATE_DIR=str(folder / "state"),
            NEBULA_DB_PATH=str(folder / "console.sqlite3"),
            NEBULA_SPEND_INTERVAL="1",
        )
        args = [
            sys.executable, str(ROOT / "manage.py"), "runvnode", f"--kubeconfig={cluster.kubeconfig_path}",
            f"--providers-file={tmp / 'providers.yaml'}", f"--provider={PROVIDER}", "--poll-interval=0.3",
            "--node-ip=127.0.0.1", "--kubelet-addr=127.0.0.1:0", "--console-addr=127.0.0.1:0", "--metrics-addr=",
            "--cluster-name=spend-survives", f"--lease-duration={LEASE_SECONDS}", "--shutdown-grace=5",
        ]  # fmt: skip
        super().__init__(args, cwd=ROOT, env=env, log=folder / "manager.log")


@pytest.fixture
def fake_cloud() -> Iterator[FakeCloudServer]:
    server = start_server(scenario=SCENARIO)
    yield server
    server.close()


@pytest.fixture
def managers(cluster: DevCluster, fake_cloud: FakeCloudServer, tmp_path: Path) -> Iterator[list[Manager]]:
    cluster.load_manifests((ROOT / "deploy/crds/nodepool.yaml").read_text())
    entry = {"backend": "providers.fake.FakeProvider", "options": {"url": fake_cloud.url}}
    (tmp_path / "providers.yaml").write_text(yaml.safe_dump({PROVIDER: entry}))
    made: list[Manager] = []
    yield made
    for manager in made:
        manager.close()


def gated_pod(name: str) -> dict[str, Any]:
    """An opted-in Pod as the webhook leaves it: placement's gate and the node taint's toleration."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {names.ENABLED_LABEL: "true", names.POOL_LABEL: POOL}},
        "spec": {
            "schedulingGates": [{"name": names.PLACEMENT_GATE}],
            "tolerations": [{"key": names.PROVIDER_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", "sleep 3600"]}],
        },
    }


def nodepool() -> dict[str, Any]:
    return {
        "apiVersion": f"{names.NODEPOOL_GROUP}/{names.NODEPOOL_VERSION}",
        "kind": names.NODEPOOL_KIND,
        "metadata": {"name": POOL},
        "spec": {"providers": [{"name": PROVIDER}], "capacityTypes": ["OnDemand"]},
    }


def spend(kube: Kube) -> dict[str, Any]:
    return dict((kube.get(f"{NODEPOOLS}/{POOL}").get("status") or {}).get("spend") or {})


def published_after(kube: Kube, moment: float) -> dict[str, Any] | None:
    """The pool's spend once a leader published it after `moment` (epoch seconds)."""
    found = spend(kube)
    at = found.get("asOf")
    return found if at and parse_rfc3339(str(at)).timestamp() > moment else None


def settled_dollars(status: dict[str, Any]) -> float:
    rows = json.loads(status["settled"])["total"] if isinstance(status["settled"], str) else status["settled"]["total"]
    return sum(float(row[2]) for row in rows)


def billed_since_creation(cloud: FakeCloudServer, kube: Kube, pod: str) -> float:
    """When the cloud created the instance of `pod` (epoch seconds): its billing began then."""
    instance_id = (get_pod(kube, pod) or {})["metadata"]["annotations"][names.INSTANCE_ID_ANNOTATION]
    record = next(r for r in cloud.cloud.instances() if r["id"] == instance_id)
    return float(record["created_at"])


def run_two_pods_and_delete_one(kube: Kube, cloud: FakeCloudServer) -> tuple[float, float]:
    """`keep` and `gone` Running on the pool; `gone` deleted after about 3 s and settled. Returns
    `keep`'s billing start and `gone`'s settled spend."""
    kube.create(NODEPOOLS, nodepool())
    for name in ("keep", "gone"):
        kube.create(path_for("pods", namespace="default"), gated_pod(name))
    wait_for(lambda: all(phase_of(kube, n) == "Running" for n in ("keep", "gone")), 90, 0.2, what="both Running")
    keep_start = billed_since_creation(cloud, kube, "keep")
    gone_start = billed_since_creation(cloud, kube, "gone")
    time.sleep(3)  # let `gone` bill a few seconds worth settling
    kube.delete(path_for("pods", namespace="default", name="gone"))
    deleted_at = time.time()

    def gone() -> bool:
        try:
            kube.get(path_for("pods", namespace="default", name="gone"))
        except NotFoundError:
            return True
        return False

    wait_for(gone, 60, 0.2, what="the deleted Pod settled and gone")
    settled_by = time.time()
    status = wait_for(lambda: published_after(kube, settled_by), 30, 0.2, what="a publication after the settle")
    settled = settled_dollars(status)
    billed = PRICE * (deleted_at - gone_start) / 3600
    assert abs(settled - billed) <= MINUTE_OF_ACCRUAL, (settled, billed)
    return keep_start, settled


def assert_exact(kube: Kube, keep_start: float, settled_before: float, after: float) -> None:
    """The published total = the settled spend (unchanged) + price x `keep`'s billed time."""
    status = wait_for(lambda: published_after(kube, after), 60, 0.2, what="the new leader publishes")
    as_of = parse_rfc3339(str(status["asOf"])).timestamp()
    settled = settled_dollars(status)
    live = PRICE * (as_of - keep_start) / 3600
    total = float(status["dollars"]["total"])
    print(
        f"total ${total:.4f}; settled ${settled:.4f}; expected live ${live:.4f}; off by ${total - settled - live:+.4f}"
    )
    assert settled == pytest.approx(settled_before, abs=1e-6)  # the deleted Pod's spend, once
    assert abs(total - settled - live) <= MINUTE_OF_ACCRUAL
    assert total <= settled_before + live + 0.02  # never more than was billed (a cent of clock rounding)


def test_I12_spend_survives_a_sigkill_of_the_manager_and_is_never_counted_twice(
    cluster: DevCluster, kube: Kube, fake_cloud: FakeCloudServer, managers: list[Manager], tmp_path: Path
) -> None:
    first = Manager("first", cluster, tmp_path)
    managers.append(first)
    first.start()
    keep_start, settled = run_two_pods_and_delete_one(kube, fake_cloud)
    first.kill()
    killed_at = time.time()
    time.sleep(3)  # the instance bills on while no manager runs
    again = Manager("again", cluster, tmp_path)
    managers.append(again)
    again.start()
    assert_exact(kube, keep_start, settled, after=killed_at + LEASE_SECONDS)
    assert phase_of(kube, "keep") == "Running"


def test_I12_spend_survives_a_leader_handoff_between_two_replicas(
    cluster: DevCluster, kube: Kube, fake_cloud: FakeCloudServer, managers: list[Manager], tmp_path: Path
) -> None:
    leader, standby = Manager("leader", cluster, tmp_path), Manager("standby", cluster, tmp_path)
    managers.extend([leader, standby])
    leader.start()
    keep_start, settled = run_two_pods_and_delete_one(kube, fake_cloud)
    standby.start()
    time.sleep(2)  # the standby is up and waits for the Lease
    leader.end_with(signal.SIGTERM)  # a handoff: the leader releases its Lease as it stops
    handed_at = time.time()
    assert_exact(kube, keep_start, settled, after=handed_at + 1)
    assert phase_of(kube, "keep") == "Running"
