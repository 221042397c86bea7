"""Logins by Kubernetes identity, end to end: tokens from real `kubectl create token` on the
embedded API server, the REST API over the real HTTPS listener and the admin through Django's
test client, both asking the cluster (TokenReview, SubjectAccessReview over real HTTP) with
the rendered `nebula-console-viewer` / `nebula-console-operator` roles. A token with the
operator role reads and clears a block, audited with its Kubernetes name (log line, admin
LogEntry, placement's Event); one without RBAC gets 403 naming the permission; a garbage or
expired token 401; an unreachable API server 503; the token is never stored or logged."""

from __future__ import annotations

import http.client
import json
import logging
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.test import Client

from console import kubeauth, kubelogin, runtime
from console.mirror import Mirror
from console.observer import ConsoleObserver
from devcluster import DevCluster
from kube import names
from kube.client import Kube, path_for
from kube.reviews import Reviewer
from providers.base import BlockBreadth, BlockScope, Tier
from tests.support.clients.kubectl import run_kubectl
from tests.support.clock import ManualClock
from tests.support.fixtures import ROOT, kube_for
from tests.support.polling import wait_for
from tests.support.rigs.placement import Stack, events_for
from tests.support.servers.tls import TlsWsgiServer

TTL = 10.0
RBAC = "rbac.authorization.k8s.io"
NAMESPACE = "team"


@pytest.fixture
def clock(cluster: DevCluster) -> Iterator[ManualClock]:
    """The process's Reviewer on the cluster (as `process.run` installs it), its TTL on a clock
    the test moves."""
    moved = ManualClock(1000.0)
    kubeauth.install(Reviewer(kube_for(cluster), ttl=TTL, monotonic=moved))
    yield moved
    kubeauth.uninstall()


@pytest.fixture
def live(stack: Stack, kube: Kube, cluster: DevCluster, observer: ConsoleObserver) -> Iterator[dict[str, Any]]:
    """Placement and the Handlers published, the console roles applied, namespace `team`, and
    one blocklist entry (mirrored for the admin)."""
    runtime.install(handlers=[r.handler for r in stack.runners], placement=stack.placement)
    cluster.load_manifests((ROOT / "deploy/base/console-roles.yaml").read_text())
    kube.create(path_for("namespaces"), {"metadata": {"name": NAMESPACE}})
    scope = BlockScope("gpu-a", BlockBreadth.OFFERING, Tier.SPOT, "h100", "us-east-1", "NoCapacity: full")
    stack.blocklist.record("gpu-a", scope)
    Mirror(runtime.current, observer=lambda: observer).sync_once()
    yield {"entry": stack.blocklist.entries()[0].id, "blocklist": stack.blocklist}
    runtime.clear()


def service_account(kube: Kube, name: str, role: str | None = None) -> str:
    """A ServiceAccount in `team`, bound cluster-wide to `role` when given; its user name."""
    kube.create(path_for("serviceaccounts", namespace=NAMESPACE), {"metadata": {"name": name}})
    if role:
        binding = {
            "metadata": {"name": f"{name}-{role}"},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}],
        }
        kube.create(path_for("clusterrolebindings", group=RBAC), binding)
    return f"system:serviceaccount:{NAMESPACE}:{name}"


def kubectl(cluster: DevCluster, tmp_path: Path, *args: str) -> str:
    assert cluster.kubeconfig_path
    done = run_kubectl(cluster.kubeconfig_path, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def operator_token(cluster: DevCluster, tmp_path: Path, name: str) -> str:
    """What docs/console.md tells a person to run: a ServiceAccount, a binding to the operator
    role, `kubectl create token`. Returns the token."""
    kubectl(cluster, tmp_path, "create", "serviceaccount", name, "-n", NAMESPACE)
    role = "--clusterrole=nebula-console-operator"
    binding = f"{name}-nebula-console-operator"
    kubectl(cluster, tmp_path, "create", "clusterrolebinding", binding, role, f"--serviceaccount={NAMESPACE}:{name}")
    return kubectl(cluster, tmp_path, "create", "token", name, "-n", NAMESPACE)


def api_token(kube: Kube, name: str) -> str:
    path = path_for("serviceaccounts", namespace=NAMESPACE, name=name, subresource="token")
    answer = kube.create(path, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})
    return str(answer["status"]["token"])


