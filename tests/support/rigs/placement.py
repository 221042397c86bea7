"""The placement rig, registered as fixtures by tests/conftest.py: `console` (the console app
over real TLS), `webhook` (it, registered as the cluster's admission webhook), `stack` (two
fake providers `gpu-a` cheap and `gpu-b` dear with Runners, and placement, sharing one
Blocklist, on a cluster with the NodePool CRD) and `alone` (placement over gpu-a, whose Node no
vnode serves); with the H100 scenarios and object factories.

Used by tests/placement, tests/console/api and tests/nebula_site/test_webhook_view.py.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from django.core.wsgi import get_wsgi_application

from devcluster import DevCluster
from kube import names
from kube.client import Kube, path_for
from nebula_site.manager import leading
from nebula_site.manager import runners as manager_runners
from placement.blocklist import Blocklist
from placement.wiring import Placement, start_placement
from providers.base import Provider
from providers.fake import FakeProvider
from tests.support.fixtures import ROOT, kube_for
from tests.support.rigs.runners import RUNNER_OPTIONS
from tests.support.servers.tls import TlsWsgiServer
from vnode.kubelet.resolve import HandlerRegistry
from vnode.runner import Runner


@dataclass
class Stack:
    """What the `stack` fixture runs: two fake providers, their Runners, placement, one Blocklist."""

    providers: dict[str, FakeProvider]
    blocklist: Blocklist
    runners: list[Runner]
    placement: Placement


H100_PRICES = {"gpu-a": {"Spot": 10.0, "OnDemand": 30.0}, "gpu-b": {"Spot": 20.0, "OnDemand": 40.0}}


def webhook_configuration(url: str, ca_pem: bytes, *, failure_policy: str = "Fail") -> dict[str, Any]:
    """The deploy/webhook manifest's shape, pointed at `url` instead of the console Service."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "nebula-placement"},
        "webhooks": [
            {
                "name": names.WEBHOOK_NAME,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": failure_policy,
                "timeoutSeconds": 10,
                "clientConfig": {"url": url + names.WEBHOOK_PATH, "caBundle": base64.b64encode(ca_pem).decode()},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
                "objectSelector": {"matchLabels": {names.ENABLED_LABEL: "true"}},
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
                    ]
                },
            }
        ],
    }


def h100_scenario(provider: str) -> dict[str, Any]:
    prices = H100_PRICES[provider]
    return {
        "poll_interval": 0.2,
        "regions": {"us": ["us-east-1"]},
        "offerings": [
            {"accelerator": None, "gpu_count": 0, "tier": "OnDemand", "region": "us-east-1", "hourly_price": 0.1},
            {
                "accelerator": "H100",
                "gpu_count": 8,
                "tiers": ["Spot", "OnDemand"],
                "regions": ["us-east-1"],
                "hourly_price": prices,
            },
        ],
    }


def nodepool(
    name: str, *, providers: list[str], capacity_types: list[str], strategy: str = "Ordered", ttl: str = "5m"
) -> dict[str, Any]:
    return {
        "apiVersion": f"{names.NODEPOOL_GROUP}/{names.NODEPOOL_VERSION}",
        "kind": names.NODEPOOL_KIND,
        "metadata": {"name": name},
        "spec": {
            "providers": [{"name": p, "regions": ["us"]} for p in providers],
            "capacityTypes": capacity_types,
            "strategy": strategy,
            "failover": {"blocklistTTL": ttl},
        },
    }


