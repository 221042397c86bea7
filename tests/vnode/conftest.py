"""Fixtures for the virtual kubelet: in-process Runners over a provider on the shared embedded
cluster (`cluster`/`kube` come from tests/support/fixtures.py), and a fresh fake-cloud name."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devcluster import DevCluster
from providers.base import Provider
from tests.support.rigs.runners import make_runner
from vnode.runner import Runner


@pytest.fixture
def start_runner(cluster: DevCluster) -> Iterator[Callable[..., Runner]]:
    """Start an in-process Runner for a provider; stopped after the test."""
    started: list[Runner] = []

    def start(provider: Provider, **overrides: Any) -> Runner:
        runner = make_runner(cluster, provider, **overrides)
        runner.start()
        started.append(runner)
        return runner

    yield start
    for runner in started:
        runner.stop(timeout=5)


@pytest.fixture
def cloud_name() -> str:
    return f"vnode-{uuid.uuid4().hex[:8]}"
