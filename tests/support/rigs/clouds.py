"""The GPU-clouds rig: the devcluster with the placement webhook, a fake Modal and a fake
RunPod (each spoken to only by its vendor's SDK), a `modal` and a `runpod` virtual node with
placement over them, and the kubelet API on a real TLS listener so kubectl's logs and exec
reach the providers. `restart()` stands for the manager restarted: new provider objects,
Runners and placement on the same clouds and cluster.

Used by tests/placement/test_e2e_gpu_clouds.py; nothing here is a test.
"""

from __future__ import annotations

import importlib
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devcluster import DevCluster
from kube import names
from kube.client import Kube, NotFoundError, path_for
from placement.blocklist import Blocklist
from placement.wiring import Placement
from providers.base import Provider
from providers.modal import ModalProvider
from providers.modal.fake import FakeModal, start_fake_modal
from providers.owner import Owner
from providers.runpod import RunPodProvider
from tests.support.clients.kubectl import KUBECTL_137
from tests.support.fixtures import ROOT, kube_for
from tests.support.polling import wait_for
from tests.support.rigs.runners import make_runner
from vnode.handler import Handler
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.server import ListenerConfig, Listeners
from vnode.poolpolicy import PoolPolicies
from vnode.runner import Runner

MODAL_REGION = "us-east"
RUNPOD_REGION = "US-TX-3"
POLL = 0.5  # seconds between the vnodes' list() calls


def credentials(folder: Path, values: dict[str, str]) -> str:
    """A mounted-Secret-like folder: one file per key."""
    folder.mkdir(parents=True, exist_ok=True)
    for key, value in values.items():
        (folder / key).write_text(value)
    return str(folder)


