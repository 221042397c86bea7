"""Every namespace has a ServiceAccount `default` (existing ones and later ones, put back when
deleted), so `kubectl create token default` works, and the token it prints authenticates:
TokenReview says system:serviceaccount:<ns>:default and the API server knows the caller."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from devcluster import DevCluster
from tests.devcluster.test_kubectl import Kubectl, kubectl_for
from tests.support.polling import wait_for

TOKEN_REVIEW = """{{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
 "spec": {{"token": "{token}"}}}}"""


@pytest.fixture(params=["1.37", "1.32"])
def kubectl(request: Any, cluster: DevCluster, tmp_path: Path) -> Kubectl:
    return kubectl_for(request.param, cluster, tmp_path)


def _review(kubectl: Kubectl, tmp_path: Path, token: str) -> dict[str, Any]:
    manifest = tmp_path / "review.json"
    manifest.write_text(TOKEN_REVIEW.format(token=token))
    answer: dict[str, Any] = json.loads(kubectl.run("create", "-f", str(manifest), "-o", "json"))
    return answer


def test_every_initial_namespace_has_a_default_serviceaccount(cluster: DevCluster) -> None:
    for namespace in ("default", "kube-system", "kube-public", "kube-node-lease"):
        account = cluster.store.get("/serviceaccounts", namespace, "default")
        assert account is not None and account["metadata"]["uid"]


def test_kubectl_create_token_default_gives_a_token_the_server_authenticates(kubectl: Kubectl, tmp_path: Path) -> None:
    token = kubectl.run("create", "token", "default").strip()
    review = _review(kubectl, tmp_path, token)
    assert review["status"]["authenticated"] is True
    assert review["status"]["user"]["username"] == "system:serviceaccount:default:default"
    assert "system:serviceaccounts:default" in review["status"]["user"]["groups"]
    # The API server itself authenticates the caller: the account is known (and has no rights),
    # while a made-up token is refused as Unauthorized.
    known = subprocess.run(
        kubectl.argv("auth", "can-i", "get", "pods", f"--token={token}"),
        env=kubectl.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (known.returncode, known.stdout.strip()) == (1, "no")
    unknown = subprocess.run(
        kubectl.argv("auth", "can-i", "get", "pods", "--token=made-up"),
        env=kubectl.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unknown.returncode != 0 and "Unauthorized" in unknown.stderr


def test_a_namespace_created_later_gets_one_and_a_deleted_one_comes_back(
    kubectl: Kubectl, cluster: DevCluster, tmp_path: Path
) -> None:
    kubectl.run("create", "namespace", "team-a")
    wait_for(lambda: cluster.store.get("/serviceaccounts", "team-a", "default"))
    token = kubectl.run("create", "token", "default", "-n", "team-a").strip()
    review = _review(kubectl, tmp_path, token)
    assert review["status"]["user"]["username"] == "system:serviceaccount:team-a:default"
    first = cluster.store.get("/serviceaccounts", "team-a", "default")
    assert first is not None
    kubectl.run("delete", "serviceaccount", "default", "-n", "team-a")
    again = wait_for(
        lambda: (sa := cluster.store.get("/serviceaccounts", "team-a", "default"))
        and sa["metadata"]["uid"] != first["metadata"]["uid"]
        and sa
    )
    assert again["metadata"]["name"] == "default"
