"""A running manager for the console's end-to-end tests: the embedded cluster, two virtual
nodes over fake clouds (`gpu-a` healthy, `gpu-b` refusing and then unreachable), Pods whose
env comes from a Secret, a blocklist entry, an orphan, and the console's observer and runtime
installed as `manage.py runvnode` installs them."""

from __future__ import annotations

import base64
import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from console import observer as console_observer
from console import runtime
from devcluster import DevCluster
from kube import names
from kube.client import Kube, NotFoundError, path_for
from placement.blocklist import Blocklist
from providers.base import ClaimName, PodSpec, ProvisionRequest
from providers.fake import FakeProvider
from tests.support.factories import make_pod
from tests.support.fixtures import kube_for
from tests.support.polling import wait_for
from tests.support.rigs.runners import make_runner
from vnode.runner import Runner

KNOWN_SECRET = "s3cr3t-" + uuid.uuid4().hex  # the env value a Pod gets from its Secret
SCENARIO = {
    "poll_interval": 0.3,
    "offerings": [
        {"accelerator": None, "gpu_count": 0, "tier": "Spot", "region": "us-east-1", "hourly_price": 0.42},
        {"accelerator": None, "gpu_count": 0, "tier": "OnDemand", "region": "us-east-1", "hourly_price": 1.1},
    ],
}


class Records(logging.Handler):
    """Every log record of the scenario, kept for the no-secrets check."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def pod(name: str, provider: str, **annotations: str) -> dict[str, Any]:
    """A Pod bound to `nebula-<provider>` whose env TOKEN comes from the Secret `train-env`."""
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "train-env", "key": "token"}}}]
    return make_pod(
        name, provider, namespace="default", annotations=annotations, command=("sleep", "600"), container={"env": env}
    )


@dataclass
class Scenario:
    cluster: DevCluster
    kube: Kube
    providers: dict[str, FakeProvider]
    runners: dict[str, Runner]
    blocklist: Blocklist
    observer: console_observer.ConsoleObserver
    records: Records
    orphan_id: str = ""
    credentials: list[str] = field(default_factory=list)

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        items = self.kube.get(path_for("pods", namespace="default"))["items"]
        return [p for p in items if (p.get("spec") or {}).get("nodeName") == node]

    def phase_counts(self, node: str) -> dict[str, int]:
        counts: dict[str, int] = {}
        for item in self.pods_on(node):
            phase = (item.get("status") or {}).get("phase") or "Pending"
            counts[phase] = counts.get(phase, 0) + 1
        return counts


def start(tmp: Path) -> Scenario:
    records = Records()
    logging.getLogger().addHandler(records)
    cluster = DevCluster(kubeconfig_path=str(tmp / "kubeconfig"), scheduler_interval=0.05)
    cluster.start()
    kube = kube_for(cluster)
    suffix = uuid.uuid4().hex[:8]
    providers = {n: FakeProvider(n, {"cloud": f"{n}-{suffix}", "scenario": SCENARIO}) for n in ("gpu-a", "gpu-b")}
    blocklist = Blocklist()
    observer = console_observer.install()
    runners = {}
    for name, provider in providers.items():
        poll_interval = 0.3 if name == "gpu-a" else 3.0
        runners[name] = make_runner(
            cluster, provider, poll_interval=poll_interval, blocklister=blocklist, lease_renew_interval=0.5
        )
        runners[name].start()
    runtime.install(handlers=[r.handler for r in runners.values()], blocklist=blocklist)
    scenario = Scenario(cluster, kube, providers, runners, blocklist, observer, records)
    secret = {"token": base64.b64encode(KNOWN_SECRET.encode()).decode()}
    kube.create(
        path_for("secrets", namespace="default"),
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "train-env"}, "data": secret},
    )
    return scenario


def populate(scenario: Scenario) -> None:
    """Two running Pods on gpu-a, one refused on gpu-b (a blocklist entry), an orphan left
    on gpu-b, then gpu-b unreachable (its node not ready, the orphan kept as last listed)."""
    kube, cloud_b = scenario.kube, scenario.providers["gpu-b"].cloud
    priced = {names.CAPACITY_TYPE_ANNOTATION: "Spot", names.REGION_ANNOTATION: "us-east-1"}
    for name in ("train-0", "train-1"):
        kube.create(
            path_for("pods", namespace="default"),
            pod(name, "gpu-a", **priced, **{names.HOURLY_PRICE_ANNOTATION: "0.42"}),
        )
    cloud_b.refuse("capacity")
    kube.create(path_for("pods", namespace="default"), pod("refused-0", "gpu-b"))
    wait_for(lambda: scenario.phase_counts("nebula-gpu-a").get("Running") == 2)
    wait_for(lambda: scenario.blocklist.entries())
    wait_for(lambda: scenario.phase_counts("nebula-gpu-b").get("Failed") == 1)
    for name in ("train-0", "train-1"):
        try:
            connect = kube.get(path_for("secrets", namespace="default", name=f"{name}-connect"))
        except NotFoundError:
            continue
        scenario.credentials += [base64.b64decode(v).decode() for v in (connect.get("data") or {}).values()]
    cloud_b.clear()
    orphan = scenario.providers[
        "gpu-b"
    ].provision(  # as gpu-b made it: its owner, no Pod
        PodSpec(namespace="default", name="ghost", uid=str(uuid.uuid4()), container="main", image="x"),
        ProvisionRequest(claim=ClaimName("default-ghost-" + uuid.uuid4().hex[:8])),
    )
    scenario.orphan_id = orphan.instance_id
    handler_b = scenario.runners["gpu-b"].handler
    wait_for(lambda: any(i.id == orphan.instance_id for i in handler_b.inventory.last_instances().values()), timeout=10)
    cloud_b.outage()
    wait_for(lambda: handler_b.inventory.last_list_ok is False, timeout=10)


def stop(scenario: Scenario) -> None:
    for runner in scenario.runners.values():
        runner.stop(timeout=5)
    runtime.clear()
    console_observer.uninstall()
    scenario.cluster.stop()
    logging.getLogger().removeHandler(scenario.records)
