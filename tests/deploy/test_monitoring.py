"""deploy/monitoring and the metrics port of deploy/base: `promtool check rules` on the
PrometheusRule's spec, `promtool test rules` proving each alert fires on its series (and a
broken rule failing the check), the ServiceMonitor selecting the nebula-metrics Service's port,
the dashboard shipped as a Grafana sidecar ConfigMap, and every overlay's manager serving
/metrics on the port the Service and the NetworkPolicy name."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import load_command_class

from nebula_site.config import parse_address
from tests.support.clients.scrape import promtool
from tests.support.deploy.manifests import (
    DEPLOY,
    OVERLAYS,
    ROOT,
    find,
    kubectl,
    manager_container,
    render,
    render_copy,
)

MONITORING = DEPLOY / "monitoring"
Obj = dict[str, Any]


def rules_spec() -> Obj:
    spec: Obj = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())["spec"]
    return spec


def alerts(spec: Obj) -> list[str]:
    return [rule["alert"] for group in spec["groups"] for rule in group["rules"] if "alert" in rule]


def records(spec: Obj) -> list[str]:
    return [rule["record"] for group in spec["groups"] for rule in group["rules"] if "record" in rule]


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_promtool_checks_the_prometheusrule_spec(tmp_path: Path) -> None:
    spec = rules_spec()
    (tmp_path / "nebula-rules.yaml").write_text(yaml.safe_dump(spec))
    checked = run_promtool("check", "rules", "nebula-rules.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alerts(spec)) + len(records(spec))} rules found" in checked.stdout
    assert records(spec) == ["nebula:pool_budget_used:ratio"]
    expected = {
        "NebulaNoLeader",
        "NebulaProviderUnreachable",
        "NebulaProvisionFailuresRising",
        "NebulaOrphanInstances",
        "NebulaInstancesBehindFinishedPods",
        "NebulaSpendAboveThreshold",
        "NebulaPoolBudgetNearlySpent",
        "NebulaPoolBudgetReached",
        "NebulaInterruptionsFrequent",
    }
    assert set(alerts(spec)) == expected
    for group in spec["groups"]:
        for rule in (r for r in group["rules"] if "alert" in r):
            assert rule["for"] and rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
            assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


def test_a_broken_rule_fails_the_check(tmp_path: Path) -> None:
    spec = rules_spec()
    spec["groups"][0]["rules"][0]["expr"] = "max(nebula_leader"
    (tmp_path / "nebula-rules.yaml").write_text(yaml.safe_dump(spec))
    assert run_promtool("check", "rules", "nebula-rules.yaml", cwd=tmp_path).returncode != 0


def test_each_alert_fires_on_its_series_and_stays_quiet_on_healthy_ones(tmp_path: Path) -> None:
    spec = rules_spec()
    (tmp_path / "nebula-rules.yaml").write_text(yaml.safe_dump(spec))
    shutil.copy(MONITORING / "rules-test.yaml", tmp_path / "rules-test.yaml")
    tested = run_promtool("test", "rules", "rules-test.yaml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    cases = yaml.safe_load((MONITORING / "rules-test.yaml").read_text())["tests"]
    fired = {case["alertname"] for test in cases for case in test["alert_rule_test"] if case["exp_alerts"]}
    quiet = {case["alertname"] for test in cases for case in test["alert_rule_test"] if not case["exp_alerts"]}
    assert fired == quiet == set(alerts(spec))  # every alert shown firing, and shown quiet


def test_the_rule_test_fails_when_an_alert_would_not_fire(tmp_path: Path) -> None:
    spec = rules_spec()
    for rule in spec["groups"][0]["rules"]:
        if rule["alert"] == "NebulaOrphanInstances":
            rule["expr"] = "max by (provider) (nebula_orphan_instances) > 5"
    (tmp_path / "nebula-rules.yaml").write_text(yaml.safe_dump(spec))
    shutil.copy(MONITORING / "rules-test.yaml", tmp_path / "rules-test.yaml")
    tested = run_promtool("test", "rules", "rules-test.yaml", cwd=tmp_path)
    assert tested.returncode != 0 and "NebulaOrphanInstances" in tested.stdout + tested.stderr


def rendered_monitoring() -> list[Obj]:
    result = subprocess.run(
        [kubectl(), "kustomize", str(MONITORING)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_the_service_monitor_scrapes_the_metrics_port_of_the_nebula_metrics_service() -> None:
    objects = rendered_monitoring()
    assert {o["kind"] for o in objects} == {"ServiceMonitor", "PrometheusRule", "ConfigMap"}
    monitor = find(objects, "ServiceMonitor", "nebula-manager")
    service = find(render("production"), "Service", "nebula-metrics")
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    # The console Service does not match: Prometheus would scrape the TLS console port.
    console = find(render("production"), "Service", "nebula-console")
    assert not monitor["spec"]["selector"]["matchLabels"].items() <= console["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["scheme"]) == ("metrics", "/metrics", "http")
    assert [p["name"] for p in service["spec"]["ports"]] == ["metrics"]


def test_the_dashboard_ships_as_a_grafana_sidecar_config_map() -> None:
    config_map = find(rendered_monitoring(), "ConfigMap", "nebula-grafana-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads(config_map["data"]["nebula.json"])
    assert shipped == json.loads((MONITORING / "grafana-dashboard.json").read_text())
    assert shipped["uid"] == "nebula-manager" and all(p["targets"] for p in shipped["panels"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_serves_metrics_on_the_port_its_service_and_network_policy_name(overlay: str) -> None:
    objects = render(overlay)
    container = manager_container(objects)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    parser = load_command_class("nebula_site", "runvnode").create_parser("manage.py", "runvnode")
    flag = parser.parse_args(container["args"]).metrics_addr
    settings = find(objects, "ConfigMap", "nebula-settings")["data"]
    # What runvnode binds: --metrics-addr, else NEBULA_METRICS_ADDR from the settings ConfigMap.
    host, port = parse_address(flag if flag is not None else settings["NEBULA_METRICS_ADDR"])
    assert (host, port) == ("", ports["metrics"])  # every interface: Prometheus dials the Pod IP
    service = find(objects, "Service", "nebula-metrics")
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["metrics"]
    policy = find(objects, "NetworkPolicy", "nebula-manager")
    (rule,) = [r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == "metrics"]
    # I7: only the Prometheus of the monitoring namespace, as the Prometheus Operator labels its
    # Pods: the namespace and the label in ONE peer (two peers would admit either: any Pod of
    # monitoring, or a Pod labelled prometheus in any namespace).
    assert rule["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        }
    ]


def test_I7_the_overlay_in_docs_monitoring_md_admits_only_the_prometheus_of_another_namespace(
    tmp_path: Path,
) -> None:
    docs = (ROOT / "docs" / "monitoring.md").read_text()
    (snippet,) = re.findall(r"```yaml\n(# deploy/overlays/<yours>/kustomization.yaml.*?)```", docs, re.S)
    deploy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, deploy)
    (deploy / "overlays" / "yours").mkdir()
    (deploy / "overlays" / "yours" / "kustomization.yaml").write_text(snippet)
    policy = find(render_copy(deploy, "yours"), "NetworkPolicy", "nebula-manager")
    (rule,) = [r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == "metrics"]
    assert rule["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "prometheus-system"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        }
    ]


def test_the_dashboard_shows_spend_per_pool_against_its_budget() -> None:
    panels = {p["title"]: p for p in json.loads((MONITORING / "grafana-dashboard.json").read_text())["panels"]}
    hourly = [t["expr"] for t in panels["Spend per hour by pool vs budget"]["targets"]]
    today = [t["expr"] for t in panels["Spend today by pool vs daily budget"]["targets"]]
    assert "nebula_pool_hourly_spend_dollars" in hourly[0] and 'limit="hourly"' in hourly[1]
    assert "nebula_pool_spend_today_dollars" in today[0] and 'limit="daily"' in today[1]
    ids = [p["id"] for p in panels.values()]
    assert len(ids) == len(set(ids))
    boxes = {(p["gridPos"]["x"], p["gridPos"]["y"]) for p in panels.values()}
    assert len(boxes) == len(panels)  # no panel drawn over another


def test_the_dashboard_shows_each_cause_of_an_end_on_a_panel_of_its_own() -> None:
    """Interrupted (by kind, and by tier), unreachable (Pods waiting), failed (by reason)."""
    panels = json.loads((MONITORING / "grafana-dashboard.json").read_text())["panels"]
    causes = {"Interrupted", "Unreachable", "Failed"}
    by_cause = {p["title"].split(":")[0]: [t["expr"] for t in p["targets"]] for p in panels}
    interrupted, unreachable, failed = by_cause["Interrupted"], by_cause["Unreachable"], by_cause["Failed"]
    assert "nebula_interruptions_total" in interrupted[0] and "by (provider, kind)" in interrupted[0]
    assert "by (provider, tier)" in interrupted[1]
    assert unreachable == ['max by (provider) (nebula_provider_unreachable_pods{job=~"$job"})']
    assert "nebula_workload_failures_total" in failed[0] and "by (provider, reason)" in failed[0]
    rows = [p["gridPos"] for p in panels if p["title"].split(":")[0] in causes]
    assert len({(g["x"], g["y"]) for g in rows}) == 3 and sum(g["w"] for g in rows) == 24  # one row of three
