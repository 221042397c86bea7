"""kube.reviews against the embedded API server over real HTTPS: a ServiceAccount token is
reviewed into its user, RBAC decides `allowed` (resource and non-resource), the Reviewer
caches both answers for its TTL (counted in the request log) and re-asks after it, and a
review that cannot be made raises KubeError instead of answering no; a closed client
reconnects when used again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devcluster import DevCluster
from kube.client import Kube, KubeError, UnreachableError, load_api_client, path_for
from kube.reviews import Access, KubeUser, Reviewer, allowed, review_token
from tests.support.clock import ManualClock
from tests.support.fixtures import kube_for

RBAC = "rbac.authorization.k8s.io"
BOT = "system:serviceaccount:default:bot"


def token_for(kube: Kube, name: str = "bot", **spec: Any) -> str:
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    answer = kube.create(path_for("serviceaccounts", namespace="default", name=name, subresource="token"), body)
    return str(answer["status"]["token"])


@pytest.fixture
def bot(kube: Kube) -> dict[str, Any]:
    return kube.create(path_for("serviceaccounts", namespace="default"), {"metadata": {"name": "bot"}})


def grant(kube: Kube, rules: list[dict[str, Any]]) -> None:
    """A ClusterRole with `rules` bound to default/bot."""
    kube.create(path_for("clusterroles", group=RBAC), {"metadata": {"name": "bot-role"}, "rules": rules})
    binding = {
        "metadata": {"name": "bot-role"},
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "bot-role"},
        "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "default"}],
    }
    kube.create(path_for("clusterrolebindings", group=RBAC), binding)


def test_review_token_names_the_service_account(kube: Kube, bot: dict[str, Any]) -> None:
    user = review_token(kube, token_for(kube))
    assert user == KubeUser(
        name=BOT,
        uid=bot["metadata"]["uid"],
        groups=("system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"),
    )
    assert review_token(kube, "garbage") is None
    assert review_token(kube, token_for(kube, audiences=["nebula"])) is None
    assert review_token(kube, token_for(kube, audiences=["nebula"]), audiences=["nebula"]) is not None


def test_allowed_asks_rbac_for_resources_names_and_paths(kube: Kube, bot: dict[str, Any]) -> None:
    user = review_token(kube, token_for(kube))
    assert user is not None
    clear = Access("clear", group="nebula.io", resource="blocklist", name="3")
    assert not allowed(kube, user, clear)
    grant(
        kube,
        [
            {"apiGroups": ["nebula.io"], "resources": ["blocklist"], "verbs": ["clear"], "resourceNames": ["3"]},
            {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
        ],
    )
    assert allowed(kube, user, clear)
    assert not allowed(kube, user, Access("clear", group="nebula.io", resource="blocklist", name="4"))
    assert allowed(kube, user, Access("get", path="/metrics"))
    assert not allowed(kube, user, Access("get", path="/debug"))


def test_the_reviewer_caches_answers_for_its_ttl(cluster: DevCluster, kube: Kube, bot: dict[str, Any]) -> None:
    clock = ManualClock(100.0)
    reviewer = Reviewer(kube, ttl=10.0, monotonic=clock)
    token = token_for(kube)
    log = cluster.request_log
    user = reviewer.user(token)
    assert user is not None and user.name == BOT
    assert reviewer.user(token) == user and reviewer.user("garbage") is None and reviewer.user("garbage") is None
    assert log.count(resource="tokenreviews") == 2  # one per distinct token, yes and no both cached

    access = Access("get", group="nebula.io", resource="pods")
    assert reviewer.allows(user, access) is False
    grant(kube, [{"apiGroups": ["nebula.io"], "resources": ["pods"], "verbs": ["get"]}])
    assert reviewer.allows(user, access) is False  # still the cached no
    assert log.count(resource="subjectaccessreviews") == 1
    clock.advance(10.0)
    assert reviewer.allows(user, access) is True
    assert reviewer.user(token) == user
    assert log.count(resource="subjectaccessreviews") == 2 and log.count(resource="tokenreviews") == 3


def test_a_review_that_cannot_be_made_raises(
    cluster: DevCluster, kube: Kube, bot: dict[str, Any], tmp_path: Path
) -> None:
    token = token_for(kube)
    # A caller without `create tokenreviews` is refused (403), which is not a "no".
    assert cluster.kubeconfig_path
    config = Path(cluster.kubeconfig_path).read_text().replace(cluster.token, token)
    (tmp_path / "bot-kubeconfig").write_text(config)

    as_bot = Kube(load_api_client(str(tmp_path / "bot-kubeconfig")))
    with pytest.raises(KubeError) as refused:
        review_token(as_bot, token)
    assert refused.value.status == 403

    with DevCluster(kubeconfig_path=str(tmp_path / "gone")) as gone:
        unreachable = kube_for(gone)
    with pytest.raises(UnreachableError):
        Reviewer(unreachable).user(token)


def test_a_closed_client_drops_its_pooled_connections_and_reconnects_when_used_again(cluster: DevCluster) -> None:
    client = kube_for(cluster, pool_size=2)
    assert client.get(path_for("namespaces", name="default"))["metadata"]["name"] == "default"
    pools = client._api.rest_client.pool_manager.pools
    assert len(pools) == 1
    client.close()
    assert len(pools) == 0  # the pool and its sockets are closed, not left for the collector
    assert client.get(path_for("namespaces", name="default"))["metadata"]["name"] == "default"
