"""The shape check: which fields of a Pod a provider's `Shapes` cannot serve, each named."""

from __future__ import annotations

from typing import Any

import pytest

from providers.shape import PROBE_KINDS, VOLUME_KINDS, Shapes
from providers.shapecheck import Need, describe, needs, refusal_message, refusals, unserved

EVERYTHING = Shapes(
    several_containers=True,
    init_containers=True,
    sidecars=True,
    probes=frozenset(PROBE_KINDS) - {"grpc"},
    volumes=frozenset(VOLUME_KINDS),
)


def pod(**spec: Any) -> dict[str, Any]:
    spec.setdefault("containers", [{"name": "main", "image": "busybox"}])
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": spec}


APP = {"name": "app", "image": "busybox"}
SIDECAR = {"name": "metrics", "image": "busybox", "restartPolicy": "Always"}
INIT = {"name": "download", "image": "busybox"}

# (pod spec, the fields a single-container provider cannot serve, the fields a provider
# serving every shape still cannot serve)
CASES: list[tuple[dict[str, Any], list[str], list[str]]] = [
    ({}, [], []),
    ({"containers": [APP, {"name": "side", "image": "busybox"}]}, ["spec.containers[1]"], []),
    ({"initContainers": [INIT]}, ["spec.initContainers[0]"], []),
    ({"initContainers": [SIDECAR]}, ["spec.initContainers[0].restartPolicy"], []),
    (
        {
            "containers": [
                dict(APP, readinessProbe={"httpGet": {"port": 80}}, livenessProbe={"exec": {"command": ["t"]}})
            ]
        },
        ["spec.containers[0].readinessProbe.httpGet", "spec.containers[0].livenessProbe.exec"],
        [],
    ),
    (
        {"containers": [dict(APP, startupProbe={"tcpSocket": {"port": 80}})]},
        ["spec.containers[0].startupProbe.tcpSocket"],
        [],
    ),
    (
        {"containers": [dict(APP, livenessProbe={"grpc": {"port": 9000}})]},
        ["spec.containers[0].livenessProbe.grpc"],
        ["spec.containers[0].livenessProbe.grpc"],
    ),
    (
        {"containers": [dict(APP, lifecycle={"postStart": {"exec": {"command": ["x"]}}})]},
        ["spec.containers[0].lifecycle.postStart"],
        ["spec.containers[0].lifecycle.postStart"],
    ),
    ({"containers": [dict(APP, lifecycle={"preStop": {"exec": {"command": ["x"]}}})]}, [], []),  # the vnode runs it
    (
        {"volumes": [{"name": "cfg", "configMap": {"name": "c"}}, {"name": "data", "persistentVolumeClaim": {}}]},
        ["spec.volumes[0].configMap", "spec.volumes[1].persistentVolumeClaim"],
        ["spec.volumes[1].persistentVolumeClaim"],
    ),
    (
        {"volumes": [{"name": "s", "secret": {}}, {"name": "d", "downwardAPI": {}}, {"name": "e", "emptyDir": {}}]},
        ["spec.volumes[0].secret", "spec.volumes[1].downwardAPI", "spec.volumes[2].emptyDir"],
        [],
    ),
    (
        {"volumes": [{"name": "p", "projected": {"sources": [{"configMap": {}}, {"serviceAccountToken": {}}]}}]},
        ["spec.volumes[0].projected", "spec.volumes[0].projected.sources[1].serviceAccountToken"],
        ["spec.volumes[0].projected.sources[1].serviceAccountToken"],
    ),
    (
        {"volumes": [{"name": "h", "hostPath": {"path": "/"}}]},
        ["spec.volumes[0].hostPath"],
        ["spec.volumes[0].hostPath"],
    ),
    (
        {"containers": [dict(APP, volumeMounts=[{"name": "e", "mountPath": "/x", "subPathExpr": "$(P)"}])]},
        ["spec.containers[0].volumeMounts[0].subPathExpr"],
        ["spec.containers[0].volumeMounts[0].subPathExpr"],
    ),
]


@pytest.mark.parametrize(("spec", "single", "everything"), CASES)
def test_each_field_a_provider_cannot_serve_is_named(
    spec: dict[str, Any], single: list[str], everything: list[str]
) -> None:
    assert [need.field for need in unserved(pod(**spec), Shapes())] == single
    assert [need.field for need in unserved(pod(**spec), EVERYTHING)] == everything


def test_the_service_account_volume_the_api_server_adds_is_a_warning_never_a_refusal() -> None:
    volume = {"name": "kube-api-access-x7k2p", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
    found = unserved(pod(volumes=[volume]), EVERYTHING)
    assert [(need.field, need.warn_only) for need in found] == [("spec.volumes[0]", True)]
    assert refusals(found) == ()


def test_a_provider_serves_exactly_the_probe_and_volume_kinds_it_lists() -> None:
    shapes = Shapes(probes=frozenset({"exec"}), volumes=frozenset({"emptyDir"}))
    spec = {
        "containers": [dict(APP, readinessProbe={"exec": {}}, livenessProbe={"httpGet": {"port": 1}})],
        "volumes": [{"name": "e", "emptyDir": {}}, {"name": "c", "configMap": {"name": "x"}}],
    }
    assert [need.field for need in unserved(pod(**spec), shapes)] == [
        "spec.containers[0].livenessProbe.httpGet",
        "spec.volumes[1].configMap",
    ]


def test_the_refusal_names_the_provider_each_field_and_what_it_asks() -> None:
    found = unserved(pod(volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}]), EVERYTHING)
    assert refusal_message("gpu-a", found) == (
        "provider 'gpu-a' cannot serve spec.volumes[0].persistentVolumeClaim (persistentVolumeClaim volumes)"
    )
    assert describe([Need("init containers", "spec.initContainers[0]")]) == "spec.initContainers[0] (init containers)"


def test_a_plain_one_container_pod_needs_nothing() -> None:
    assert needs(pod(containers=[dict(APP, env=[{"name": "A", "value": "b"}], ports=[{"containerPort": 80}])])) == ()
