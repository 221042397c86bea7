"""The fixtures every test folder shares, registered once by `tests/conftest.py`: the embedded
cluster (`cluster`, tuned per folder by overriding `cluster_options`), a `kube` client on it,
and `kube_for`, the one way a test or rig builds another client on a cluster.

A folder conftest overrides `cluster_options` or `kube_user_agent`, never `cluster` itself.
Nothing here starts a service unless a test asks for the fixture.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devcluster import DevCluster
from kube.client import USER_AGENT, Kube, load_api_client

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class ClusterOptions:
    """How a folder wants its embedded cluster (the DevCluster timings)."""

    scheduler_interval: float = 0.05
    bookmark_interval: float = 1.0


_MADE: list[Kube] = []  # every kube_for client, closed at the session's end (`close_kube_clients`)


def kube_for(cluster: DevCluster, *, user_agent: str = USER_AGENT, pool_size: int = 32) -> Kube:
    """A fresh client on `cluster`'s kubeconfig (its own connection pool). Kept until the
    session ends and closed then: a client the garbage collector found first would drop its
    pooled TLS sockets unclosed, and their ResourceWarning fails whichever test is running."""
    assert cluster.kubeconfig_path is not None
    client = Kube(load_api_client(cluster.kubeconfig_path, user_agent=user_agent, pool_size=pool_size))
    _MADE.append(client)
    return client


@pytest.fixture(scope="session", autouse=True)
def close_kube_clients() -> Iterator[None]:
    yield
    while _MADE:
        _MADE.pop().close()


@pytest.fixture
def cluster_options() -> ClusterOptions:
    """The default: a fast scheduler, so Pods bind within a test's patience."""
    return ClusterOptions()


@pytest.fixture
def cluster(tmp_path: Path, cluster_options: ClusterOptions) -> Iterator[DevCluster]:
    """A started embedded API server with its kubeconfig in the test's tmp_path."""
    with DevCluster(
        kubeconfig_path=str(tmp_path / "kubeconfig"),
        scheduler_interval=cluster_options.scheduler_interval,
        bookmark_interval=cluster_options.bookmark_interval,
    ) as running:
        yield running


@pytest.fixture
def kube_user_agent() -> str:
    """The User-Agent of the `kube` fixture's calls (a test that counts calls sets its own)."""
    return USER_AGENT


@pytest.fixture
def kube(cluster: DevCluster, kube_user_agent: str) -> Kube:
    return kube_for(cluster, user_agent=kube_user_agent)
