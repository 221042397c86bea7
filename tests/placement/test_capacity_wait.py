"""`spec.failover.waitForCapacity`: a gated Pod waiting for capacity is looked at again by its
deadline and, past it, failed (phase Failed, reason CapacityWaitExceeded, the message naming each
candidate's obstacle and the field) with a Warning Event; a Pod whose capacity comes back first
is placed as usual. The controller runs on the in-memory fakes of test_controller_outcomes on one
injected clock; the status write is also sent to a real (embedded) API server."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from kube import names, observe
from kube.client import Kube, NotFoundError, path_for
from kube.worker import Requeue
from placement.capacitywait import created_at
from placement.controller import EXPIRY_MARGIN
from placement.poolcache import PoolState
from placement.pools import NodePool, PoolProvider
from providers.base import Tier
from tests.placement.test_controller_outcomes import CATALOG_TTL, KEY, OFFERINGS, SOLD_OUT, Harness
from tests.support.factories import make_pod

WAIT = 60.0  # the smallest waitForCapacity allowed, on a fake clock


def stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Recording:
    """The harness's fake API, with the path of each write."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, Any]] = []

    def request(self, method: str, path: str, *, body: Any = None, content_type: str | None = None) -> Any:
        self.writes.append((path, body))
        return {}


def waiting_harness(
    wait: float | None = WAIT, *, created_ago: float = 0.0, kube: Any = None, offerings: Any = SOLD_OUT
) -> Harness:
    """A Pod of pool `train` (Spot only on gpu-a) whose one offering is sold out (`offerings`
    None: gpu-a cannot be asked)."""
    harness = Harness(offerings=offerings)
    pool = NodePool("train", (PoolProvider("gpu-a"),), capacity_types=(Tier.SPOT,), wait_for_capacity=wait)
    harness.controller._pools.states["train"] = PoolState("train", pool, "", {"metadata": {"generation": 2}})  # type: ignore[attr-defined]
    harness.controller._recheck = 600.0  # so the deadline, not the recheck, is the next look
    harness.controller._kube = kube if kube is not None else Recording()
    pod = harness.controller.pods.cache[KEY]
    pod["metadata"]["creationTimestamp"] = stamp(harness.clock.now - created_ago)
    return harness


def test_a_pod_waiting_past_wait_for_capacity_is_failed_naming_what_held_it() -> None:
    harness = waiting_harness()
    assert harness.controller.sync(KEY) == Requeue(pytest.approx(WAIT + EXPIRY_MARGIN))  # looked at by its deadline
    assert harness.events.reasons == [names.EVENT_WAITING_FOR_CAPACITY]
    kube: Recording = harness.controller._kube  # type: ignore[assignment]
    assert kube.writes == []

    harness.clock.advance(WAIT + 1)
    assert harness.controller.sync(KEY) is None
    ((path, ops),) = kube.writes
    assert path == "/api/v1/namespaces/default/pods/trainer/status"
    message = "no capacity within 1m (spec.failover.waitForCapacity: 1m): gpu-a/h100 x8 Spot in us-east-1 sold out"
    assert ops[0] == {"op": "test", "path": "/metadata/uid", "value": "u-1"}
    assert {"op": "add", "path": "/status/phase", "value": "Failed"} in ops
    assert {"op": "add", "path": "/status/reason", "value": names.REASON_CAPACITY_WAIT_EXCEEDED} in ops
    assert {"op": "add", "path": "/status/message", "value": message} in ops
    assert harness.events.reasons[-1] == names.REASON_CAPACITY_WAIT_EXCEEDED
    assert harness.events.messages[-1] == message

    # The watch shows it Failed: nothing more is attempted or written.
    harness.controller.pods.cache[KEY]["status"] = {"phase": "Failed", "reason": names.REASON_CAPACITY_WAIT_EXCEEDED}
    attempts = harness.attempts()
    assert harness.controller.sync(KEY) is None
    assert harness.attempts() == attempts and len(kube.writes) == 1


def test_the_wait_counts_from_the_pods_creation_so_a_restart_does_not_reset_it() -> None:
    harness = waiting_harness(created_ago=WAIT + 5)  # a new manager's first look at an old Pod
    assert harness.controller.sync(KEY) is None
    kube: Recording = harness.controller._kube  # type: ignore[assignment]
    assert [path.rsplit("/", 1)[-1] for path, _ in kube.writes] == ["status"]


def test_capacity_returning_before_the_wait_ends_places_the_pod() -> None:
    harness = waiting_harness()
    assert harness.controller.sync(KEY) == Requeue(pytest.approx(WAIT + EXPIRY_MARGIN))
    harness.clock.advance(WAIT / 2)
    harness.provider.offerings_now = OFFERINGS  # the offering is back
    harness.clock.advance(CATALOG_TTL)
    harness.step()  # the catalog is asked again; the gained offering wakes the Pod, which is placed
    kube: Recording = harness.controller._kube  # type: ignore[assignment]
    ((path, ops),) = kube.writes
    assert path == "/api/v1/namespaces/default/pods/trainer"
    assert {"op": "remove", "path": "/spec/schedulingGates/0"} in ops
    assert harness.events.reasons == [names.EVENT_WAITING_FOR_CAPACITY, names.EVENT_PLACED]


