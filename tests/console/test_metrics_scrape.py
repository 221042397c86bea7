"""A scrape of a running manager (the embedded cluster, two fake virtual nodes: gpu-a running
two priced Pods, gpu-b unreachable with an orphan) through the real metrics listener: every
series is there with the values memory holds, `promtool check metrics` finds no problem, and
every metric deploy/monitoring's alerts and dashboard read is in it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from nebula_site.manager.listeners import MetricsListener
from tests.support.clients.scrape import check_metrics, family_of, get, metric_names
from tests.support.rigs.console import Scenario

MONITORING = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"


@pytest.fixture(scope="module")
def listener(scenario: Scenario) -> Iterator[MetricsListener]:
    serving = MetricsListener("127.0.0.1", 0)
    serving.start()
    yield serving
    serving.stop()


@pytest.fixture
def staff(db: Any) -> User:
    return User.objects.create_user("operator", password="pw-operator-12345", is_staff=True, is_superuser=True)


SERIES = [
    "nebula_provisions",
    "nebula_provision_seconds",
    "nebula_terminations",
    "nebula_orphans_swept",
    "nebula_poll_seconds",
    "nebula_poll_errors",
    "nebula_placement_decisions",
    "nebula_blocklist_entries",
    "nebula_blocklist_size",
    "nebula_kubelet_streams_open",
    "nebula_api_requests",
    "nebula_provider_up",
    "nebula_orphan_instances",
    "nebula_instances_behind_finished_pods",
    "nebula_spend_dollars_per_hour",
    "nebula_unpriced_instances",
    "nebula_spend_dollars",
    "nebula_pool_hourly_spend_dollars",
    "nebula_pool_spend_today_dollars",
    "nebula_pool_spend_month_dollars",
    "nebula_pool_budget_dollars",
    "nebula_pool_instances",
    "nebula_pool_budget_instances",
    "nebula_leader",
    "process_cpu_seconds",
    "python_gc_objects_collected",
]


def test_a_scrape_carries_every_series(scenario: Scenario, listener: MetricsListener, staff: User) -> None:
    client = Client()
    client.force_login(staff)
    assert client.get("/api/pods/").status_code == 200
    status, text = get(f"http://127.0.0.1:{listener.port}/metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(SERIES) <= set(families), set(SERIES) - set(families)

    def value(name: str, sample: str, **labels: str) -> float:
        return sum(
            s.value
            for s in families[name].samples
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
        )

    assert value("nebula_provisions", "nebula_provisions_total", provider="gpu-a", outcome="ok") >= 2
    assert value("nebula_provisions", "nebula_provisions_total", provider="gpu-b", outcome="refused") >= 1
    assert value("nebula_provision_seconds", "nebula_provision_seconds_count", provider="gpu-a") >= 2
    assert value("nebula_poll_errors", "nebula_poll_errors_total", provider="gpu-b") >= 1
    assert value("nebula_poll_seconds", "nebula_poll_seconds_count", provider="gpu-a") >= 1
    assert value("nebula_blocklist_size", "nebula_blocklist_size") == len(scenario.blocklist.entries()) >= 1
    assert value("nebula_api_requests", "nebula_api_requests_total", verb="GET", code="200") >= 1
    kinds = {s.labels["kind"] for s in families["nebula_kubelet_streams_open"].samples}
    assert kinds == {"logs", "exec", "attach"}
    assert {s.labels["outcome"] for s in families["nebula_placement_decisions"].samples} >= {"placed", "blocked"}
    # gpu-b stopped answering after it listed the orphan; gpu-a runs two Pods placed at 0.42/h.
    assert value("nebula_provider_up", "nebula_provider_up", provider="gpu-a", node="nebula-gpu-a") == 1
    assert value("nebula_provider_up", "nebula_provider_up", provider="gpu-b", node="nebula-gpu-b") == 0
    assert value("nebula_orphan_instances", "nebula_orphan_instances", provider="gpu-b") == 1
    assert value("nebula_orphan_instances", "nebula_orphan_instances", provider="gpu-a") == 0
    assert value("nebula_spend_dollars_per_hour", "nebula_spend_dollars_per_hour", provider="gpu-a") == pytest.approx(
        0.84
    )
    assert value("nebula_leader", "nebula_leader") == 1  # Runners run with no Lease asked
    assert "_created" not in text


def test_promtool_finds_no_problem_in_the_scrape(scenario: Scenario, listener: MetricsListener) -> None:
    status, text = get(f"http://127.0.0.1:{listener.port}/metrics")
    assert status == 200 and "nebula_orphan_instances" in text
    checked = check_metrics(text)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip() == "" and checked.stderr.strip() == "", checked.stdout + checked.stderr


def referenced_metrics() -> dict[str, set[str]]:
    """Each metric the PrometheusRule's alerts and the Grafana dashboard's panels read, and by whom."""
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    readers: dict[str, set[str]] = {}
    rules = [each for group in rule["spec"]["groups"] for each in group["rules"]]
    recorded = {each["record"] for each in rules if "record" in each}  # computed by Prometheus, not exported
    for each in rules:
        for name in metric_names(each["expr"]) - recorded:
            readers.setdefault(name, set()).add(each.get("alert") or each["record"])
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            for name in metric_names(target["expr"]):
                readers.setdefault(name, set()).add(f"panel {panel['title']!r}")
    return readers


def test_every_metric_the_alerts_and_the_dashboard_read_is_in_the_scrape(
    scenario: Scenario, listener: MetricsListener
) -> None:
    status, text = get(f"http://127.0.0.1:{listener.port}/metrics")
    assert status == 200
    families = {f.name for f in text_string_to_metric_families(text)}
    samples = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    readers = referenced_metrics()
    assert {"nebula_leader", "nebula_provider_up", "nebula_provisions_total", "nebula_spend_dollars_per_hour"} <= set(
        readers
    )
    missing = {name: who for name, who in readers.items() if name not in samples and family_of(name, families) is None}
    assert not missing, f"read but never exported: {missing}"
