"""Validation errors carry `details.causes` as the real API server's do, so kubectl prints the
field (`The Pod "noimage" is invalid: spec.containers[0].image: Required value`)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from devcluster import DevCluster
from devcluster.errors import Cause, invalid, invalid_value, not_supported, required
from tests.devcluster.test_kubectl import Kubectl, kubectl_for
from tests.support.clients.rawhttp import Raw

PODS = "/api/v1/namespaces/default/pods"
NOIMAGE = """apiVersion: v1
kind: Pod
metadata:
  name: noimage
spec:
  containers:
  - name: main
"""


@pytest.fixture(params=["1.37", "1.20"])
def kubectl(request: Any, cluster: DevCluster, tmp_path: Path) -> Kubectl:
    return kubectl_for(request.param, cluster, tmp_path)


def test_kubectl_prints_the_field_of_a_pod_without_image(kubectl: Kubectl, tmp_path: Path) -> None:
    manifest = tmp_path / "noimage.yaml"
    manifest.write_text(NOIMAGE)
    done = subprocess.run(
        kubectl.argv("create", "-f", str(manifest)), env=kubectl.env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert 'The Pod "noimage" is invalid: spec.containers[0].image: Required value' in done.stderr


def test_a_422_has_the_real_servers_status_details(raw: Raw) -> None:
    body = {"metadata": {"name": "noimage"}, "spec": {"containers": [{"name": "main"}]}}
    code, status = raw.json("POST", PODS, body)
    assert code == 422
    assert status["reason"] == "Invalid"
    assert status["message"] == 'Pod "noimage" is invalid: spec.containers[0].image: Required value'
    assert status["details"] == {
        "name": "noimage",
        "kind": "Pod",
        "causes": [{"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers[0].image"}],
    }


def test_a_bad_crd_names_its_group_and_field(raw: Raw) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Galaxy",
            "names": {"plural": "things", "kind": "Thing"},
            "versions": [{"name": "v1", "served": True, "storage": True}],
        },
    }
    code, status = raw.json("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    assert code == 422
    assert status["message"] == (
        'CustomResourceDefinition.apiextensions.k8s.io "things.example.com" is invalid: '
        'spec.scope: Unsupported value: "Galaxy": supported values: "Cluster", "Namespaced"'
    )
    assert status["details"]["group"] == "apiextensions.k8s.io"
    assert status["details"]["causes"][0]["reason"] == "FieldValueNotSupported"


@pytest.mark.parametrize(
    ("causes", "message"),
    [
        ([required("spec.x")], 'Job "j" is invalid: spec.x: Required value'),
        ([required("spec.x", "why")], 'Job "j" is invalid: spec.x: Required value: why'),
        ([invalid_value("spec.n", -1, "must be >= 0")], 'Job "j" is invalid: spec.n: Invalid value: -1: must be >= 0'),
        ([invalid_value("spec.s", "a", "bad")], 'Job "j" is invalid: spec.s: Invalid value: "a": bad'),
        (
            [not_supported("spec.p", "x", ["A", "B"])],
            'Job "j" is invalid: spec.p: Unsupported value: "x": supported values: "A", "B"',
        ),
        (
            [required("spec.a"), Cause("spec.b", "FieldValueForbidden", "Forbidden: no")],
            'Job "j" is invalid: [spec.a: Required value, spec.b: Forbidden: no]',
        ),
    ],
)
def test_invalid_builds_the_message_as_the_real_server_does(causes: list[Cause], message: str) -> None:
    err = invalid("Job", "j", causes, group="")
    assert err.code == 422 and err.message == message
    assert err.status()["details"]["causes"] == [c.to_json() for c in causes]


def test_invalid_with_a_group_qualifies_the_kind_in_the_message_only() -> None:
    err = invalid("Job", "j", [required("spec.template")], group="batch")
    assert err.message.startswith('Job.batch "j" is invalid: ')
    assert err.status()["details"]["kind"] == "Job" and err.status()["details"]["group"] == "batch"


def test_every_field_error_of_a_pod_is_a_cause(raw: Raw) -> None:
    body = {"metadata": {"name": "two"}, "spec": {"containers": [{"name": "a"}, {"image": "busybox"}]}}
    code, status = raw.json("POST", PODS, body)
    assert code == 422
    assert status["message"] == (
        'Pod "two" is invalid: [spec.containers[0].image: Required value, spec.containers[1].name: Required value]'
    )
    assert [c["field"] for c in status["details"]["causes"]] == ["spec.containers[0].image", "spec.containers[1].name"]
