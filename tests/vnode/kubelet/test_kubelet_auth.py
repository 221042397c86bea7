"""Kubelet-grade authentication and authorisation on the kubelet port, over real TLS against
the embedded API server's TokenReview, SubjectAccessReview and RBAC: 401 without
credentials, 403 without the grant (before any upgrade), the devcluster's client certificate
authorised by its bootstrap RBAC, anonymous as `system:anonymous`, and cached reviews.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster import DevCluster
from kube.client import Kube, KubeError, path_for
from kube.reviews import Access
from providers.fake import FakeProvider
from tests.support.clients.spdy import SpdyClient, UpgradeRefused
from tests.support.clock import ManualClock
from tests.support.fixtures import kube_for
from tests.support.polling import wait_for
from tests.support.rigs.offline import adopt_new_pod, offline_handler
from tests.support.servers.tls import kubelet_connection, read_head
from vnode.handler import Handler
from vnode.kubelet import auth, certs
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.server import ListenerConfig, Listeners

EXEC = "/exec/default/target/main?command=true&output=1&stdout=1"
RBAC = "/apis/rbac.authorization.k8s.io/v1"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    folder = tmp_path_factory.mktemp("auth")
    with DevCluster(kubeconfig_path=str(folder / "kubeconfig")) as running:
        yield running


@pytest.fixture(scope="module")
def kube(cluster: DevCluster) -> Kube:
    return kube_for(cluster, pool_size=4)


@pytest.fixture(scope="module")
def handler() -> Iterator[Handler]:
    provider = FakeProvider("authfake", {"cloud": f"auth-{uuid.uuid4().hex}", "scenario": {}})
    served = offline_handler(provider)
    adopt_new_pod(served, "target")
    yield served
    for instance in provider.list():
        provider.terminate(instance.id)


@pytest.fixture(scope="module")
def client_ca(cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("client-ca") / "ca.pem"
    path.write_bytes(cluster.kubelet_client_ca_pem)
    return str(path)


def _listeners(handler: Handler, client_ca: str, config: auth.KubeletAuth) -> Iterator[Listeners]:
    running = Listeners(
        HandlerRegistry([handler]), kubelet=ListenerConfig("127.0.0.1", 0), client_ca=client_ca, kubelet_auth=config
    )
    running.start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def guarded(handler: Handler, client_ca: str, kube: Kube) -> Iterator[Listeners]:
    """runvnode's defaults: no anonymous, token auth, Webhook authorisation."""
    yield from _listeners(handler, client_ca, auth.KubeletAuth(kube=kube))


@pytest.fixture(scope="module")
def anonymous(handler: Handler, client_ca: str, kube: Kube) -> Iterator[Listeners]:
    yield from _listeners(handler, client_ca, auth.KubeletAuth(anonymous=True, kube=kube))


def service_account_token(kube: Kube, name: str) -> str:
    kube.create(path_for("serviceaccounts", namespace="default"), {"metadata": {"name": name}})
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    answer = kube.create(f"/api/v1/namespaces/default/serviceaccounts/{name}/token", body)
    return str(answer["status"]["token"])


def grant(kube: Kube, name: str, subject: dict[str, str], rules: list[dict[str, list[str]]]) -> None:
    kube.create(f"{RBAC}/clusterroles", {"metadata": {"name": name}, "rules": rules})
    binding = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [subject],
    }
    kube.create(f"{RBAC}/clusterrolebindings", binding)


def account(name: str) -> dict[str, str]:
    return {"kind": "ServiceAccount", "name": name, "namespace": "default"}


