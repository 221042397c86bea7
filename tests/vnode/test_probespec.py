"""Reading a Pod's probes: the API server's defaults and validation, named ports, the kill's grace."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.factories import make_pod
from vnode.model.probespec import (
    LIVENESS,
    READINESS,
    STARTUP,
    ExecAction,
    HttpAction,
    InvalidProbe,
    Probe,
    TcpAction,
    probes_of,
)

PORTS = [{"name": "http", "containerPort": 8080}, {"name": "admin", "containerPort": 9090}]


def one_probe(probe: dict[str, Any], kind: str = "readiness", **spec: Any) -> Probe:
    pod = make_pod(container={f"{kind}Probe": probe, "ports": PORTS}, **spec)
    (found,) = probes_of(pod)
    return found


def test_a_probe_that_names_no_timing_gets_the_kubelets_defaults() -> None:
    probe = one_probe({"exec": {"command": ["cat", "/tmp/ready"]}})
    assert probe == Probe(
        kind=READINESS,
        container="main",
        action=ExecAction(("cat", "/tmp/ready")),
        initial_delay=0,
        period=10,
        timeout=1,
        success_threshold=1,
        failure_threshold=3,
        grace=30,
    )


def test_a_zero_is_the_default_as_the_api_server_defaults_it() -> None:
    zeros = {"periodSeconds": 0, "timeoutSeconds": 0, "successThreshold": 0, "failureThreshold": 0}
    probe = one_probe({"tcpSocket": {"port": 80}, **zeros})
    assert (probe.period, probe.timeout, probe.success_threshold, probe.failure_threshold) == (10, 1, 1, 3)


def test_declared_timing_and_thresholds_are_kept() -> None:
    declared = {"initialDelaySeconds": 5, "periodSeconds": 2, "timeoutSeconds": 3, "successThreshold": 2}
    probe = one_probe({"tcpSocket": {"port": 80}, **declared, "failureThreshold": 7})
    assert (probe.initial_delay, probe.period, probe.timeout) == (5, 2, 3)
    assert (probe.success_threshold, probe.failure_threshold) == (2, 7)


@pytest.mark.parametrize(
    ("port", "number", "name"),
    [(8080, 8080, ""), ("http", 8080, "http"), ("admin", 9090, "admin"), ("metrics", None, "metrics")],
)
def test_a_port_is_a_number_or_the_name_of_a_declared_port(port: Any, number: int | None, name: str) -> None:
    probe = one_probe({"tcpSocket": {"port": port}})
    assert probe.action == TcpAction(port=number, port_name=name)


def test_http_get_reads_host_scheme_path_port_and_headers() -> None:
    http = {
        "host": "10.0.0.7",
        "scheme": "HTTPS",
        "path": "/healthz?deep=1",
        "port": "http",
        "httpHeaders": [{"name": "X-Probe", "value": "yes"}, {"name": "Host", "value": "app.example"}],
    }
    probe = one_probe({"httpGet": http})
    assert probe.action == HttpAction(
        port=8080,
        path="/healthz?deep=1",
        host="10.0.0.7",
        scheme="HTTPS",
        headers=(("X-Probe", "yes"), ("Host", "app.example")),
        port_name="http",
    )


def test_http_get_defaults_to_http_on_the_root_path_of_the_instance() -> None:
    assert one_probe({"httpGet": {"port": 80}}).action == HttpAction(port=80)


def test_the_kill_grace_is_the_probes_else_the_pods_else_thirty_seconds() -> None:
    liveness = {"exec": {"command": ["true"]}}
    assert one_probe(liveness, LIVENESS).grace == 30
    assert one_probe(liveness, LIVENESS, terminationGracePeriodSeconds=45).grace == 45
    own = {**liveness, "terminationGracePeriodSeconds": 7}
    assert one_probe(own, LIVENESS, terminationGracePeriodSeconds=45).grace == 7


def test_a_kill_is_never_given_less_than_the_kubelets_two_second_minimum() -> None:
    assert one_probe({"exec": {"command": ["true"]}}, STARTUP, terminationGracePeriodSeconds=0).grace == 2


def test_every_probe_of_app_containers_and_native_sidecars_is_read_in_order() -> None:
    exec_probe = {"exec": {"command": ["true"]}}
    pod = make_pod(
        container={"livenessProbe": exec_probe, "startupProbe": exec_probe},
        initContainers=[
            {"name": "setup", "image": "x", "readinessProbe": exec_probe},  # never probed: runs to completion
            {"name": "proxy", "image": "x", "restartPolicy": "Always", "readinessProbe": exec_probe},
        ],
    )
    pod["spec"]["containers"].append({"name": "second", "image": "x", "readinessProbe": exec_probe})
    found = [(p.container, p.kind) for p in probes_of(pod)]
    assert found == [("main", STARTUP), ("main", LIVENESS), ("second", READINESS), ("proxy", READINESS)]


def test_a_pod_without_probes_has_none() -> None:
    assert probes_of(make_pod()) == ()


@pytest.mark.parametrize(
    ("kind", "probe", "field", "why"),
    [
        ("readiness", {}, "readinessProbe", "must specify a handler type"),
        ("readiness", {"exec": {"command": ["true"]}, "tcpSocket": {"port": 1}}, "Probe.tcpSocket", "more than 1"),
        ("readiness", {"grpc": {"port": 9000}}, "readinessProbe.grpc", "grpc probes are not served"),
        ("readiness", {"exec": {"command": []}}, "readinessProbe.exec.command", "non-empty list"),
        ("readiness", {"exec": {"command": "true"}}, "readinessProbe.exec.command", "non-empty list"),
        ("readiness", {"tcpSocket": {"port": 0}}, "readinessProbe.tcpSocket.port", "between 1 and 65535"),
        ("readiness", {"tcpSocket": {"port": 70000}}, "readinessProbe.tcpSocket.port", "between 1 and 65535"),
        ("readiness", {"tcpSocket": {"port": "8080"}}, "readinessProbe.tcpSocket.port", "at least one letter"),
        ("readiness", {"tcpSocket": {}}, "readinessProbe.tcpSocket.port", "port number or the name"),
        ("readiness", {"httpGet": {"port": 80, "scheme": "FTP"}}, "readinessProbe.httpGet.scheme", "HTTPS"),
        ("readiness", {"httpGet": {"port": 80, "httpHeaders": [{"value": "v"}]}}, "httpHeaders[0].name", "non-empty"),
        ("readiness", {"tcpSocket": {"port": 1}, "periodSeconds": -1}, "readinessProbe.periodSeconds", ">= 0"),
        ("readiness", {"tcpSocket": {"port": 1}, "timeoutSeconds": "1s"}, "readinessProbe.timeoutSeconds", "whole"),
        ("readiness", {"tcpSocket": {"port": 1}, "failureThreshold": True}, "failureThreshold", "whole number"),
        ("liveness", {"tcpSocket": {"port": 1}, "successThreshold": 2}, "livenessProbe.successThreshold", "be 1"),
        ("startup", {"tcpSocket": {"port": 1}, "successThreshold": 3}, "startupProbe.successThreshold", "be 1"),
        (
            "readiness",
            {"tcpSocket": {"port": 1}, "terminationGracePeriodSeconds": 5},
            "readinessProbe.terminationGracePeriodSeconds",
            "must not be set",
        ),
        (
            "liveness",
            {"tcpSocket": {"port": 1}, "terminationGracePeriodSeconds": 0},
            "livenessProbe.terminationGracePeriodSeconds",
            "greater than 0",
        ),
    ],
)
def test_a_probe_the_api_server_would_refuse_is_refused_with_its_field_named(
    kind: str, probe: dict[str, Any], field: str, why: str
) -> None:
    with pytest.raises(InvalidProbe) as refused:
        one_probe(probe, kind)
    assert refused.value.field.startswith("spec.containers[0].") and refused.value.field.endswith(field)
    assert why.replace(">= 0", "greater than or equal to 0") in refused.value.why