def h100_pod_template(pool: str, app: str) -> dict[str, Any]:
    return {
        "metadata": {
            "labels": {
                "app": app,
                names.ENABLED_LABEL: "true",
                names.POOL_LABEL: pool,
                names.ACCELERATOR_LABEL: "H100",
            }
        },
        "spec": {
            "containers": [{"name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]
        },
    }


def deployment(name: str, *, replicas: int, pool: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": h100_pod_template(pool, name),
        },
    }


def pods_of(kube: Kube, app: str) -> list[dict[str, Any]]:
    items, _ = kube.list(path_for("pods", namespace="default"), labelSelector=f"app={app}")
    return items


def provider_of(pod: dict[str, Any]) -> str | None:
    return ((pod.get("spec") or {}).get("nodeSelector") or {}).get(names.PROVIDER_KEY)


def tier_of(pod: dict[str, Any]) -> str | None:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(names.CAPACITY_TYPE_ANNOTATION)


def events_for(kube: Kube, reason: str) -> list[dict[str, Any]]:
    items, _ = kube.list(path_for("events", namespace="default"))
    return [e for e in items if e.get("reason") == reason]


@pytest.fixture
def console() -> Iterator[TlsWsgiServer]:
    with TlsWsgiServer(get_wsgi_application()) as server:
        yield server


@pytest.fixture
def webhook(cluster: DevCluster, console: TlsWsgiServer) -> TlsWsgiServer:
    """The console app's /webhooks/pods, registered as the cluster's mutating webhook."""
    cluster.apply_manifest(webhook_configuration(console.url, console.credentials.ca_pem))
    return console


def start_nodes(cluster: DevCluster, providers: Mapping[str, Provider], blocklist: Blocklist) -> leading.Leading:
    """The manager's `Leading` without the console: placement and one Runner per provider
    (RUNNER_OPTIONS), sharing `blocklist`, started; stop it with `stop_nodes`."""
    nodes = leading.Leading(providers, HandlerRegistry(), blocklist, RUNNER_OPTIONS, requeue_spread=0.1)
    watch = kube_for(cluster, pool_size=manager_runners.watch_pool_size(len(providers)))
    nodes.start_nodes(kube_for(cluster), watch)
    return nodes


def stop_nodes(nodes: leading.Leading) -> None:
    for step in nodes.stop_nodes_steps():
        step(5.0)


@pytest.fixture
def stack(cluster: DevCluster, webhook: TlsWsgiServer) -> Iterator[Stack]:
    """gpu-a and gpu-b virtual nodes plus placement, sharing one Blocklist, once the cluster
    serves NodePools."""
    cluster.load_manifests((ROOT / "deploy/crds/nodepool.yaml").read_text())
    cluster.load_manifests((ROOT / "deploy/crds/blocklistentry.yaml").read_text())
    suffix = uuid.uuid4().hex[:8]
    providers = {
        name: FakeProvider(name, {"cloud": f"{name}-{suffix}", "scenario": h100_scenario(name)})
        for name in ("gpu-a", "gpu-b")
    }
    nodes = start_nodes(cluster, providers, Blocklist())
    assert nodes.placement is not None
    yield Stack(providers, nodes.blocklist, nodes.runners, nodes.placement)
    stop_nodes(nodes)


@dataclass
class Alone:
    """Placement over `providers`, with `blocklist`, and the Node of gpu-a that no vnode serves."""

    providers: dict[str, FakeProvider]
    blocklist: Blocklist
    placement: Placement


@pytest.fixture
def alone(cluster: DevCluster, kube: Kube, webhook: TlsWsgiServer) -> Iterator[Alone]:
    """Placement alone: the webhook gates opted-in Pods, placement places them on gpu-a, the
    scheduler binds them to its Node (Ready, tainted, as a vnode registers it) and nothing serves
    them, so the billing record a test writes is the only one. With no kubelet to complete a
    graceful delete, tests delete with grace 0 (the spend finalizer still holds the Pod)."""
    cluster.load_manifests((ROOT / "deploy/crds/nodepool.yaml").read_text())
    cluster.load_manifests((ROOT / "deploy/crds/blocklistentry.yaml").read_text())
    provider = FakeProvider("gpu-a", {"cloud": f"alone-{uuid.uuid4().hex[:8]}", "scenario": h100_scenario("gpu-a")})
    kube.create(path_for("nodes"), unserved_node("gpu-a"))
    blocklist = Blocklist()
    placement = start_placement(
        {"gpu-a": provider}, kube=kube_for(cluster), watch_kube=kube_for(cluster), blocklist=blocklist
    )
    try:
        yield Alone({"gpu-a": provider}, blocklist, placement)
    finally:
        placement.stop()


def unserved_node(provider: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": names.node_name(provider), "labels": {names.PROVIDER_KEY: provider}},
        "spec": {"taints": [{"key": names.PROVIDER_KEY, "value": provider, "effect": "NoSchedule"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
    }