def get(port: int, path: str, token: str | None = None, context: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    connection = kubelet_connection(port, context=context)
    try:
        connection.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def spdy_exec(port: int, token: str | None = None, context: ssl.SSLContext | None = None) -> int:
    """The status of a SPDY exec upgrade: 101 (then closed at once), or the refusal's."""
    headers = [("Authorization", f"Bearer {token}")] if token else []
    try:
        client = SpdyClient.connect(
            ("127.0.0.1", port), EXEC, ssl_context=context or ssl._create_unverified_context(), headers=headers
        )
    except UpgradeRefused as refused:
        return refused.status
    client.sock.close()
    return client.status


def websocket_exec(port: int, token: str | None = None) -> bytes:
    """The status line of a websocket exec handshake."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    with ssl._create_unverified_context().wrap_socket(raw) as sock:
        lines = [f"GET {EXEC} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: Upgrade", "Upgrade: websocket"]
        lines += ["Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="]
        lines += ["Sec-WebSocket-Protocol: v5.channel.k8s.io"]
        lines += [f"Authorization: Bearer {token}"] if token else []
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = read_head(sock)
    assert head is not None
    return head[0].split(b"\r\n", 1)[0]


def client_context(tmp_path: Path, pair: certs.KeyPair) -> ssl.SSLContext:
    (tmp_path / "client.pem").write_bytes(pair.cert_pem + pair.key_pem)
    context = ssl._create_unverified_context()
    context.load_cert_chain(tmp_path / "client.pem")
    return context


def fake_calls(handler: Handler) -> dict[str, int]:
    provider = handler.provider
    assert isinstance(provider, FakeProvider)
    return provider.cloud.call_counts()


def test_no_token_and_no_client_certificate_is_401_on_every_route_and_upgrade(guarded: Listeners) -> None:
    port = guarded.kubelet_port
    for path in ("/metrics/resource", "/stats/summary", "/pods", "/healthz", "/containerLogs/default/target/main"):
        assert get(port, path) == (401, b"Unauthorized")
    assert get(port, "/no/such/route")[0] == 401  # before routing: nothing is learnt unauthenticated
    assert spdy_exec(port) == 401
    assert websocket_exec(port) == b"HTTP/1.1 401 Unauthorized"


def test_a_token_the_api_server_does_not_know_is_401(guarded: Listeners) -> None:
    assert get(guarded.kubelet_port, "/metrics/resource", token="not-a-token") == (401, b"Unauthorized")


def test_a_scrape_with_a_token_lacking_rbac_is_403_and_with_nodes_metrics_200(guarded: Listeners, kube: Kube) -> None:
    stranger = service_account_token(kube, "stranger")
    status, body = get(guarded.kubelet_port, "/metrics/resource", token=stranger)
    assert status == 403
    assert body == (
        b"Forbidden (user=system:serviceaccount:default:stranger, verb=get, resource=nodes, subresource(s)=[metrics])"
    )
    scraper = service_account_token(kube, "scraper")
    grant(
        kube,
        "scrape-nodes",
        account("scraper"),
        [{"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]}],
    )
    status, body = get(guarded.kubelet_port, "/metrics/resource", token=scraper)
    assert status == 200 and b"container_cpu_usage_seconds_total" in body
    assert get(guarded.kubelet_port, "/stats/summary", token=scraper)[0] == 403  # nodes/stats is another grant


def test_exec_with_a_token_lacking_nodes_proxy_create_is_403_before_any_upgrade(
    guarded: Listeners, kube: Kube, handler: Handler
) -> None:
    reader = service_account_token(kube, "proxy-reader")
    grant(
        kube,
        "proxy-get",
        account("proxy-reader"),
        [{"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}],
    )
    before = fake_calls(handler)
    assert spdy_exec(guarded.kubelet_port, token=reader) == 403
    assert websocket_exec(guarded.kubelet_port, token=reader) == b"HTTP/1.1 403 Forbidden"
    assert get(guarded.kubelet_port, "/pods", token=reader)[0] == 200  # GET is verb get: granted
    assert fake_calls(handler) == before  # nothing reached the provider
    connection = kubelet_connection(guarded.kubelet_port)
    try:
        connection.request("POST", EXEC, headers={"Authorization": f"Bearer {reader}", "Upgrade": "SPDY/3.1",
                                                  "Connection": "Upgrade"})  # fmt: skip
        response = connection.getresponse()
        assert response.status == 403
        assert response.read() == (
            b"Forbidden (user=system:serviceaccount:default:proxy-reader, verb=create, resource=nodes, "
            b"subresource(s)=[proxy])"
        )
    finally:
        connection.close()


def test_the_devclusters_client_certificate_passes_by_its_bootstrap_rbac(
    guarded: Listeners, cluster: DevCluster
) -> None:
    assert get(guarded.kubelet_port, "/pods", context=cluster.kubelet_tls)[0] == 200
    assert get(guarded.kubelet_port, "/metrics/resource", context=cluster.kubelet_tls)[0] == 200
    assert spdy_exec(guarded.kubelet_port, context=cluster.kubelet_tls) == 101


def test_a_certificate_the_client_ca_did_not_sign_is_401(guarded: Listeners, tmp_path: Path) -> None:
    stranger = certs.issue(certs.make_ca("another-ca"), "kube-apiserver-kubelet-client", client=True)
    assert get(guarded.kubelet_port, "/pods", context=client_context(tmp_path, stranger)) == (401, b"Unauthorized")


def test_anonymous_on_is_authorised_as_system_anonymous(anonymous: Listeners, kube: Kube) -> None:
    status, body = get(anonymous.kubelet_port, "/stats/summary")
    assert status == 403
    assert body == b"Forbidden (user=system:anonymous, verb=get, resource=nodes, subresource(s)=[stats])"
    subject = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:unauthenticated"}
    grant(kube, "anonymous-metrics", subject, [{"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]}])
    assert get(anonymous.kubelet_port, "/metrics/resource")[0] == 200
    assert get(anonymous.kubelet_port, "/metrics/resource", token="not-a-token")[0] == 401  # a bad credential stays 401


def _reviews(cluster: DevCluster) -> tuple[int, int]:
    log = cluster.request_log
    return log.count(verb="create", resource="tokenreviews"), log.count(verb="create", resource="subjectaccessreviews")


def test_a_second_request_within_the_ttl_issues_no_new_review(
    guarded: Listeners, cluster: DevCluster, kube: Kube
) -> None:
    token = service_account_token(kube, "repeat")
    grant(kube, "repeat-pods", account("repeat"), [{"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}])
    start = _reviews(cluster)
    assert get(guarded.kubelet_port, "/pods", token=token)[0] == 200
    first = _reviews(cluster)
    assert (first[0] - start[0], first[1] - start[1]) == (1, 1)  # one TokenReview, one SAR (one node)
    assert get(guarded.kubelet_port, "/pods", token=token)[0] == 200
    assert get(guarded.kubelet_port, "/runningpods/", token=token)[0] == 200  # the same access: nodes/proxy get
    assert _reviews(cluster) == first


def test_reviews_are_cached_for_the_kubelets_default_ttls(cluster: DevCluster, kube: Kube, handler: Handler) -> None:
    clock = ManualClock(1000.0)
    gate = auth.Gate(auth.KubeletAuth(kube=kube), HandlerRegistry([handler]), monotonic=clock)
    token = service_account_token(kube, "ttl")
    grant(kube, "ttl-metrics", account("ttl"), [{"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]}])
    presented = auth.Credentials(token=token)

    def reviews_for(path: str, after: float) -> tuple[int, int]:
        clock.now += after
        before = _reviews(cluster)
        gate.decide(presented, "GET", path)
        now = _reviews(cluster)
        return now[0] - before[0], now[1] - before[1]

    assert reviews_for("/metrics/resource", 0) == (1, 1)
    assert reviews_for("/stats/summary", 0) == (0, 1)  # denied: cached 30 s
    assert reviews_for("/stats/summary", 29) == (0, 0)
    assert reviews_for("/stats/summary", 1.5) == (0, 1)
    assert reviews_for("/metrics/resource", 88.5) == (0, 0)  # t=119
    assert reviews_for("/metrics/resource", 2) == (1, 0)  # t=121: the token's review lasts 2 min
    assert reviews_for("/metrics/resource", 178) == (1, 0)  # t=299: the allowed answer lasts 5 min
    assert reviews_for("/metrics/resource", 2) == (0, 1)  # t=301
    assert gate.decide(presented, "GET", "/metrics/resource").allowed


@pytest.mark.parametrize(
    ("method", "path", "verb", "subresource"),
    [
        ("GET", "/stats/summary", "get", "stats"),
        ("GET", "/metrics/resource", "get", "metrics"),
        ("HEAD", "/metrics", "get", "metrics"),
        ("GET", "/logs/", "get", "log"),
        ("GET", "/spec/", "get", "spec"),
        ("POST", "/exec/default/p/c", "create", "proxy"),
        ("GET", "/exec/default/p/c", "create", "proxy"),  # a websocket exec: stricter than the kubelet
        ("GET", "/attach/default/p/c", "create", "proxy"),
        ("POST", "/portForward/default/p", "create", "proxy"),
        ("GET", "/containerLogs/default/p/c", "get", "proxy"),
        ("GET", "/pods", "get", "proxy"),
        ("GET", "/runningpods/", "get", "proxy"),
        ("PUT", "/healthz", "update", "proxy"),
        ("PATCH", "/statsz", "patch", "proxy"),
        ("DELETE", "/%73tats/summary", "delete", "stats"),
    ],
)
def test_the_kubelets_resource_mapping(method: str, path: str, verb: str, subresource: str) -> None:
    expected = [Access(verb, resource="nodes", subresource=subresource, name="nebula-x")]
    assert auth.accesses(method, path, ["nebula-x"]) == expected


def test_a_pod_route_names_the_node_serving_the_pod_and_a_node_route_every_node(handler: Handler) -> None:
    other = offline_handler(FakeProvider("authother", {"cloud": f"auth-{uuid.uuid4().hex}", "scenario": {}}))
    gate = auth.Gate(auth.OPEN, HandlerRegistry([handler, other]))
    assert gate.nodes_for("/exec/default/target/main") == ["nebula-authfake"]
    assert gate.nodes_for("/metrics/resource") == ["nebula-authfake", "nebula-authother"]
    assert gate.nodes_for("/exec/default/nobody/main") == ["nebula-authfake", "nebula-authother"]
    assert auth.Gate(auth.OPEN, HandlerRegistry()).nodes_for("/pods") == [""]  # no node: every node


def test_credentials_never_show_the_token() -> None:
    assert "s3cret" not in repr(auth.Credentials(token="s3cret"))
    assert auth.bearer_token("Bearer  s3cret ") == "s3cret"
    assert auth.bearer_token("Basic czNjcmV0") is None and auth.bearer_token("Bearer ") is None


def test_an_inconsistent_configuration_is_refused() -> None:
    with pytest.raises(ValueError, match="Webhook or AlwaysAllow"):
        auth.KubeletAuth(authorization="RBAC", token_auth=False)
    with pytest.raises(ValueError, match="need an API server client"):
        auth.KubeletAuth()
    assert auth.OPEN.open and not auth.KubeletAuth(authorization=auth.ALWAYS_ALLOW, token_auth=False).open


def test_every_namespace_has_the_cluster_ca_that_signed_the_kubelet_client_certificate(
    cluster: DevCluster, kube: Kube
) -> None:
    """kube-root-ca.crt, as kube-controller-manager publishes it: what deploy/ mounts as the
    manager's --kubelet-client-ca, and the CA of the devcluster's kubelet client certificate."""
    kube.create(path_for("namespaces"), {"metadata": {"name": "fresh"}})

    def published(namespace: str) -> dict[str, Any]:
        path = path_for("configmaps", namespace=namespace, name="kube-root-ca.crt")
        found: dict[str, Any] = wait_for(lambda: kube.get(path), 10, ignoring=(KubeError,))
        return found

    for namespace in ("default", "kube-system", "fresh"):
        assert published(namespace)["data"]["ca.crt"].encode() == cluster.ca_pem == cluster.kubelet_client_ca_pem
    kube.delete(path_for("configmaps", namespace="fresh", name="kube-root-ca.crt"))
    assert published("fresh")["data"]["ca.crt"].encode() == cluster.ca_pem  # put back


def test_I4_a_bearer_token_never_reaches_the_log(
    guarded: Listeners, kube: Kube, caplog: pytest.LogCaptureFixture
) -> None:
    token = service_account_token(kube, "quiet")
    with caplog.at_level(logging.DEBUG):
        assert get(guarded.kubelet_port, "/stats/summary", token=token)[0] == 403
        assert get(guarded.kubelet_port, "/pods", token=token + "x")[0] == 401
        assert spdy_exec(guarded.kubelet_port, token=token) == 403
    assert "quiet" in caplog.text  # the refusal is logged, by user name
    assert token not in caplog.text and token[:16] not in caplog.text


def test_I7_the_review_caches_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth, "MAX_CACHED", 8)
    cache = auth._Cache(ManualClock(1000.0))
    for n in range(20):
        cache.put(n, True, 60.0)
    assert len(cache._entries) <= 8 and cache.get(19) == (True, True)


def test_I7_requests_past_the_waiting_bound_are_503_at_once_and_nothing_more_is_queued(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(auth, "MAX_WAITING", 8)
    gate = auth.Gate(auth.OPEN, HandlerRegistry())
    release = threading.Event()

    def slow(credentials: auth.Credentials, method: str, raw_path: str) -> auth.Decision:
        release.wait(30)
        return auth.Decision(200)

    monkeypatch.setattr(gate, "decide", slow)
    nobody = auth.Credentials(None, "", None)
    try:
        held = [gate.submit(nobody, "GET", "/pods") for _ in range(8)]
        refused = gate.submit(nobody, "GET", "/pods")
        assert refused.done() and refused.result().code == 503
        assert "8 kubelet requests are waiting" in refused.result().message
        assert gate.waiting == 8 and gate.refused == 1
        release.set()
        assert [f.result(30).code for f in held] == [200] * 8
        wait_for(lambda: gate.waiting == 0, 10, 0.01, what="every waiting request decided")
        assert gate.submit(nobody, "GET", "/pods").result(30).code == 200  # room again
    finally:
        release.set()
        gate.close()