@dataclass
class CloudStack:
    cluster: DevCluster
    kube: Kube
    modal: FakeModal
    runpod: Any  # tests.providers.runpod.fake_runpod.FakeRunPod (imported by name: see `start`)
    folder: Path
    cluster_name: str = "cluster-a"
    blocklist: Blocklist = field(default_factory=Blocklist)
    providers: dict[str, Provider] = field(default_factory=dict)
    runners: list[Runner] = field(default_factory=list)
    placement: Placement | None = None
    registry: HandlerRegistry = field(default_factory=HandlerRegistry)
    listeners: Listeners | None = None

    @property
    def kubeconfig(self) -> str:
        assert self.cluster.kubeconfig_path is not None
        return self.cluster.kubeconfig_path

    def make_providers(self, cluster_name: str) -> dict[str, Provider]:
        """Provider objects owned by `cluster_name` on the shared clouds."""
        modal_creds = credentials(
            self.folder / "modal-creds",
            {"MODAL_TOKEN_ID": self.modal.token_id, "MODAL_TOKEN_SECRET": self.modal.token_secret},
        )
        runpod_creds = credentials(self.folder / "runpod-creds", {"RUNPOD_API_KEY": self.runpod.api_key})
        modal_options = {"server_url": self.modal.url, "credentials_dir": modal_creds, "regions": [MODAL_REGION],
                         "poll_interval": POLL, "log_poll_interval": 0.2}  # fmt: skip
        runpod_options = {"api_base_url": self.runpod.url, "credentials_dir": runpod_creds,
                          "regions": [RUNPOD_REGION], "poll_interval": POLL}  # fmt: skip
        return {
            "modal": ModalProvider("modal", modal_options, owner=Owner(cluster_name, "modal")),
            "runpod": RunPodProvider("runpod", runpod_options, owner=Owner(cluster_name, "runpod")),
        }

    def start_manager(self) -> None:
        """Providers, Runners (each registered with the kubelet API) and placement."""
        assert self.listeners is not None
        self.providers = self.make_providers(self.cluster_name)
        self.placement = Placement(
            self.providers, kube=kube_for(self.cluster), watch_kube=kube_for(self.cluster), blocklist=self.blocklist,
            requeue_spread=0.1,
        )  # fmt: skip
        pools: PoolPolicies = self.placement.pools
        self.runners = [
            make_runner(
                self.cluster,
                provider,
                blocklister=self.blocklist,
                pools=pools,
                poll_interval=POLL,
                kubelet_port=self.listeners.kubelet_port,
            )  # fmt: skip
            for provider in self.providers.values()
        ]
        for runner in self.runners:
            runner.start()
            self.registry.add(runner.handler)
        self.placement.start()

    def stop_manager(self) -> None:
        if self.placement is not None:
            self.placement.stop(timeout=10)
            self.placement = None
        for runner in self.runners:
            self.registry.remove(runner.handler)
            runner.stop(timeout=10)
        self.runners = []
        for provider in self.providers.values():
            close = getattr(provider, "close", None)
            if close is not None:
                close()

    def restart(self) -> None:
        """The manager restarted: nothing of the old objects is kept but the clouds' state."""
        self.stop_manager()
        self.blocklist = Blocklist()
        self.start_manager()

    def kubectl(
        self, *args: str, input: bytes | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([KUBECTL_137, "--kubeconfig", self.kubeconfig, *args], input=input,
                              capture_output=True, timeout=timeout, env=self.env())  # fmt: skip

    def env(self) -> dict[str, str]:
        return dict(os.environ, KUBECONFIG=self.kubeconfig, HOME=os.path.dirname(self.kubeconfig), TERM="dumb")

    def pod_or_none(self, name: str) -> dict[str, Any] | None:
        """The Pod's status; None once it is deleted."""
        try:
            return self.kube.get(path_for("pods", namespace="default", name=name)).get("status") or {}
        except NotFoundError:
            return None

    def handlers(self) -> list[Handler]:
        return [runner.handler for runner in self.runners]

    def polled(self, times: int = 3) -> None:
        """Wait until every vnode has listed its provider `times` more times."""
        start = {id(h): h.inventory.lists_ok for h in self.handlers()}
        wait_for(lambda: all(h.inventory.lists_ok >= start[id(h)] + times for h in self.handlers()), 60)

    @contextmanager
    def second_manager(self, other: DevCluster, *, cluster_name: str) -> Iterator[CloudStack]:
        """Another cluster's manager on the same Modal app and RunPod account."""
        stack = CloudStack(other, kube_for(other), self.modal, self.runpod, self.folder / cluster_name,
                           cluster_name=cluster_name)  # fmt: skip
        with serving(stack):
            yield stack


def pool(name: str, providers: list[str], capacity_types: list[str], *, timeout: str = "10m") -> dict[str, Any]:
    return {
        "apiVersion": f"{names.NODEPOOL_GROUP}/{names.NODEPOOL_VERSION}",
        "kind": names.NODEPOOL_KIND,
        "metadata": {"name": name},
        "spec": {
            "providers": [{"name": p} for p in providers],
            "capacityTypes": capacity_types,
            "strategy": "Ordered",
            "failover": {"blocklistTTL": "5m"},
            "provisioningTimeout": timeout,
        },
    }


@contextmanager
def serving(stack: CloudStack) -> Iterator[CloudStack]:
    """`stack`'s manager with its kubelet API listener, stopped on exit."""
    stack.cluster.load_manifests((ROOT / "deploy/crds/nodepool.yaml").read_text())
    stack.cluster.load_manifests((ROOT / "deploy/crds/blocklistentry.yaml").read_text())
    stack.listeners = Listeners(stack.registry, kubelet=ListenerConfig("127.0.0.1", 0), node_ip="127.0.0.1")
    stack.listeners.start()
    try:
        stack.start_manager()
        yield stack
    finally:
        stack.stop_manager()
        stack.listeners.stop()


@contextmanager
def start_cloudstack(cluster: DevCluster, folder: Path) -> Iterator[CloudStack]:
    """Both fake clouds and cluster-a's manager on `cluster` (which has the placement webhook)."""
    pods = importlib.import_module("tests.providers.runpod.runpod_pods")
    reason = pods.can_run_pods()
    if reason:
        pytest.skip(reason)
    # By name: mypy on this file would take tests/providers/runpod for the SDK's `runpod`.
    fake_runpod = importlib.import_module("tests.providers.runpod.fake_runpod")
    with start_fake_modal() as modal, fake_runpod.start_fake_runpod(folder=folder / "runpod") as runpod:
        with serving(CloudStack(cluster, kube_for(cluster), modal, runpod, folder)) as stack:
            yield stack
