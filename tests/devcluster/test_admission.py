"""The devcluster calls mutating webhooks on Pod CREATE as the real API server does: over HTTPS
to clientConfig.url with the caBundle, honouring selectors and failurePolicy, applying the
returned JSONPatch, and refusing the Pod on a denial."""

from __future__ import annotations

import pytest

from devcluster import DevCluster, tls
from devcluster.server import warning_header
from tests.support.clients.rawhttp import Raw
from tests.support.servers.webhook import Hook, patch_answer, pod


def test_a_matching_pod_is_sent_as_an_admission_review_and_patched(cluster: DevCluster, raw: Raw, hook: Hook) -> None:
    cluster.apply_manifest(hook.config(object_selector={"matchLabels": {"opt": "in"}}))
    hook.answer = patch_answer([{"op": "add", "path": "/metadata/annotations", "value": {"mutated": "yes"}}])
    status, created = raw.json("POST", "/api/v1/namespaces/default/pods", pod("a", {"opt": "in"}))
    assert status == 201 and created["metadata"]["annotations"] == {"mutated": "yes"}
    (review,) = hook.reviews
    request = review["request"]
    assert review["apiVersion"] == "admission.k8s.io/v1" and request["operation"] == "CREATE"
    assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"} and request["namespace"] == "default"
    assert request["object"]["metadata"]["name"] == "a"


def test_object_and_namespace_selectors_decide_who_is_sent(cluster: DevCluster, raw: Raw, hook: Hook) -> None:
    not_system = {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]
    }
    cluster.apply_manifest(hook.config(object_selector={"matchLabels": {"opt": "in"}}, namespace_selector=not_system))
    raw.json("POST", "/api/v1/namespaces/default/pods", pod("plain"))
    raw.json("POST", "/api/v1/namespaces/kube-system/pods", pod("system", {"opt": "in"}))
    assert hook.reviews == []
    raw.json("POST", "/api/v1/namespaces/default/pods", pod("chosen", {"opt": "in"}))
    assert [r["request"]["object"]["metadata"]["name"] for r in hook.reviews] == ["chosen"]


def test_a_denial_refuses_the_pod_with_the_webhooks_message(cluster: DevCluster, raw: Raw, hook: Hook) -> None:
    cluster.apply_manifest(hook.config())
    hook.answer = lambda request: {
        "uid": request["uid"],
        "allowed": False,
        "status": {"code": 403, "message": "no GPUs for you"},
    }
    status, body = raw.json("POST", "/api/v1/namespaces/default/pods", pod("denied"))
    assert status == 403 and 'admission webhook "test.hook.io" denied the request: no GPUs for you' in body["message"]
    assert raw.json("GET", "/api/v1/namespaces/default/pods/denied")[0] == 404


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
def test_failure_policy_decides_what_an_unreachable_or_untrusted_webhook_means(
    cluster: DevCluster, raw: Raw, hook: Hook, policy: str
) -> None:
    other_ca = tls.make_credentials("127.0.0.1").ca_pem  # the server's certificate does not chain to it
    cluster.apply_manifest(hook.config(failure_policy=policy, ca=other_ca))
    status, body = raw.json("POST", "/api/v1/namespaces/default/pods", pod("p"))
    if policy == "Fail":
        assert status == 500 and 'failed calling webhook "test.hook.io"' in body["message"]
    else:
        assert status == 201
    assert hook.reviews == []


def test_a_broken_patch_or_a_wrong_uid_is_a_failed_call(cluster: DevCluster, raw: Raw, hook: Hook) -> None:
    cluster.apply_manifest(hook.config())
    hook.answer = lambda request: {"uid": request["uid"], "allowed": True, "patchType": "JSONPatch", "patch": "!!!"}
    assert raw.json("POST", "/api/v1/namespaces/default/pods", pod("x"))[0] == 500
    hook.answer = lambda request: {"uid": "someone-else", "allowed": True}
    status, body = raw.json("POST", "/api/v1/namespaces/default/pods", pod("y"))
    assert status == 500 and "uid" in body["message"]


def test_a_webhooks_warnings_reach_the_client_as_warning_headers(cluster: DevCluster, raw: Raw, hook: Hook) -> None:
    cluster.apply_manifest(hook.config())
    hook.answer = lambda request: {"uid": request["uid"], "allowed": True, "warnings": ['field "x" is ignored']}
    status, headers, _ = raw.request("POST", "/api/v1/namespaces/default/pods", pod("warned"))
    assert status == 201
    assert headers["warning"] == '299 - "field \\"x\\" is ignored"'


def test_a_warning_header_escapes_quotes_and_backslashes_and_flattens_lines() -> None:
    assert warning_header('a "b" \\ c\nd') == '299 - "a \\"b\\" \\\\ c d"'
