"""ServiceAccount tokens, TokenReview and SubjectAccessReview on the embedded API server, over
real HTTPS: tokens from real `kubectl create token`, `kubectl auth can-i` (SelfSubjectAccessReview),
and the reviews answered from the stored RBAC objects by the devcluster's authorizer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from devcluster import DevCluster
from devcluster.tokens import ADMIN_USER, API_AUDIENCE
from tests.support.clients.kubectl import KUBECTL_137, KUBECTL_IMAGE, run_kubectl
from tests.support.clients.rawhttp import Raw

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
BOT = "system:serviceaccount:team:bot"


def kubectl(binary: str, cluster: DevCluster, tmp_path: Path, *args: str, ok: bool = True) -> str:
    if not Path(binary).exists():
        pytest.skip(f"kubectl is not installed at {binary}")
    assert cluster.kubeconfig_path
    done = run_kubectl(cluster.kubeconfig_path, *args, binary=binary)
    if ok:
        assert done.returncode == 0, f"kubectl {' '.join(args)} failed: {done.stderr}"
        return done.stdout
    assert done.returncode != 0, done.stdout
    return done.stderr


def admin(cluster: DevCluster) -> dict[str, str]:
    return {"Authorization": f"Bearer {cluster.token}"}


def create(raw: Raw, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, obj = raw.json("POST", path, body, headers=admin(raw.cluster))
    assert status == 201, obj
    return dict(obj)


@pytest.fixture
def bot(raw: Raw) -> dict[str, Any]:
    """The ServiceAccount team/bot (namespace team)."""
    create(raw, "/api/v1/namespaces", {"metadata": {"name": "team"}})
    return create(raw, "/api/v1/namespaces/team/serviceaccounts", {"metadata": {"name": "bot"}})


def review(raw: Raw, token: str, audiences: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"token": token}
    if audiences is not None:
        spec["audiences"] = audiences
    answer = create(raw, TOKEN_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec})
    assert "token" not in answer["spec"]  # never echoed back
    return dict(answer["status"])


def request_token(raw: Raw, name: str = "bot", **spec: Any) -> tuple[int, Any]:
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    return raw.json("POST", f"/api/v1/namespaces/team/serviceaccounts/{name}/token", body, headers=admin(raw.cluster))


def access(raw: Raw, user: str, groups: list[str] | None = None, **attributes: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"user": user, "groups": groups or []}
    if "path" in attributes:
        spec["nonResourceAttributes"] = attributes
    else:
        spec["resourceAttributes"] = attributes
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
    return dict(create(raw, ACCESS_REVIEWS, body)["status"])


def role(raw: Raw, name: str, rules: list[dict[str, Any]], *, namespace: str = "") -> None:
    kind = "Role" if namespace else "ClusterRole"
    where = f"/namespaces/{namespace}" if namespace else ""
    create(raw, f"{RBAC}{where}/{kind.lower()}s", {"metadata": {"name": name}, "rules": rules})


def bind(raw: Raw, name: str, role_kind: str, role_name: str, subject: dict[str, str], *, namespace: str = "") -> None:
    kind = "RoleBinding" if namespace else "ClusterRoleBinding"
    where = f"/namespaces/{namespace}" if namespace else ""
    body = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
        "subjects": [subject],
    }
    create(raw, f"{RBAC}{where}/{kind.lower()}s", body)


SA_SUBJECT = {"kind": "ServiceAccount", "name": "bot", "namespace": "team"}


KUBECTLS = [KUBECTL_137, KUBECTL_IMAGE]


@pytest.mark.parametrize("binary", KUBECTLS)
def test_kubectl_create_token_authenticates_as_the_service_account(
    binary: str, cluster: DevCluster, raw: Raw, bot: dict[str, Any], tmp_path: Path
) -> None:
    token = kubectl(binary, cluster, tmp_path, "create", "token", "bot", "-n", "team").strip()
    status = review(raw, token)
    assert status["authenticated"] is True
    assert status["user"] == {
        "username": BOT,
        "uid": bot["metadata"]["uid"],
        "groups": ["system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"],
    }
    assert status["audiences"] == [API_AUDIENCE]
    # The flags reach the TokenRequest's spec (kubectl 1.32+ sends it as protobuf).
    args = ("create", "token", "bot", "-n", "team", "--audience=nebula", "--duration=20m")
    aimed = kubectl(binary, cluster, tmp_path, *args).strip()
    assert review(raw, aimed)["authenticated"] is False
    assert review(raw, aimed, ["nebula"])["audiences"] == ["nebula"]
    cluster.tokens.clock = lambda: datetime.now(UTC) + timedelta(minutes=21)
    assert review(raw, aimed, ["nebula"])["authenticated"] is False
    cluster.tokens.clock = lambda: datetime.now(UTC)
    missing = kubectl(binary, cluster, tmp_path, "create", "token", "nobody", "-n", "team", ok=False)
    assert 'serviceaccounts "nobody" not found' in missing
    short = kubectl(binary, cluster, tmp_path, "create", "token", "bot", "-n", "team", "--duration=1m", ok=False)
    assert "may not specify a duration less than 10 minutes" in short


def test_a_token_request_honours_expiration_and_audiences(cluster: DevCluster, raw: Raw, bot: dict[str, Any]) -> None:
    issued_at = datetime(2030, 1, 1, tzinfo=UTC)
    cluster.tokens.clock = lambda: issued_at
    status, answer = request_token(raw, expirationSeconds=1200, audiences=["nebula"])
    assert status == 201, answer
    assert answer["kind"] == "TokenRequest" and answer["spec"]["expirationSeconds"] == 1200
    assert answer["status"]["expirationTimestamp"] == "2030-01-01T00:20:00Z"
    token = answer["status"]["token"]
    assert review(raw, token)["authenticated"] is False  # not for the API server's audience
    accepted = review(raw, token, ["nebula", "other"])
    assert accepted["authenticated"] is True and accepted["audiences"] == ["nebula"]

    cluster.tokens.clock = lambda: issued_at + timedelta(seconds=1199)
    assert review(raw, token, ["nebula"])["authenticated"] is True
    cluster.tokens.clock = lambda: issued_at + timedelta(seconds=1200)
    expired = review(raw, token, ["nebula"])
    assert expired["authenticated"] is False and "expired" in expired["error"]


def test_bad_requests_are_refused_with_a_clear_error(raw: Raw, bot: dict[str, Any]) -> None:
    assert request_token(raw, "nobody")[0] == 404
    status, answer = request_token(raw, expirationSeconds="soon")
    assert status == 422 and "expirationSeconds" in answer["message"]
    assert request_token(raw, expirationSeconds=1 << 40)[0] == 422
    status, answer = request_token(raw, audiences="nebula")
    assert status == 422 and "spec.audiences: Invalid value: must be a list of strings" in answer["message"]
    review_body = {"kind": "TokenReview", "spec": {"token": "x", "audiences": [1]}}
    assert raw.json("POST", TOKEN_REVIEWS, review_body, headers=admin(raw.cluster))[0] == 422
    access_body = {"kind": "SubjectAccessReview", "spec": {"user": "u", "resourceAttributes": "pods"}}
    assert raw.json("POST", ACCESS_REVIEWS, access_body, headers=admin(raw.cluster))[0] == 400
    neither = {"kind": "SubjectAccessReview", "spec": {"user": "u"}}
    assert raw.json("POST", ACCESS_REVIEWS, neither, headers=admin(raw.cluster))[0] == 422
    nobody = {"kind": "SubjectAccessReview", "spec": {"resourceAttributes": {"verb": "get"}}}
    assert raw.json("POST", ACCESS_REVIEWS, nobody, headers=admin(raw.cluster))[0] == 422
    code, _ = raw.json("GET", "/api/v1/namespaces/team/serviceaccounts/bot/token", headers=admin(raw.cluster))
    assert code == 405


def test_deleting_the_service_account_invalidates_its_tokens(raw: Raw, bot: dict[str, Any]) -> None:
    _, answer = request_token(raw)
    token = answer["status"]["token"]
    assert review(raw, token)["authenticated"] is True
    status, _ = raw.json("DELETE", "/api/v1/namespaces/team/serviceaccounts/bot", headers=admin(raw.cluster))
    assert status == 200
    assert review(raw, token)["authenticated"] is False
    create(raw, "/api/v1/namespaces/team/serviceaccounts", {"metadata": {"name": "bot"}})
    assert review(raw, token)["authenticated"] is False  # a new ServiceAccount of the same name


def test_the_admin_token_is_a_system_masters_user_and_garbage_is_nobody(cluster: DevCluster, raw: Raw) -> None:
    status = review(raw, cluster.token)
    assert status["authenticated"] is True
    assert status["user"]["username"] == ADMIN_USER and "system:masters" in status["user"]["groups"]
    assert review(raw, "not-a-token")["authenticated"] is False
    assert access(raw, ADMIN_USER, ["system:masters"], verb="delete", resource="nodes")["allowed"] is True


def test_subject_access_reviews_follow_the_stored_rbac(raw: Raw, bot: dict[str, Any]) -> None:
    create(raw, "/api/v1/namespaces", {"metadata": {"name": "other"}})
    assert access(raw, BOT, verb="get", resource="pods", namespace="team")["allowed"] is False
    role(raw, "pod-reader", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}], namespace="team")
    bind(raw, "read", "Role", "pod-reader", SA_SUBJECT, namespace="team")
    allowed = access(raw, BOT, verb="get", resource="pods", namespace="team")
    assert allowed == {
        "allowed": True,
        "reason": 'RBAC: allowed by RoleBinding "team/read" of Role "pod-reader" to ServiceAccount "team/bot"',
    }
    assert access(raw, BOT, verb="get", resource="pods", namespace="other")["allowed"] is False
    assert access(raw, BOT, verb="delete", resource="pods", namespace="team")["allowed"] is False
    assert access(raw, BOT, verb="get", resource="pods", subresource="log", namespace="team")["allowed"] is False

    rules = [
        {"apiGroups": ["nebula.io"], "resources": ["blocklist"], "verbs": ["clear"], "resourceNames": ["7"]},
        {"nonResourceURLs": ["/metrics", "/debug/*"], "verbs": ["get"]},
    ]
    role(raw, "operator", rules)
    bind(raw, "operators", "ClusterRole", "operator", {"kind": "Group", "name": "ops"})
    ops = ["ops", "system:authenticated"]
    assert access(raw, "ada", ops, verb="clear", group="nebula.io", resource="blocklist", name="7")["allowed"] is True
    assert access(raw, "ada", ops, verb="clear", group="nebula.io", resource="blocklist", name="8")["allowed"] is False
    assert access(raw, "ada", ops, verb="clear", group="nebula.io", resource="blocklist")["allowed"] is False
    assert access(raw, "ada", ops, verb="get", path="/metrics")["allowed"] is True
    assert access(raw, "ada", ops, verb="get", path="/debug/pprof")["allowed"] is True
    assert access(raw, "ada", ops, verb="post", path="/metrics")["allowed"] is False
    assert access(raw, "bob", ["system:authenticated"], verb="get", path="/metrics")["allowed"] is False
    assert access(raw, "bob", ["system:authenticated"], verb="get", path="/apis/apps")["allowed"] is True  # discovery

    role(raw, "everything", [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])
    bind(raw, "root", "ClusterRole", "everything", {"kind": "User", "name": "root"})
    assert access(raw, "root", verb="patch", group="apps", resource="deployments", namespace="x")["allowed"] is True
    bind(raw, "dangling", "ClusterRole", "no-such-role", {"kind": "User", "name": "eve"})
    assert access(raw, "eve", verb="get", resource="pods")["allowed"] is False


def test_the_reviews_authenticate_and_authorize_their_caller(raw: Raw, bot: dict[str, Any]) -> None:
    _, answer = request_token(raw)
    token = answer["status"]["token"]
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
    status, denied = raw.json("POST", TOKEN_REVIEWS, body, headers={"Authorization": f"Bearer {token}"})
    assert status == 403 and denied["reason"] == "Forbidden"
    assert denied["message"] == (
        f'tokenreviews.authentication.k8s.io is forbidden: User "{BOT}" cannot create resource "tokenreviews" '
        'in API group "authentication.k8s.io" at the cluster scope'
    )
    assert raw.json("POST", TOKEN_REVIEWS, body, headers={"Authorization": "Bearer garbage"})[0] == 401
    status, anonymous = raw.json("POST", TOKEN_REVIEWS, body)
    assert status == 403 and 'User "system:anonymous"' in anonymous["message"]

    role(
        raw, "reviewer", [{"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}]
    )
    bind(raw, "reviewers", "ClusterRole", "reviewer", SA_SUBJECT)
    status, reviewed = raw.json("POST", TOKEN_REVIEWS, body, headers={"Authorization": f"Bearer {token}"})
    assert status == 201 and reviewed["status"]["user"]["username"] == BOT
    assert raw.json("GET", TOKEN_REVIEWS, headers=admin(raw.cluster))[0] == 405


@pytest.mark.parametrize("binary", KUBECTLS)
def test_kubectl_auth_can_i_asks_for_the_token_holder(
    binary: str, cluster: DevCluster, raw: Raw, bot: dict[str, Any], tmp_path: Path
) -> None:
    """kubectl creates the roles and bindings (kubectl 1.32+ in protobuf) and `auth can-i`
    asks a SelfSubjectAccessReview for the token's holder."""
    token = kubectl(binary, cluster, tmp_path, "create", "token", "bot", "-n", "team").strip()
    can_i = ("--token", token, "auth", "can-i", "list", "configmaps", "-n", "team")
    assert subprocess_answer(binary, cluster, tmp_path, *can_i) == "no"
    kubectl(binary, cluster, tmp_path, "create", "role", "cm", "-n", "team", "--verb=list", "--resource=configmaps")
    bind_args = ("create", "rolebinding", "cm", "-n", "team", "--role=cm", "--serviceaccount=team:bot")
    kubectl(binary, cluster, tmp_path, *bind_args)
    assert subprocess_answer(binary, cluster, tmp_path, *can_i) == "yes"
    other = ("--token", token, "auth", "can-i", "list", "configmaps", "-n", "default")
    assert subprocess_answer(binary, cluster, tmp_path, *other) == "no"
    kubectl(binary, cluster, tmp_path, "create", "clusterrole", "scrape", "--verb=get", "--non-resource-url=/metrics")
    cluster_bind = ("create", "clusterrolebinding", "scrape", "--clusterrole=scrape", "--serviceaccount=team:bot")
    kubectl(binary, cluster, tmp_path, *cluster_bind)
    assert access(raw, BOT, verb="get", path="/metrics")["allowed"] is True
    assert subprocess_answer(binary, cluster, tmp_path, "auth", "can-i", "delete", "nodes") == "yes"  # the admin