def call(console: TlsWsgiServer, method: str, path: str, token: str) -> tuple[int, Any]:
    """One request to the console's real HTTPS listener with `Authorization: Bearer <token>`."""
    port = int(console.url.rsplit(":", 1)[1])
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=console.client_context(), timeout=30)
    try:
        connection.request(method, path, headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
        response = connection.getresponse()
        body = response.read()
        return response.status, json.loads(body) if body else None
    finally:
        connection.close()


def test_an_operator_token_reads_the_api_and_clears_a_block_audited_by_its_name(
    db: Any,
    cluster: DevCluster,
    kube: Kube,
    live: dict[str, Any],
    console: TlsWsgiServer,
    clock: ManualClock,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    user = f"system:serviceaccount:{NAMESPACE}:ops-bot"
    token = operator_token(cluster, tmp_path, "ops-bot")
    entry = live["entry"]
    with caplog.at_level(logging.INFO):
        for path in ("/api/pods/", "/api/claims/", "/api/nodes/", "/api/pools/"):
            status, body = call(console, "GET", path, token)
            assert status == 200 and "results" in body, (path, body)
        status, listed = call(console, "GET", "/api/blocklist/", token)
        assert status == 200 and [e["id"] for e in listed["results"]] == [entry]
        assert call(console, "GET", f"/api/blocklist/{entry}", token)[0] == 200
        assert call(console, "DELETE", f"/api/blocklist/{entry}", token)[0] == 204
    assert live["blocklist"].get(entry) is None
    assert call(console, "GET", f"/api/blocklist/{entry}", token)[0] == 404
    assert f"blocklist entry {entry} (gpu-a h100 Spot us-east-1) cleared by {user}" in caplog.text
    cleared = wait_for(lambda: events_for(kube, names.EVENT_BLOCK_CLEARED), what="the BlockCleared Event")
    assert f"cleared by {user}" in cleared[0]["message"]
    assert token not in caplog.text
    status, schema = call(console, "GET", "/api/schema/?format=json", token)
    assert status == 200 and schema["components"]["securitySchemes"]["kubernetesToken"]["scheme"] == "bearer"


def test_a_token_without_the_right_rbac_is_403_naming_the_missing_permission(
    db: Any, kube: Kube, live: dict[str, Any], console: TlsWsgiServer, clock: ManualClock
) -> None:
    nobody = service_account(kube, "nobody")
    token = api_token(kube, "nobody")
    entry = live["entry"]
    status, body = call(console, "GET", "/api/pods/", token)
    assert status == 403
    assert body["detail"] == f'User "{nobody}" cannot get resource "pods" in API group "nebula.io"'
    status, body = call(console, "DELETE", f"/api/blocklist/{entry}", token)
    assert status == 403 and "cannot clear" in body["detail"]

    viewer = service_account(kube, "viewer", "nebula-console-viewer")
    token = api_token(kube, "viewer")
    assert call(console, "GET", "/api/blocklist/", token)[0] == 200
    status, body = call(console, "DELETE", f"/api/blocklist/{entry}", token)
    assert status == 403
    assert body["detail"] == (
        f'User "{viewer}" cannot clear resource "blocklist" named "{entry}" in API group "nebula.io"'
    )
    assert live["blocklist"].get(entry) is not None


def test_the_schema_and_the_docs_need_the_consoles_read_permission_not_just_any_identity(
    db: Any, kube: Kube, live: dict[str, Any], console: TlsWsgiServer, clock: ManualClock
) -> None:
    nobody = service_account(kube, "nobody")
    token = api_token(kube, "nobody")
    status, body = call(console, "GET", "/api/schema/?format=json", token)
    assert status == 403
    assert body["detail"] == f'User "{nobody}" cannot get resource "console" in API group "nebula.io"'
    assert fetch_docs(console, token) == 403
    service_account(kube, "viewer", "nebula-console-viewer")
    token = api_token(kube, "viewer")
    status, schema = call(console, "GET", "/api/schema/?format=json", token)
    assert status == 200 and "/api/pods/" in schema["paths"]
    assert fetch_docs(console, token) == 200


def fetch_docs(console: TlsWsgiServer, token: str) -> int:
    """The status of /api/docs/ as a browser asks it (the page renders only HTML)."""
    port = int(console.url.rsplit(":", 1)[1])
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=console.client_context(), timeout=30)
    try:
        connection.request("GET", "/api/docs/", headers={"Authorization": f"Bearer {token}", "Accept": "text/html"})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def test_garbage_and_expired_tokens_are_401_and_an_unreachable_cluster_503(
    db: Any,
    cluster: DevCluster,
    kube: Kube,
    live: dict[str, Any],
    console: TlsWsgiServer,
    clock: ManualClock,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    service_account(kube, "ops-bot", "nebula-console-operator")
    status, body = call(console, "GET", "/api/pods/", "garbage")
    assert status == 401 and "invalid or expired" in body["detail"]
    expired = api_token(kube, "ops-bot")  # one hour
    cluster.tokens.clock = lambda: datetime.now(UTC) + timedelta(hours=2)
    assert call(console, "GET", "/api/pods/", expired)[0] == 401
    cluster.tokens.clock = lambda: datetime.now(UTC)

    with DevCluster(kubeconfig_path=str(tmp_path / "gone")) as gone:
        unreachable = kube_for(gone)
    kubeauth.install(Reviewer(unreachable))
    fresh = api_token(kube, "ops-bot")
    with caplog.at_level(logging.INFO):
        status, body = call(console, "GET", "/api/pods/", fresh)
    assert status == 503 and "could not review the token" in body["detail"]
    assert "TokenReview failed" in caplog.text and fresh not in caplog.text


def login(client: Client, token: str) -> Any:
    page = client.get("/admin/login/?next=/admin/")
    assert page.status_code == 200 and 'name="token"' in page.content.decode()
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode())
    assert csrf is not None
    return client.post(
        "/admin/login/?next=/admin/", {"csrfmiddlewaretoken": csrf.group(1), "token": token, "next": "/admin/"}
    )


def csrf_of(page: Any) -> str:
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode())
    assert found is not None
    return found.group(1)


