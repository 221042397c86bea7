"""The devcluster's embedded metrics-server: parsing a kubelet's /metrics/resource, rates
from two points as metrics-server's storage keeps them, nodes that share one kubelet
endpoint, and `metrics.k8s.io/v1beta1` over real HTTPS (discovery, NodeMetrics and PodMetrics
list/get, namespaces, label selectors, 404s, read-only verbs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster import DevCluster
from devcluster.metricsapi import cpu_quantity, memory_quantity
from devcluster.metricsscrape import MetricsScraper, MetricsStore, Point, parse_resource_metrics
from tests.support.clients.rawhttp import Raw
from tests.support.factories import make_pod

EXPOSITION = """# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{{container="main",namespace="default",pod="web"}} {cpu} {ms}
container_cpu_usage_seconds_total{{container="main",namespace="other",pod="db"}} {cpu} {ms}
container_memory_working_set_bytes{{container="main",namespace="default",pod="web"}} 5.24288e+07 {ms}
container_memory_working_set_bytes{{container="main",namespace="other",pod="db"}} 1.048576e+06 {ms}
container_start_time_seconds{{container="main",namespace="default",pod="web"}} 1.7e+09
node_cpu_usage_seconds_total {node_cpu} {ms}
node_memory_working_set_bytes 5.3477376e+07 {ms}
resource_scrape_error 0
"""


def _text(cpu: float, seconds: float) -> str:
    return EXPOSITION.format(cpu=cpu, node_cpu=2 * cpu, ms=int(seconds * 1000))


def test_an_exposition_parses_into_node_and_container_points() -> None:
    scrape = parse_resource_metrics(_text(12.5, 1000.0))
    assert scrape.node == Point(25.0, 53477376.0, 1000.0)
    assert scrape.containers[("default", "web", "main")] == Point(12.5, 52428800.0, 1000.0, 1.7e9)
    assert set(scrape.containers) == {("default", "web", "main"), ("other", "db", "main")}
    with pytest.raises(ValueError, match="malformed"):
        parse_resource_metrics("node_cpu_usage_seconds_total{oops\n")


def test_a_rate_needs_two_later_points_of_the_same_start() -> None:
    store = MetricsStore()
    key = ("default", "web", "main")
    store.store({"n": Point(10.0, 1.0, 100.0)}, {key: Point(10.0, 2048.0, 100.0, 5.0)})
    assert store.node("n") is None and store.pod("default", "web") is None  # one point: no rate
    store.store({"n": Point(15.0, 1.0, 110.0)}, {key: Point(12.0, 4096.0, 110.0, 5.0)})
    web = store.pod("default", "web")
    assert web is not None and web["main"].nano_cores == 200_000_000 and web["main"].memory_bytes == 4096
    assert web["main"].window == 10.0
    node = store.node("n")
    assert node is not None and node.nano_cores == 500_000_000
    store.store({}, {key: Point(12.0, 4096.0, 110.0, 5.0)})  # the kubelet's cached sample again
    again = store.pod("default", "web")
    assert again is not None and again["main"].nano_cores == 200_000_000  # the older point is kept
    store.store({}, {key: Point(0.5, 4096.0, 120.0, 6.0)})  # restarted: a new counter
    assert store.pod("default", "web") is None


class Texts:
    def __init__(self, *texts: str) -> None:
        self.texts = list(texts)
        self.dialled: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int, timeout: float) -> str:
        self.dialled.append((host, port))
        return self.texts.pop(0)


@pytest.fixture
def quiet_cluster(tmp_path: Path) -> Iterator[DevCluster]:
    """A cluster whose own scraper never runs during the test: the tests feed points."""
    with DevCluster(kubeconfig_path=str(tmp_path / "kubeconfig"), metrics_interval=3600) as running:
        yield running


def _node(raw: Raw, name: str, labels: dict[str, str] | None = None) -> None:
    status, _ = raw.json("POST", "/api/v1/nodes", {"metadata": {"name": name, "labels": labels or {}}})
    assert status == 201
    status_doc = {
        "addresses": [{"type": "InternalIP", "address": "127.0.0.9"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10999}},
    }
    _, node = raw.json("GET", f"/api/v1/nodes/{name}")
    node["status"] = status_doc
    assert raw.json("PUT", f"/api/v1/nodes/{name}/status", node)[0] == 200


def _pod(raw: Raw, namespace: str, name: str, node: str, labels: dict[str, str]) -> None:
    if raw.json("GET", f"/api/v1/namespaces/{namespace}")[0] == 404:
        raw.json("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    pod = make_pod(name, labels=labels, nodeName=node)
    assert raw.json("POST", f"/api/v1/namespaces/{namespace}/pods", pod)[0] == 201


def _scraped(cluster: DevCluster) -> Texts:
    """Two scrapes 10 s apart of one endpoint that both nodes publish."""
    raw = Raw(cluster)
    _node(raw, "nebula-a", {"tier": "gold"})
    _node(raw, "nebula-b")
    _pod(raw, "default", "web", "nebula-a", {"app": "web"})
    _pod(raw, "other", "db", "nebula-b", {"app": "db"})
    texts = Texts(_text(10.0, 1000.0), _text(12.5, 1010.0))
    scraper = MetricsScraper(cluster.store, preferred_address_types=("InternalIP",), fetch=texts)
    scraper.metrics = cluster.metrics.metrics  # what the API serves
    scraper.scrape_once()
    scraper.scrape_once()
    return texts


def test_nodes_sharing_one_endpoint_are_scraped_once_and_each_counts_its_own_pods(quiet_cluster: DevCluster) -> None:
    texts = _scraped(quiet_cluster)
    assert texts.dialled == [("127.0.0.9", 10999)] * 2
    raw = Raw(quiet_cluster)
    status, a = raw.json("GET", "/apis/metrics.k8s.io/v1beta1/nodes/nebula-a")
    assert status == 200 and a["usage"] == {"cpu": "250m", "memory": "50Mi"}  # web only
    assert a["kind"] == "NodeMetrics" and a["apiVersion"] == "metrics.k8s.io/v1beta1"
    assert a["metadata"]["name"] == "nebula-a" and a["metadata"]["labels"] == {"tier": "gold"}
    assert a["timestamp"] == "1970-01-01T00:16:50Z" and a["window"] == "10s"
    _, b = raw.json("GET", "/apis/metrics.k8s.io/v1beta1/nodes/nebula-b")
    assert b["usage"] == {"cpu": "250m", "memory": "1Mi"}  # db only
    _, listed = raw.json("GET", "/apis/metrics.k8s.io/v1beta1/nodes?labelSelector=tier%3Dgold")
    assert listed["kind"] == "NodeMetricsList" and [i["metadata"]["name"] for i in listed["items"]] == ["nebula-a"]


def test_pod_metrics_by_namespace_across_all_and_by_label(quiet_cluster: DevCluster) -> None:
    _scraped(quiet_cluster)
    raw = Raw(quiet_cluster)
    status, web = raw.json("GET", "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/web")
    assert status == 200 and web["kind"] == "PodMetrics"
    assert web["metadata"]["namespace"] == "default" and web["metadata"]["labels"] == {"app": "web"}
    assert web["containers"] == [{"name": "main", "usage": {"cpu": "250m", "memory": "50Mi"}}]
    assert web["window"] == "10s" and "creationTimestamp" in web["metadata"]
    _, every = raw.json("GET", "/apis/metrics.k8s.io/v1beta1/pods")
    assert every["kind"] == "PodMetricsList"
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in every["items"]] == [
        ("default", "web"),
        ("other", "db"),
    ]
    _, in_other = raw.json("GET", "/apis/metrics.k8s.io/v1beta1/namespaces/other/pods?labelSelector=app%3Ddb")
    assert [i["metadata"]["name"] for i in in_other["items"]] == ["db"]
    _, none = raw.json("GET", "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Ddb")
    assert none["items"] == []


def test_what_has_no_metrics_is_a_404_and_the_api_is_read_only(quiet_cluster: DevCluster) -> None:
    raw = Raw(quiet_cluster)
    _node(raw, "nebula-a")
    status, body = raw.json("GET", "/apis/metrics.k8s.io/v1beta1/nodes/nebula-a")
    assert status == 404 and body["reason"] == "NotFound"
    assert body["message"] == 'nodemetrics.metrics.k8s.io "nebula-a" not found'
    status, body = raw.json("GET", "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/nope")
    assert status == 404 and body["message"] == 'podmetrics.metrics.k8s.io "nope" not found'
    assert raw.json("POST", "/apis/metrics.k8s.io/v1beta1/nodes", {"metadata": {"name": "x"}})[0] == 405
    assert raw.json("DELETE", "/apis/metrics.k8s.io/v1beta1/nodes/nebula-a")[0] == 405
    assert raw.json("GET", "/apis/metrics.k8s.io/v1beta1/pods?watch=1")[0] == 405


def test_discovery_lists_the_metrics_group_as_metrics_server_does(quiet_cluster: DevCluster) -> None:
    raw = Raw(quiet_cluster)
    _, groups = raw.json("GET", "/apis")
    metrics = next(g for g in groups["groups"] if g["name"] == "metrics.k8s.io")
    assert metrics["preferredVersion"] == {"groupVersion": "metrics.k8s.io/v1beta1", "version": "v1beta1"}
    _, resources = raw.json("GET", "/apis/metrics.k8s.io/v1beta1")
    served: dict[str, Any] = {r["name"]: r for r in resources["resources"]}
    assert served["nodes"]["kind"] == "NodeMetrics" and not served["nodes"]["namespaced"]
    assert served["pods"]["kind"] == "PodMetrics" and served["pods"]["namespaced"]
    assert served["pods"]["verbs"] == ["get", "list"]


@pytest.mark.parametrize(
    ("nano", "text"), [(0, "0"), (2_000_000_000, "2"), (250_000_000, "250m"), (1_500, "1500n"), (7_000, "7u")]
)
def test_cpu_is_a_canonical_quantity(nano: int, text: str) -> None:
    assert cpu_quantity(nano) == text


@pytest.mark.parametrize(("size", "text"), [(0, "0"), (1000, "1000"), (2048, "2Ki"), (50 << 20, "50Mi")])
def test_memory_is_a_canonical_binary_quantity(size: int, text: str) -> None:
    assert memory_quantity(size) == text
