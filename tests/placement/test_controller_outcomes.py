"""The placement controller's sync outcomes, in the WorkerPool's vocabulary: a named `Requeue`,
None, or a raised `Retry`; which outcomes make the next look a fresh attempt; and what wakes a
Pod that waits (a lapsed or cleared block, offerings coming back, the bounded recheck), with one
Event per change of what it waits for. Run against in-memory fakes of the API, the pool cache,
the provider and the Event recorder, with the real catalog, blocklist and work queue on one
injected clock."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from kube import names
from kube.client import ConflictError, KubeError
from kube.worker import Requeue, Retry
from kube.workqueue import WorkQueue
from placement.blocklist import Blocklist
from placement.catalog import Catalog
from placement.controller import (
    CATALOG_KEY,
    EXPIRY_MARGIN,
    LOOK_AGAIN_NOW,
    PATCH_RETRY_DELAY,
    POOLS_UNSYNCED,
    PlacementController,
)
from placement.poolcache import PoolState
from placement.pools import NodePool, PoolProvider
from placement.waiting import PLACEMENT_RECHECK
from providers import errors
from providers.base import BlockBreadth, BlockScope, Capabilities, Offering, Tier
from tests.support.clock import ManualClock
from tests.support.factories import make_pod

KEY = "default/trainer"
OFFERINGS = (Offering("h100", 8, Tier.SPOT, "us-east-1", 10.0),)
SOLD_OUT = (Offering("h100", 8, Tier.SPOT, "us-east-1", 10.0, available=False),)
CATALOG_TTL = 10.0


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


class FakeProvider:
    """Just what the catalog calls. `offerings` None: the provider cannot be asked."""

    def __init__(self, offerings: tuple[Offering, ...] | None) -> None:
        self.offerings_now = offerings

    def offerings(self) -> list[Offering]:
        if self.offerings_now is None:
            raise errors.Unavailable("the API is down")
        return list(self.offerings_now)

    def expand_regions(self, declared: list[str]) -> list[str]:
        return list(declared)

    def capabilities(self) -> Capabilities:
        return Capabilities()


class FakeEvents:
    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.messages: list[str] = []

    def pod(self, pod: Any, kind: str, reason: str, message: str) -> None:
        self.reasons.append(reason)
        self.messages.append(message)


def gated_pod() -> dict[str, Any]:
    """The trainer of KEY: opted in to pool `train`, asking 8 h100s, held by the placement gate."""
    labels = {names.ENABLED_LABEL: "true", names.POOL_LABEL: "train", names.ACCELERATOR_LABEL: "h100"}
    return make_pod(
        "trainer",
        namespace="default",
        uid="u-1",
        labels=labels,
        container={"resources": {"limits": {"nvidia.com/gpu": "8"}}},
        schedulingGates=[{"name": names.PLACEMENT_GATE}],
    )


class Harness:
    """The controller wired as `placement.wiring` wires it, every part on one clock."""

    def __init__(
        self, *, synced: bool = True, offerings: tuple[Offering, ...] | None = OFFERINGS, block_ttl: float = 30.0
    ) -> None:
        self.clock = ManualClock(1_800_000_000.0)
        self.kube = FakeKube()
        self.events = FakeEvents()
        self.provider = FakeProvider(offerings)
        self.blocklist = Blocklist(clock=self.clock, uniform=lambda: 0.0, default_ttl=block_ttl)
        self.catalog = Catalog({"gpu-a": self.provider}, ttl=CATALOG_TTL, clock=self.clock)  # type: ignore[dict-item]
        self.queue = WorkQueue(clock=self.clock)
        self.controller = PlacementController(
            kube=self.kube,  # type: ignore[arg-type]
            watch_kube=self.kube,  # type: ignore[arg-type]
            catalog=self.catalog,
            pools=FakePools(synced=synced),  # type: ignore[arg-type]
            blocklist=self.blocklist,
            events=self.events,  # type: ignore[arg-type]
            requeue_spread=0.0,
            queue=self.queue,
        )
        self.blocklist.subscribe(self.controller.blocklist_changed)
        self.catalog.subscribe(self.controller.offerings_changed)
        # A running catalog has answered once: a first answer is news (it wakes every Pod then
        # in an attempt, for one more), which would blur the counts below.
        self.catalog.views()
        self.controller.pods.cache[KEY] = gated_pod()

    def attempts(self) -> int:
        return self.controller.attempts[KEY]

    def step(self) -> list[str]:
        """Process the keys due now as a worker does (a returned Requeue goes back on the
        queue); the keys processed, in order."""
        keys = []
        while (key := self.queue.get(timeout=0)) is not None:
            keys.append(key)
            self.controller.workers.process(key)
        return keys

    def block(self, *, region: str = "us-east-1") -> None:
        scope = BlockScope("gpu-a", BlockBreadth.OFFERING, tier=Tier.SPOT, accelerator="h100", region=region)
        self.blocklist.record("gpu-a", scope)


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


def test_a_blocked_candidate_requeues_just_past_its_expiry() -> None:
    harness = Harness(block_ttl=30.0)
    harness.block()
    assert harness.controller.sync(KEY) == Requeue(pytest.approx(30.0 + EXPIRY_MARGIN))
    assert harness.events.reasons == [names.EVENT_WAITING_FOR_CAPACITY]
    assert "gpu-a/h100 x8 Spot in us-east-1 blocked until" in harness.events.messages[0]
    harness.clock.now += 31
    assert harness.controller.sync(KEY) is None  # the entry lapsed: placed
    assert harness.attempts() == 2 and len(harness.kube.patches) == 1


def test_an_early_look_is_no_attempt_and_keeps_the_look_that_is_due() -> None:
    """A status write queues the Pod at once, which takes the place of its delayed look in the
    queue: the early look must hand that look back, or the Pod would never be looked at again."""
    harness = Harness(block_ttl=30.0)
    harness.block()
    harness.controller.sync(KEY)
    harness.clock.now += 10
    assert harness.controller.sync(KEY) == Requeue(pytest.approx(20.0 + EXPIRY_MARGIN))
    assert harness.attempts() == 1


def test_a_pod_blocked_longer_than_the_recheck_is_looked_at_again_within_it_without_a_new_event() -> None:
    harness = Harness(block_ttl=300.0)
    harness.block()
    assert harness.controller.sync(KEY) == Requeue(pytest.approx(PLACEMENT_RECHECK + EXPIRY_MARGIN))
    harness.queue.add(KEY, delay=PLACEMENT_RECHECK + EXPIRY_MARGIN)  # as the worker does with that Requeue
    harness.clock.now += PLACEMENT_RECHECK
    assert harness.step() == []
    harness.clock.now += EXPIRY_MARGIN
    assert harness.step() == [KEY]
    assert harness.attempts() == 2
    assert harness.events.reasons == [names.EVENT_WAITING_FOR_CAPACITY]  # it waits for the same thing


def test_a_cleared_block_wakes_the_pod_at_once() -> None:
    harness = Harness(block_ttl=300.0)
    harness.block()
    harness.controller.sync(KEY)
    (entry,) = harness.blocklist.entries()
    assert harness.blocklist.clear(entry.id)
    assert harness.step() == [KEY]
    assert harness.attempts() == 2 and len(harness.kube.patches) == 1


def test_capacity_coming_back_wakes_the_pod_through_the_catalog() -> None:
    """Sold out: the catalog is asked again one TTL later (only while someone waits for it), and
    the answer that sells the shape again wakes the Pod for a fresh attempt."""
    harness = Harness(offerings=SOLD_OUT)
    assert harness.controller.sync(KEY) == Requeue(pytest.approx(PLACEMENT_RECHECK + EXPIRY_MARGIN))
    assert harness.events.reasons == [names.EVENT_WAITING_FOR_CAPACITY]
    assert harness.events.messages[0].startswith("waiting for capacity: gpu-a/h100 x8 Spot in us-east-1 sold out;")
    harness.clock.now += CATALOG_TTL + EXPIRY_MARGIN
    assert harness.step() == [CATALOG_KEY]  # still sold out: asked again one TTL later
    assert harness.step() == [] and harness.attempts() == 1
    harness.provider.offerings_now = OFFERINGS
    harness.clock.now += CATALOG_TTL + EXPIRY_MARGIN
    assert harness.step() == [CATALOG_KEY, KEY]
    assert harness.attempts() == 2 and len(harness.kube.patches) == 1
    assert harness.controller.sync(CATALOG_KEY) is None  # nobody waits for offerings any more


def test_unknown_offerings_wake_the_pod_when_the_provider_first_answers() -> None:
    harness = Harness(offerings=None)
    harness.controller.sync(KEY)
    assert harness.events.reasons == [names.EVENT_WAITING_FOR_CAPACITY]
    assert "gpu-a offerings unknown" in harness.events.messages[0]
    harness.controller.sync(KEY)  # an early look (a Pod status write, say) buys nothing
    assert harness.attempts() == 1
    harness.provider.offerings_now = OFFERINGS
    harness.clock.now += CATALOG_TTL + EXPIRY_MARGIN
    assert harness.step() == [CATALOG_KEY, KEY]
    assert harness.attempts() == 2 and len(harness.kube.patches) == 1


def test_a_new_event_only_when_what_the_pod_waits_for_changes() -> None:
    harness = Harness(offerings=SOLD_OUT, block_ttl=300.0)
    harness.controller.sync(KEY)
    harness.clock.now += PLACEMENT_RECHECK + EXPIRY_MARGIN
    harness.controller.sync(KEY)  # the recheck: still sold out, no second Event
    assert harness.attempts() == 2 and harness.events.reasons == [names.EVENT_WAITING_FOR_CAPACITY]
    harness.provider.offerings_now = OFFERINGS
    harness.block()  # back in stock, but refused meanwhile: now it waits for the block
    harness.clock.now += CATALOG_TTL  # the catalog's answer is due again
    harness.controller.sync(KEY)
    assert harness.events.reasons == [names.EVENT_WAITING_FOR_CAPACITY] * 2
    assert "sold out" in harness.events.messages[0] and "blocked until" in harness.events.messages[1]


def test_a_misconfigured_pod_waits_for_a_change_with_one_event_and_no_timer() -> None:
    harness = Harness()
    harness.controller.pods.cache[KEY]["metadata"]["labels"][names.POOL_LABEL] = "missing"
    assert harness.controller.sync(KEY) is None
    harness.controller.pods.cache[KEY]["metadata"]["labels"]["touched"] = "yes"  # a change: a fresh attempt
    assert harness.controller.sync(KEY) is None
    assert harness.attempts() == 2 and harness.events.reasons == [names.EVENT_NO_POOL]


def test_the_gated_pods_carry_their_pool_and_what_their_last_event_said() -> None:
    harness = Harness(offerings=SOLD_OUT)
    (before,) = harness.controller.gated_pods()
    assert (before.name, before.pool, before.reason, before.message) == ("trainer", "train", None, None)
    harness.controller.sync(KEY)
    (gated,) = harness.controller.gated_pods()
    assert (gated.uid, gated.reason, gated.message) == (
        "u-1",
        names.EVENT_WAITING_FOR_CAPACITY,
        harness.events.messages[0],
    )
    assert gated.next_look is not None and gated.next_look.timestamp() == harness.clock.now + PLACEMENT_RECHECK
    harness.provider.offerings_now = OFFERINGS
    harness.clock.now += CATALOG_TTL
    harness.controller.sync(KEY)
    harness.controller.pods.cache[KEY]["spec"]["schedulingGates"] = []  # the watch brings the placed Pod
    assert harness.controller.gated_pods() == []
