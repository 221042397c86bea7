"""The placement controller's sync outcomes, in the WorkerPool's vocabulary: a named `Requeue`,
None, or a raised `Retry`; and which outcomes make the next look a fresh attempt. Run against
in-memory fakes of the API, the pool cache, the catalog and the Event recorder."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from kube import names
from kube.client import ConflictError, KubeError
from kube.worker import Requeue, Retry
from placement.blocklist import Blocklist
from placement.controller import (
    EXPIRY_MARGIN,
    LOOK_AGAIN_NOW,
    PATCH_RETRY_DELAY,
    POOLS_UNSYNCED,
    UNKNOWN_OFFERINGS_RECHECK,
    PlacementController,
)
from placement.optimizer import ProviderView
from placement.poolcache import PoolState
from placement.pools import NodePool, PoolProvider
from providers.base import BlockBreadth, BlockScope, Offering, Tier

KEY = "default/trainer"
OFFERINGS = (Offering("h100", 8, Tier.SPOT, "us-east-1", 10.0),)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


class FakeKube:
    def __init__(self) -> None:
        self.fail: Exception | None = None
        self.patches: list[Any] = []

    def request(self, method: str, path: str, *, body: Any = None, content_type: str | None = None) -> Any:
        if self.fail is not None:
            raise self.fail
        self.patches.append(body)
        return {}


class FakePools:
    def __init__(self, *, synced: bool = True) -> None:
        self.synced = threading.Event()
        if synced:
            self.synced.set()
        pool = NodePool("train", (PoolProvider("gpu-a"),), capacity_types=(Tier.SPOT,))
        self.states = {"train": PoolState("train", pool, "", {"metadata": {"generation": 1}})}

    def get(self, name: str) -> PoolState | None:
        return self.states.get(name)


class FakeCatalog:
    def __init__(self, offerings: tuple[Offering, ...] | None = OFFERINGS) -> None:
        self.offerings = offerings

    def views(self) -> dict[str, ProviderView]:
        return {"gpu-a": ProviderView("gpu-a", self.offerings)}


class FakeEvents:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def pod(self, pod: Any, kind: str, reason: str, message: str) -> None:
        self.reasons.append(reason)


def gated_pod() -> dict[str, Any]:
    labels = {names.ENABLED_LABEL: "true", names.POOL_LABEL: "train", names.ACCELERATOR_LABEL: "h100"}
    return {
        "metadata": {"name": "trainer", "namespace": "default", "uid": "u-1", "labels": labels},
        "spec": {
            "containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
            "schedulingGates": [{"name": names.PLACEMENT_GATE}],
        },
    }


class Harness:
    def __init__(self, *, synced: bool = True, offerings: tuple[Offering, ...] | None = OFFERINGS) -> None:
        self.clock = Clock()
        self.kube = FakeKube()
        self.events = FakeEvents()
        self.blocklist = Blocklist(clock=self.clock, uniform=lambda: 0.0, default_ttl=60.0)
        self.controller = PlacementController(
            kube=self.kube,  # type: ignore[arg-type]
            watch_kube=self.kube,  # type: ignore[arg-type]
            catalog=FakeCatalog(offerings),  # type: ignore[arg-type]
            pools=FakePools(synced=synced),  # type: ignore[arg-type]
            blocklist=self.blocklist,
            events=self.events,  # type: ignore[arg-type]
            requeue_spread=0.0,
        )
        self.controller.pods.cache[KEY] = gated_pod()

    def attempts(self) -> int:
        return self.controller.attempts[KEY]


def test_before_the_pools_are_listed_the_pod_is_looked_at_again_shortly() -> None:
    harness = Harness(synced=False)
    assert harness.controller.sync(KEY) is POOLS_UNSYNCED
    assert harness.attempts() == 0


def test_a_placed_pod_is_done_and_an_unchanged_pod_gets_no_second_attempt() -> None:
    harness = Harness()
    assert harness.controller.sync(KEY) is None
    assert len(harness.kube.patches) == 1 and harness.events.reasons == [names.EVENT_PLACED]
    assert harness.controller.sync(KEY) is None
    assert harness.attempts() == 1


@pytest.mark.parametrize(
    "error", [ConflictError(409, "Conflict", "moved"), KubeError(422, "Invalid", "test op failed")], ids=["409", "422"]
)
def test_a_pod_that_moved_under_the_patch_is_looked_at_again_now_as_a_fresh_attempt(error: KubeError) -> None:
    harness = Harness()
    harness.kube.fail = error
    assert harness.controller.sync(KEY) is LOOK_AGAIN_NOW
    assert LOOK_AGAIN_NOW == Requeue(0.0)
    harness.controller.sync(KEY)
    assert harness.attempts() == 2


def test_a_failed_patch_raises_retry_after_a_second_and_the_retry_is_a_fresh_attempt() -> None:
    harness = Harness()
    harness.kube.fail = KubeError(500, "InternalError", "etcd")
    with pytest.raises(Retry, match="placing default/trainer failed: 500") as raised:
        harness.controller.sync(KEY)
    assert raised.value.delay == PATCH_RETRY_DELAY == 1.0
    harness.kube.fail = None
    assert harness.controller.sync(KEY) is None
    assert harness.attempts() == 2 and len(harness.kube.patches) == 1


def test_unknown_offerings_ask_again_later_and_that_later_look_is_a_fresh_attempt() -> None:
    harness = Harness(offerings=None)
    assert harness.controller.sync(KEY) == Requeue(UNKNOWN_OFFERINGS_RECHECK + EXPIRY_MARGIN)
    assert harness.events.reasons == [names.EVENT_NO_CANDIDATE]
    harness.controller.sync(KEY)  # an early look (a Pod status write, say) buys nothing
    assert harness.attempts() == 1
    harness.clock.now += UNKNOWN_OFFERINGS_RECHECK
    harness.controller.sync(KEY)
    assert harness.attempts() == 2


def test_a_blocked_candidate_requeues_just_past_its_expiry() -> None:
    harness = Harness()
    scope = BlockScope("gpu-a", BlockBreadth.OFFERING, tier=Tier.SPOT, accelerator="h100", region="us-east-1")
    harness.blocklist.record("gpu-a", scope)
    outcome = harness.controller.sync(KEY)
    assert outcome == Requeue(pytest.approx(60.0 + EXPIRY_MARGIN))
    assert harness.events.reasons == [names.EVENT_NO_CANDIDATE, names.EVENT_BLOCKED]
    assert harness.controller.sync(KEY) is None and harness.attempts() == 1
    harness.clock.now += 61
    assert harness.controller.sync(KEY) is None  # the entry lapsed: placed
    assert harness.attempts() == 2 and len(harness.kube.patches) == 1