def test_a_provider_that_cannot_be_asked_keeps_the_pod_waiting_past_the_limit() -> None:
    """I3: offerings unknown (an outage, or the first ask after a restart failing) is not "sold
    out": a Pod older than waitForCapacity stays gated; once the provider answers sold out, it fails."""
    harness = waiting_harness(created_ago=WAIT * 10, offerings=None)
    kube: Recording = harness.controller._kube  # type: ignore[assignment]
    assert harness.controller.sync(KEY) == Requeue(pytest.approx(600.0 + EXPIRY_MARGIN))
    assert kube.writes == []
    assert harness.events.reasons == [names.EVENT_WAITING_FOR_CAPACITY]
    assert "gpu-a offerings unknown" in harness.events.messages[-1]
    harness.clock.advance(7 * 86_400.0)  # the longest waitForCapacity, and more: still waiting
    harness.step()
    assert harness.controller.sync(KEY) is not None and kube.writes == []

    harness.provider.offerings_now = SOLD_OUT  # it answers again: sold out
    harness.clock.advance(CATALOG_TTL)
    harness.controller._catalog.views()
    harness.controller.pool_changed("train")  # a look now, not at the recheck
    harness.step()
    assert [path.rsplit("/", 1)[-1] for path, _ in kube.writes] == ["status"]
    assert harness.events.reasons[-1] == names.REASON_CAPACITY_WAIT_EXCEEDED


def test_without_wait_for_capacity_a_pod_waits_on() -> None:
    harness = waiting_harness(None, created_ago=7 * 86_400.0)
    assert harness.controller.sync(KEY) == Requeue(pytest.approx(600.0 + EXPIRY_MARGIN))
    kube: Recording = harness.controller._kube  # type: ignore[assignment]
    assert kube.writes == []


def test_the_api_server_takes_the_failed_status_of_a_gated_pod(kube: Kube) -> None:
    """A real API server lets a status write end a gated, unscheduled Pod (PodGC does the same)."""
    labels = {names.ENABLED_LABEL: "true", names.POOL_LABEL: "train", names.ACCELERATOR_LABEL: "h100"}
    body = make_pod(
        "trainer",
        labels=labels,
        container={"resources": {"limits": {"nvidia.com/gpu": "8"}}},
        schedulingGates=[{"name": names.PLACEMENT_GATE}],
    )
    created = kube.request("POST", path_for("pods", namespace="default"), body=body)
    harness = waiting_harness(kube=kube)
    harness.controller.pods.cache[KEY] = created
    harness.clock.now = datetime.fromisoformat(
        created["metadata"]["creationTimestamp"].replace("Z", "+00:00")
    ).timestamp()
    harness.clock.advance(WAIT + 1)
    assert harness.controller.sync(KEY) is None
    pod = kube.request("GET", path_for("pods", namespace="default", name="trainer"))
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["reason"] == names.REASON_CAPACITY_WAIT_EXCEEDED
    assert "spec.failover.waitForCapacity: 1m" in pod["status"]["message"]
    assert pod["spec"]["schedulingGates"] == [{"name": names.PLACEMENT_GATE}]


def test_a_creation_time_without_a_zone_is_utc_whatever_the_local_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    """As kube.times reads every API timestamp: a naive one is UTC, not the manager's local time."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        pod = make_pod("trainer", metadata={"creationTimestamp": "2027-01-15T08:00:00"})
        assert created_at(pod) == 1_800_000_000.0
        pod["metadata"]["creationTimestamp"] = "2027-01-15T08:00:00Z"
        assert created_at(pod) == 1_800_000_000.0
        pod["metadata"]["creationTimestamp"] = "not a time"
        assert created_at(pod) is None
    finally:
        monkeypatch.undo()
        time.tzset()


class Outcomes(observe.NullObserver):
    """The placement outcomes reported (the label values of nebula_placement_decisions_total)."""

    def __init__(self) -> None:
        self.outcomes: list[str] = []

    def placement_decided(self, outcome: str) -> None:
        self.outcomes.append(outcome)


class Gone(Recording):
    """The Pod was deleted before the status write reached the API server."""

    def request(self, method: str, path: str, *, body: Any = None, content_type: str | None = None) -> Any:
        self.writes.append((path, body))
        raise NotFoundError(404, "NotFound", 'pods "trainer" not found')


@pytest.fixture
def outcomes() -> Iterator[Outcomes]:
    recorded = Outcomes()
    observe.install(recorded)
    yield recorded
    observe.install(None)


@pytest.mark.parametrize(
    ("api", "expected"), [(Recording, ["capacity_wait_exceeded"]), (Gone, [])], ids=["applied", "gone"]
)
def test_the_outcome_is_counted_only_when_the_pod_was_failed(
    api: type[Recording], expected: list[str], outcomes: Outcomes
) -> None:
    kube = api()
    harness = waiting_harness(created_ago=WAIT + 5, kube=kube)
    assert harness.controller.sync(KEY) is None  # settled either way: nothing left to wait for
    assert len(kube.writes) == 1
    assert outcomes.outcomes == expected
    assert harness.events.reasons == ([names.REASON_CAPACITY_WAIT_EXCEEDED] if expected else [])
