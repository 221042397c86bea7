"""`/metrics/resource` (`vnode.stats.resourcemetrics`): the kubelet's resource-metrics exposition,
line for line (HELP/TYPE, sorted families and series, Go float format, millisecond
timestamps), accepted by `promtool check metrics` and the Prometheus client's parser."""

from __future__ import annotations

import shutil
import subprocess
from datetime import UTC, datetime

import pytest
from prometheus_client.parser import text_string_to_metric_families

from providers.base import ResourceUsage
from vnode.stats.resourcemetrics import go_float, resource_text
from vnode.stats.usage import ContainerUsage, NodeUsage, PodUsage

STAMP = datetime(2026, 3, 1, 12, 0, 0, 500000, tzinfo=UTC)
MILLIS = "1772366400500"
STARTED = datetime(2026, 3, 1, 11, 0, 0, tzinfo=UTC)


def _node(failed: int = 0) -> NodeUsage:
    usage = ResourceUsage(250_000_000, 50 << 20, 12_500_000_000, 40 << 20, STAMP)
    web = PodUsage("default", "web", "u1", STARTED, (ContainerUsage("main", STARTED, usage),))
    return NodeUsage("nebula-local", (web,), failed)


def test_the_text_is_the_kubelets_line_for_line() -> None:
    text = resource_text(_node())
    series = [line for line in text.splitlines() if not line.startswith("#")]
    labels = 'container="main",namespace="default",pod="web"'
    assert series == [
        f"container_cpu_usage_seconds_total{{{labels}}} 12.5 {MILLIS}",
        f"container_memory_working_set_bytes{{{labels}}} 5.24288e+07 {MILLIS}",
        f"container_start_time_seconds{{{labels}}} 1.7723628e+09",
        f"node_cpu_usage_seconds_total 12.5 {MILLIS}",
        f"node_memory_working_set_bytes 5.24288e+07 {MILLIS}",
        f'pod_cpu_usage_seconds_total{{namespace="default",pod="web"}} 12.5 {MILLIS}',
        f'pod_memory_working_set_bytes{{namespace="default",pod="web"}} 5.24288e+07 {MILLIS}',
        "resource_scrape_error 0",
        "scrape_error 0",
    ]
    assert (
        "# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds" in text
    )
    assert "# TYPE container_cpu_usage_seconds_total counter" in text
    assert "# TYPE container_memory_working_set_bytes gauge" in text


def test_a_pod_that_could_not_be_measured_sets_the_scrape_error() -> None:
    text = resource_text(_node(failed=1))
    assert "\nresource_scrape_error 1\n" in text and "\nscrape_error 1\n" in text


def test_an_empty_node_still_answers_every_family_and_no_error() -> None:
    text = resource_text(NodeUsage("nebula-local"))
    assert [line for line in text.splitlines() if not line.startswith("#")] == [
        "resource_scrape_error 0",
        "scrape_error 0",
    ]
    assert text.count("# TYPE ") == 9


def test_the_prometheus_parser_reads_the_values_back() -> None:
    families = {f.name: f for f in text_string_to_metric_families(resource_text(_node()))}
    cpu = families["container_cpu_usage_seconds"].samples[0]  # the parser strips a counter's _total
    assert cpu.labels == {"container": "main", "namespace": "default", "pod": "web"}
    assert cpu.value == 12.5 and cpu.timestamp == pytest.approx(1772366400.5)
    assert families["node_memory_working_set_bytes"].samples[0].value == 50 << 20


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_accepts_the_text() -> None:
    done = subprocess.run(
        ["promtool", "check", "metrics"], input=resource_text(_node()).encode(), capture_output=True, timeout=30
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0"),
        (1.0, "1"),
        (12.5, "12.5"),
        (123456.0, "123456"),
        (1234567.0, "1.234567e+06"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (1706530212.548, "1.706530212548e+09"),
        (-3.5e-7, "-3.5e-07"),
    ],
)
def test_floats_are_written_as_go_writes_them(value: float, text: str) -> None:
    assert go_float(value) == text


def test_label_values_are_escaped() -> None:
    odd = PodUsage("ns", 'a"b\\c', "u", None, (ContainerUsage("x\ny", None, ResourceUsage(1, 1, 1, 1, STAMP)),))
    text = resource_text(NodeUsage("n", (odd,)))
    assert 'container="x\\ny",namespace="ns",pod="a\\"b\\\\c"' in text