def test_the_admin_login_takes_a_token_and_rbac_decides_until_it_is_removed(
    db: Any,
    cluster: DevCluster,
    kube: Kube,
    live: dict[str, Any],
    clock: ManualClock,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    user = f"system:serviceaccount:{NAMESPACE}:ops-bot"
    token = operator_token(cluster, tmp_path, "ops-bot")
    client = Client(enforce_csrf_checks=True)
    with caplog.at_level(logging.INFO):
        done = login(client, token)
    assert done.status_code == 302 and done["Location"] == "/admin/", done.content.decode()[-2000:]
    shadow = User.objects.get(username=kubelogin.shadow_username(user))
    assert shadow.username == f"kube:{user}" and not shadow.has_usable_password() and not shadow.is_superuser
    assert all(token not in str(s.get_decoded()) for s in Session.objects.all())
    assert client.get("/admin/console/blocklistentry/").status_code == 200
    assert client.get("/").status_code == 200  # the dashboard

    entry = live["entry"]
    url = f"/admin/console/blocklistentry/{entry}/clear/"
    with caplog.at_level(logging.INFO):
        assert client.post(url, {"csrfmiddlewaretoken": csrf_of(client.get(url))}).status_code == 302
    assert live["blocklist"].get(entry) is None
    assert f"cleared by {user}" in caplog.text and token not in caplog.text
    audit = LogEntry.objects.get()
    assert audit.user == shadow and user in audit.change_message
    wait_for(lambda: events_for(kube, names.EVENT_BLOCK_CLEARED), what="the BlockCleared Event")

    # RBAC removed: the session keeps working until the Reviewer's TTL, then is logged out.
    kube.delete(path_for("clusterrolebindings", group=RBAC, name="ops-bot-nebula-console-operator"))
    assert client.get("/admin/console/blocklistentry/").status_code == 200
    clock.advance(TTL)
    gone = client.get("/admin/console/blocklistentry/")
    assert gone.status_code == 302 and gone["Location"].startswith("/admin/login/")


def test_the_admin_refuses_tokens_without_rbac_and_a_viewer_cannot_clear(
    db: Any, kube: Kube, live: dict[str, Any], clock: ManualClock
) -> None:
    nobody = service_account(kube, "nobody")
    refused = login(Client(), api_token(kube, "nobody"))
    assert refused.status_code == 200
    assert f"User &quot;{nobody}&quot; cannot get resource &quot;console&quot;" in refused.content.decode()
    assert "This console does not" not in refused.content.decode()
    garbage = login(Client(), "garbage")
    assert "does not accept this token" in garbage.content.decode()

    service_account(kube, "viewer", "nebula-console-viewer")
    client = Client()
    assert login(client, api_token(kube, "viewer")).status_code == 302
    entry = live["entry"]
    assert client.get("/admin/console/blocklistentry/").status_code == 200
    assert client.post(f"/admin/console/blocklistentry/{entry}/clear/").status_code == 403
    assert live["blocklist"].get(entry) is not None

    # Django users log in with passwords as before.
    User.objects.create_user("ops", password="pw-ops-12345", is_staff=True)
    staff = Client()
    page = staff.get("/admin/login/")
    assert page.status_code == 200
    done = staff.post("/admin/login/?next=/admin/", {"username": "ops", "password": "pw-ops-12345", "next": "/admin/"})
    assert done.status_code == 302
    assert staff.post(f"/admin/console/blocklistentry/{entry}/clear/").status_code == 302
    assert live["blocklist"].get(entry) is None
