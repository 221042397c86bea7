"""The console's /webhooks/pods over real TLS: registered with the devcluster it gates only
opted-in Pods; malformed input gets a 4xx and a message, never a crash."""

from __future__ import annotations

import base64
import http.client
import json
from typing import Any

from devcluster import DevCluster
from kube import names
from kube.client import Kube, path_for
from tests.support.servers.tls import TlsWsgiServer


def post(server: TlsWsgiServer, body: bytes, method: str = "POST") -> tuple[int, dict[str, object]]:
    connection = http.client.HTTPSConnection(
        "127.0.0.1", int(server.url.rsplit(":", 1)[1]), context=server.client_context(), timeout=10
    )
    try:
        connection.request(method, names.WEBHOOK_PATH, body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_malformed_reviews_get_a_4xx_with_a_message(console: TlsWsgiServer) -> None:
    assert post(console, b"{nope")[0] == 400
    status, answer = post(console, json.dumps({"kind": "AdmissionReview"}).encode())
    assert status == 400 and "apiVersion" in str(answer["message"])
    assert post(console, b"", method="GET")[0] == 405


def test_the_devcluster_gates_opted_in_pods_and_leaves_others_alone(
    cluster: DevCluster, kube: Kube, webhook: TlsWsgiServer
) -> None:
    container = [{"name": "c", "image": "busybox"}]
    plain = {"metadata": {"name": "plain"}, "spec": {"containers": container}}
    opted = {"metadata": {"name": "opted", "labels": {names.ENABLED_LABEL: "true"}}, "spec": {"containers": container}}
    pods = path_for("pods", namespace="default")
    assert "schedulingGates" not in kube.create(pods, plain)["spec"]
    created = kube.create(pods, opted)
    assert created["spec"]["schedulingGates"] == [{"name": names.PLACEMENT_GATE}]
    assert {"key": names.PROVIDER_KEY, "operator": "Exists", "effect": "NoSchedule"} in created["spec"]["tolerations"]
    assert {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"} in created["spec"][
        "tolerations"
    ]
    system = dict(opted, metadata={"name": "sys", "labels": {names.ENABLED_LABEL: "true"}})
    assert "schedulingGates" not in kube.create(path_for("pods", namespace="kube-system"), system)["spec"]


def test_the_outage_toleration_follows_the_setting(console: TlsWsgiServer, settings: Any) -> None:
    settings.NEBULA = {**settings.NEBULA, "OUTAGE_TOLERATION_SECONDS": 900}
    pod = {"metadata": {"name": "p", "labels": {names.ENABLED_LABEL: "true"}}, "spec": {"containers": []}}
    request = {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE", "object": pod}
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    status, answer = post(console, body.encode())
    ops = json.loads(base64.b64decode(str(answer["response"]["patch"])))  # type: ignore[index]
    assert status == 200
    assert [op["value"].get("tolerationSeconds") for op in ops if op["path"] == "/spec/tolerations/-"] == [900, 900]