def subprocess_answer(binary: str, cluster: DevCluster, tmp_path: Path, *args: str) -> str:
    """kubectl auth can-i's printed answer (it exits 1 for "no")."""
    assert cluster.kubeconfig_path
    done = run_kubectl(cluster.kubeconfig_path, *args, binary=binary)
    assert done.returncode in (0, 1), done.stderr
    return done.stdout.strip()


def test_discovery_lists_the_review_and_rbac_resources(raw: Raw) -> None:
    _, authn = raw.json("GET", "/apis/authentication.k8s.io/v1")
    assert [(r["name"], r["verbs"]) for r in authn["resources"]] == [("tokenreviews", ["create"])]
    _, authz = raw.json("GET", "/apis/authorization.k8s.io/v1")
    assert {r["name"] for r in authz["resources"]} == {"subjectaccessreviews", "selfsubjectaccessreviews"}
    _, core = raw.json("GET", "/api/v1")
    token = next(r for r in core["resources"] if r["name"] == "serviceaccounts/token")
    assert token["kind"] == "TokenRequest" and token["verbs"] == ["create"]
    _, rbac = raw.json("GET", "/apis/rbac.authorization.k8s.io/v1")
    assert {r["name"] for r in rbac["resources"]} == {"roles", "rolebindings", "clusterroles", "clusterrolebindings"}
