"""Fixtures for placement: a DevCluster with the NodePool CRD, the console app serving the
admission webhook over real TLS (registered with the devcluster), two fake providers
`gpu-a` (cheap) and `gpu-b` (dear) with in-process Runners, and placement itself."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.wsgi import get_wsgi_application
from placement_fixtures import Stack, TlsWsgiServer, h100_scenario, webhook_configuration

from devcluster import DevCluster
from kube.client import Kube, load_api_client
from placement.blocklist import Blocklist
from placement.wiring import start_placement
from providers.fake import FakeProvider
from vnode.runner import Runner

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    with DevCluster(kubeconfig_path=str(tmp_path / "kubeconfig"), scheduler_interval=0.05) as running:
        running.load_manifests((ROOT / "deploy/crds/nodepool.yaml").read_text())
        yield running


def _kube(cluster: DevCluster) -> Kube:
    assert cluster.kubeconfig_path is not None
    return Kube(load_api_client(cluster.kubeconfig_path))


@pytest.fixture
def kube(cluster: DevCluster) -> Kube:
    return _kube(cluster)


@pytest.fixture
def console() -> Iterator[TlsWsgiServer]:
    with TlsWsgiServer(get_wsgi_application()) as server:
        yield server


@pytest.fixture
def webhook(cluster: DevCluster, console: TlsWsgiServer) -> TlsWsgiServer:
    """The console app's /webhooks/pods, registered as the cluster's mutating webhook."""
    cluster.apply_manifest(webhook_configuration(console.url, console.credentials.ca_pem))
    return console


@pytest.fixture
def stack(cluster: DevCluster, webhook: TlsWsgiServer) -> Iterator[Stack]:
    """gpu-a and gpu-b virtual nodes plus placement, sharing one Blocklist."""
    suffix = uuid.uuid4().hex[:8]
    providers = {
        name: FakeProvider(name, {"cloud": f"{name}-{suffix}", "scenario": h100_scenario(name)})
        for name in ("gpu-a", "gpu-b")
    }
    blocklist = Blocklist()
    runners = [
        Runner(
            provider,
            kube=_kube(cluster),
            watch_kube=_kube(cluster),
            node_ip="127.0.0.1",
            kubelet_port=10250,
            poll_interval=0.2,
            blocklister=blocklist,
            workers=4,
            lease_renew_interval=0.3,
        )
        for provider in providers.values()
    ]
    for runner in runners:
        runner.start()
    placement = start_placement(
        providers, kube=_kube(cluster), watch_kube=_kube(cluster), blocklist=blocklist, requeue_spread=0.1
    )
    yield Stack(providers, blocklist, runners, placement)
    placement.stop(timeout=5)
    for runner in runners:
        runner.stop(timeout=5)
