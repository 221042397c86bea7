"""kube.client.Kube's credentials: a bearer token is taken from the ApiClient at most once every
AUTH_REFRESH seconds, so its refresh hook (a rotated token file, an exec plugin) runs then and
not on every request, and a rotated token is used from the next refresh on."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s_client

from kube import client as kube_client
from kube.client import AUTH_REFRESH, Kube


def api_with_rotating_token() -> tuple[k8s_client.ApiClient, list[int]]:
    configuration = k8s_client.Configuration(host="https://127.0.0.1:1")
    configuration.api_key = {"BearerToken": "token-0"}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    calls: list[int] = []

    def refresh(config: Any) -> None:  # what the kubeconfig loader's hook does: set the current token
        calls.append(1)
        config.api_key = {"BearerToken": f"token-{len(calls)}"}

    configuration.refresh_api_key_hook = refresh
    return k8s_client.ApiClient(configuration), calls


def test_a_token_is_refreshed_once_per_interval_and_a_rotated_one_is_used_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api, calls = api_with_rotating_token()
    kube = Kube(api)
    now = [1000.0]
    monkeypatch.setattr(kube_client.time, "monotonic", lambda: now[0])
    first = kube._auth_headers()
    assert first == {"authorization": "Bearer token-1"}
    for _ in range(100):  # a hundred requests inside one interval: one refresh
        assert kube._auth_headers() == first
    assert len(calls) == 1
    now[0] += AUTH_REFRESH
    assert kube._auth_headers() == {"authorization": "Bearer token-2"}  # the rotated token
    assert len(calls) == 2


def test_a_client_certificate_alone_sends_no_authorization_header() -> None:
    kube = Kube(k8s_client.ApiClient(k8s_client.Configuration(host="https://127.0.0.1:1")))
    assert kube._auth_headers() == {}
