"""The HTTP surface: discovery, version, health, OpenAPI, Status errors and bad input."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

from devcluster import DevCluster
from tests.support.clients.rawhttp import Raw
from tests.support.factories import make_crd, make_pod


def test_version_health_and_openapi_answer_what_kubectl_expects(raw: Raw) -> None:
    status, version = raw.json("GET", "/version?timeout=32s")
    assert status == 200 and version["major"] == "1" and version["gitVersion"].startswith("v1.")
    for path in ("/healthz", "/readyz", "/livez"):
        code, headers, body = raw.request("GET", path)
        assert (code, body) == (200, b"ok")
        assert headers["content-type"].startswith("text/plain")
    code, headers, body = raw.request(
        "GET",
        "/openapi/v2?timeout=32s",
        headers={"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"},
    )
    assert (code, body, headers["content-type"]) == (200, b"", "application/octet-stream")
    assert raw.json("GET", "/openapi/v3") == (200, {"paths": {}})  # no CRD yet: no group-version documents


def test_discovery_lists_core_groups_short_names_and_subresources(raw: Raw) -> None:
    assert raw.json("GET", "/api")[1]["versions"] == ["v1"]
    groups = {g["name"] for g in raw.json("GET", "/apis")[1]["groups"]}
    assert {"coordination.k8s.io", "events.k8s.io", "apiextensions.k8s.io"} <= groups
    resources = {r["name"]: r for r in raw.json("GET", "/api/v1")[1]["resources"]}
    assert resources["pods"]["shortNames"] == ["po"] and resources["pods"]["categories"] == ["all"]
    assert resources["nodes"]["namespaced"] is False and resources["nodes"]["shortNames"] == ["no"]
    assert {"pods/status", "pods/log", "pods/exec", "pods/attach", "pods/binding", "nodes/status"} <= set(resources)
    assert resources["configmaps"]["shortNames"] == ["cm"] and "watch" in resources["pods"]["verbs"]
    leases = raw.json("GET", "/apis/coordination.k8s.io/v1")[1]
    assert [r["name"] for r in leases["resources"]] == ["leases"]
    assert raw.json("GET", "/apis/coordination.k8s.io")[1]["preferredVersion"]["version"] == "v1"


def test_a_crd_appears_in_discovery_with_its_short_names(raw: Raw) -> None:
    short = {"singular": "nodepool", "shortNames": ["np"]}
    crd = make_crd(
        "NodePool", "nebula.inftyai.com", version="v1alpha1", scope="Cluster", names=short, subresources={"status": {}}
    )
    assert raw.json("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)[0] == 201
    groups = {g["name"]: g for g in raw.json("GET", "/apis")[1]["groups"]}
    assert groups["nebula.inftyai.com"]["versions"][0]["groupVersion"] == "nebula.inftyai.com/v1alpha1"
    doc = raw.json("GET", "/apis/nebula.inftyai.com/v1alpha1")[1]
    names = {r["name"]: r for r in doc["resources"]}
    assert names["nodepools"]["shortNames"] == ["np"] and names["nodepools"]["namespaced"] is False
    assert "nodepools/status" in names


def _assert_status(status: int, body: Any, code: int, reason: str) -> None:
    assert status == code, body
    assert body["kind"] == "Status" and body["apiVersion"] == "v1" and body["status"] == "Failure"
    assert body["code"] == code and body["reason"] == reason, body


def test_errors_are_metav1_status_with_the_right_reason(raw: Raw) -> None:
    status, body = raw.json("GET", "/api/v1/namespaces/default/pods/missing")
    _assert_status(status, body, 404, "NotFound")
    assert body["message"] == 'pods "missing" not found' and body["details"] == {"name": "missing", "kind": "pods"}
    assert raw.json("POST", "/api/v1/namespaces/default/pods", make_pod())[0] == 201
    status, body = raw.json("POST", "/api/v1/namespaces/default/pods", make_pod())
    _assert_status(status, body, 409, "AlreadyExists")
    status, body = raw.json("POST", "/api/v1/namespaces/default/pods", {"metadata": {"name": "x"}, "spec": {}})
    _assert_status(status, body, 422, "Invalid")
    status, body = raw.json("POST", "/api/v1/namespaces/nowhere/pods", make_pod("p2"))
    _assert_status(status, body, 404, "NotFound")


def test_bad_input_gets_a_clean_4xx_and_the_server_keeps_serving(raw: Raw) -> None:
    pods = "/api/v1/namespaces/default/pods"
    cases: list[tuple[str, str, bytes | dict[str, Any] | None, dict[str, str], int, str]] = [
        ("POST", pods, b"{not json", {}, 400, "BadRequest"),
        ("POST", pods, b"\xff\xfe", {}, 400, "BadRequest"),
        ("POST", pods, b"[]", {}, 400, "BadRequest"),
        ("POST", pods, b"{}", {"Content-Type": "text/csv"}, 415, "UnsupportedMediaType"),
        ("POST", pods, b"x" * (3 * 1024 * 1024 + 1), {}, 413, "RequestEntityTooLarge"),
        ("GET", "/api/v1/namespaces/default/widgets", None, {}, 404, "NotFound"),
        ("GET", "/apis/no.such.group/v1/things", None, {}, 404, "NotFound"),
        ("GET", "/nonsense", None, {}, 404, "NotFound"),
        ("GET", pods + "?labelSelector=a%20in%20(", None, {}, 400, "BadRequest"),
        ("GET", pods + "?fieldSelector=nokey", None, {}, 400, "BadRequest"),
        ("POST", pods, make_pod(metadata={"namespace": "kube-system"}), {}, 400, "BadRequest"),
        ("DELETE", pods, None, {}, 405, "MethodNotAllowed"),
        ("POST", pods + "/p1", make_pod(), {}, 405, "MethodNotAllowed"),
        ("PATCH", pods + "/p1", b"{}", {"Content-Type": "application/json"}, 415, "UnsupportedMediaType"),
        ("PATCH", pods + "/p1", b"{oops", {"Content-Type": "application/merge-patch+json"}, 400, "BadRequest"),
        ("GET", pods + "?watch=true&resourceVersion=abc", None, {}, 400, "BadRequest"),
        ("GET", "/api/v1/namespaces/default/pods/p1/nosuchsub", None, {}, 404, "NotFound"),
        ("GET", "/api/v1/nodes/n1/log", None, {}, 404, "NotFound"),
    ]
    assert raw.json("POST", pods, make_pod())[0] == 201
    for method, path, body, headers, code, reason in cases:
        status, _, data = raw.request(method, path, body, headers=headers)
        _assert_status(status, json.loads(data), code, reason)
    assert raw.request("GET", "/healthz")[0] == 200


def test_an_oversized_request_line_and_garbage_bytes_do_not_hang_the_server(raw: Raw) -> None:
    conn = raw.connection(timeout=10)
    conn.request("GET", "/api/v1/pods?x=" + "a" * 70000)
    assert conn.getresponse().status == 414
    conn.close()
    with socket.create_connection((raw.host, raw.port), timeout=10) as sock:
        sock.sendall(b"\x16\x03\x01garbage-not-tls\r\n\r\n")
        try:
            sock.recv(100)
        except OSError:
            pass
    assert raw.request("GET", "/healthz")[0] == 200


def test_the_request_log_records_each_call_and_is_served_as_json(cluster: DevCluster, raw: Raw) -> None:
    cluster.request_log.clear()
    raw.request("POST", "/api/v1/namespaces/default/pods", make_pod(), headers={"User-Agent": "probe/1"})
    raw.request("GET", "/api/v1/namespaces/default/pods/p1")
    raw.request("GET", "/api/v1/pods")
    assert cluster.request_log.count(verb="create", resource="pods") == 1
    assert cluster.request_log.counts()[("get", "pods")] == 1
    assert cluster.request_log.counts()[("list", "pods")] == 1
    first = cluster.request_log[0]
    assert (first.namespace, first.name, first.user_agent, first.code) == ("default", "p1", "probe/1", 201)
    status, records = raw.json("GET", "/debug/requests")
    assert status == 200 and [r["verb"] for r in records] == ["create", "get", "list"]


def test_stop_returns_promptly_with_an_idle_keep_alive_connection_open() -> None:
    cluster = DevCluster()
    cluster.start()
    raw = Raw(cluster)
    conn = raw.connection()
    try:
        conn.request("GET", "/healthz")
        assert conn.getresponse().read() == b"ok"
        began = time.monotonic()
        cluster.stop()
        assert time.monotonic() - began < 10
    finally:
        conn.close()
        cluster.stop()
