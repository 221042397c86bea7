"""Shared pieces of the vnode's give-up tests (tests/vnode/test_preempted.py,
tests/vnode/test_queued_too_long.py): a Blocklister that keeps what it is told, an H100 Spot
Pod of pool `train`, a Pod's Events."""

from __future__ import annotations

from typing import Any

from kube import names
from kube.client import Kube, path_for
from providers.base import BlockScope
from tests.support.factories import make_pod


class RecordingBlocklister:
    """Keeps every block the vnode records (the Blocklister protocol)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, BlockScope, str | None]] = []
        self.interrupted: list[bool] = []  # each record's `interrupted`, in order

    def record(self, provider: str, scope: BlockScope, *, pool: str | None = None, interrupted: bool = False) -> None:
        self.records.append((provider, scope, pool))
        self.interrupted.append(interrupted)


def spot_pod(name: str, *, pool: str = "train", **spec: Any) -> dict[str, Any]:
    """An H100 Pod placed on the Spot tier from `pool`."""
    return make_pod(
        name,
        "gpu",
        labels={names.POOL_LABEL: pool, names.ACCELERATOR_LABEL: "h100"},
        annotations={names.CAPACITY_TYPE_ANNOTATION: "Spot", names.REGION_ANNOTATION: "us-east-1"},
        container={"resources": {"limits": {"nvidia.com/gpu": "8"}}},
        **spec,
    )


def events_for(kube: Kube, name: str) -> list[dict[str, Any]]:
    items, _ = kube.list(path_for("events", namespace="default"), fieldSelector=f"involvedObject.name={name}")
    return items
