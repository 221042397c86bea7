"""Fixtures for the devcluster tests: a started cluster, the official client, raw HTTPS calls."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from devcluster_fixtures import Raw
from kubernetes import client, config

from devcluster import DevCluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    with DevCluster(kubeconfig_path=str(tmp_path / "kubeconfig"), bookmark_interval=0.2) as started:
        yield started


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
