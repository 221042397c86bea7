"""Fixtures for the devcluster tests: a started cluster, the official client, raw HTTPS calls."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from devcluster import DevCluster
from tests.support.clients.rawhttp import Raw
from tests.support.fixtures import ClusterOptions
from tests.support.servers.webhook import Hook, serving


@pytest.fixture
def cluster_options() -> ClusterOptions:
    """The devcluster's own scheduler timing, and bookmarks often enough for watch tests."""
    return ClusterOptions(scheduler_interval=0.5, bookmark_interval=0.2)


@pytest.fixture
def raw(cluster: DevCluster) -> Raw:
    return Raw(cluster)


@pytest.fixture
def api_client(cluster: DevCluster) -> Iterator[Any]:
    assert cluster.kubeconfig_path
    api = config.new_client_from_config(config_file=cluster.kubeconfig_path)
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def core(api_client: Any) -> Any:
    return client.CoreV1Api(api_client)


@pytest.fixture
def hook() -> Iterator[Hook]:
    """A mutating webhook over TLS whose certificate names only localhost and 127.0.0.1."""
    with serving() as server:
        yield server
