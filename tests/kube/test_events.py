"""The Event recorder's counting rules on the embedded API server, with fake clocks: a repeat
counts on the one Event (lastTimestamp moves, firstTimestamp stays), a burst costs a bounded
number of writes and still reaches its count, an expired Event is created again with its
count, a failed write is logged and written later, and many messages for one reason combine."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from devcluster import DevCluster
from kube.client import ConflictError, Kube, path_for
from kube.events import COMBINED_PREFIX, EventRecorder
from kube.leases import FencedError
from tests.support.factories import make_pod
from tests.support.polling import wait_for

T0 = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
INTERVAL = 0.2


@dataclass
class Clocks:
    """A monotonic clock and a wall clock that move only when the test says so."""

    seconds: float = 1000.0

    def monotonic(self) -> float:
        return self.seconds

    def now(self) -> datetime:
        return T0 + timedelta(seconds=self.seconds - 1000.0)

    def advance(self, seconds: float) -> None:
        self.seconds += seconds


@pytest.fixture
def clocks() -> Clocks:
    return Clocks()


@pytest.fixture
def recorder(kube: Kube, clocks: Clocks) -> EventRecorder:
    return EventRecorder(
        kube, component="test", host="h", min_interval=INTERVAL, inline=True, clock=clocks.monotonic, now=clocks.now
    )


def events_about(kube: Kube, name: str, namespace: str = "default") -> list[dict[str, Any]]:
    items, _ = kube.list(path_for("events", namespace=namespace), fieldSelector=f"involvedObject.name={name}")
    return items


def writes(cluster: DevCluster) -> int:
    return cluster.request_log.count(verb="create", resource="events") + cluster.request_log.count(
        verb="patch", resource="events"
    )


POD = make_pod("p1", namespace="default", uid="uid-p1")


def test_a_repeat_counts_on_the_same_event_moving_last_timestamp_and_keeping_the_first(
    kube: Kube, recorder: EventRecorder, clocks: Clocks
) -> None:
    for _ in range(3):
        recorder.pod(POD, "Warning", "ProvisionRetrying", "no capacity")
        clocks.advance(30)
    (event,) = events_about(kube, "p1")
    assert event["count"] == 3
    assert event["firstTimestamp"] == "2025-01-01T12:00:00Z"
    assert event["lastTimestamp"] == "2025-01-01T12:01:00Z"
    assert event["involvedObject"] == {
        "kind": "Pod",
        "apiVersion": "v1",
        "name": "p1",
        "namespace": "default",
        "uid": "uid-p1",
    }
    assert (event["type"], event["reason"], event["message"]) == ("Warning", "ProvisionRetrying", "no capacity")


def test_a_burst_of_repeats_is_written_twice_and_reaches_its_count(
    cluster: DevCluster, kube: Kube, recorder: EventRecorder, clocks: Clocks
) -> None:
    """The first occurrence is created at once; the 199 repeats within the interval are
    accumulated, and written as one PATCH once the interval has passed."""
    for _ in range(200):
        recorder.pod(POD, "Warning", "ProvisionRetrying", "no capacity")
    (event,) = events_about(kube, "p1")
    assert event["count"] == 1
    assert writes(cluster) == 1
    clocks.advance(INTERVAL)
    wait_for(lambda: events_about(kube, "p1")[0]["count"] == 200, what="the flushed count")
    assert writes(cluster) == 2
    assert cluster.request_log.count(verb="patch", resource="events") == 1


def test_repeats_on_the_real_clock_eventually_reach_their_count(cluster: DevCluster, kube: Kube) -> None:
    recorder = EventRecorder(kube, component="test", min_interval=INTERVAL)
    for _ in range(50):
        recorder.pod(POD, "Normal", "Provisioned", "instance is up")
    wait_for(lambda: events_about(kube, "p1")[0]["count"] == 50, what="count 50", ignoring=(IndexError,))
    assert len(events_about(kube, "p1")) == 1


def test_different_messages_are_different_events(kube: Kube, recorder: EventRecorder) -> None:
    recorder.pod(POD, "Warning", "ProvisionFailed", "quota")
    recorder.pod(POD, "Warning", "ProvisionFailed", "no capacity")
    assert sorted((e["message"], e["count"]) for e in events_about(kube, "p1")) == [("no capacity", 1), ("quota", 1)]


def test_an_expired_event_is_created_again_with_its_name_and_count(
    kube: Kube, recorder: EventRecorder, clocks: Clocks
) -> None:
    recorder.pod(POD, "Warning", "ProvisionRetrying", "no capacity")
    (first,) = events_about(kube, "p1")
    kube.delete(path_for("events", namespace="default", name=first["metadata"]["name"]))
    clocks.advance(60)
    recorder.pod(POD, "Warning", "ProvisionRetrying", "no capacity")
    (again,) = events_about(kube, "p1")
    assert again["metadata"]["name"] == first["metadata"]["name"]
    assert again["metadata"]["uid"] != first["metadata"]["uid"]
    assert (again["count"], again["firstTimestamp"], again["lastTimestamp"]) == (
        2,
        "2025-01-01T12:00:00Z",
        "2025-01-01T12:01:00Z",
    )


def test_a_failed_write_is_logged_not_raised_and_its_count_is_written_later(
    kube: Kube, recorder: EventRecorder, clocks: Clocks, caplog: pytest.LogCaptureFixture
) -> None:
    stray = make_pod("p1", namespace="later", uid="uid-later")
    with caplog.at_level(logging.WARNING, logger="kube.events"):
        recorder.pod(stray, "Warning", "ProvisionRetrying", "no capacity")  # namespace missing: 404
        recorder.pod(stray, "Warning", "ProvisionRetrying", "no capacity")
    assert "could not record event ProvisionRetrying on later/p1" in caplog.text
    kube.create(path_for("namespaces"), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "later"}})
    clocks.advance(10 * INTERVAL)  # past the back-off of one failure
    recorder.flush()
    (event,) = events_about(kube, "p1", namespace="later")
    assert event["count"] == 2


def test_more_than_ten_messages_for_one_reason_combine_into_one_counted_event(
    kube: Kube, recorder: EventRecorder, clocks: Clocks
) -> None:
    """client-go's aggregation: 9 Events of their own, then one combined Event for the rest."""
    for number in range(1, 13):
        recorder.pod(POD, "Warning", "ProvisionFailed", f"request {number} refused")
        clocks.advance(1)
    found = events_about(kube, "p1")
    combined = [e for e in found if e["message"].startswith(COMBINED_PREFIX)]
    assert len(found) == 10 and len(combined) == 1
    assert combined[0]["message"] == COMBINED_PREFIX + "request 12 refused"
    assert combined[0]["count"] == 3
    assert sorted(e["message"] for e in found if e not in combined) == sorted(
        f"request {n} refused" for n in range(1, 10)
    )


def test_similar_messages_are_no_longer_combined_after_ten_quiet_minutes(
    kube: Kube, recorder: EventRecorder, clocks: Clocks
) -> None:
    for number in range(1, 11):
        recorder.pod(POD, "Warning", "ProvisionFailed", f"request {number} refused")
    clocks.advance(601)
    recorder.pod(POD, "Warning", "ProvisionFailed", "request 11 refused")
    assert any(e["message"] == "request 11 refused" for e in events_about(kube, "p1"))


def test_recording_never_waits_for_the_api_server_and_the_flusher_writes_it(kube: Kube) -> None:
    """As client-go's broadcaster: a Pod's provisioning never waits on its Events."""
    recorder = EventRecorder(kube, component="test", host="h")
    pod = make_pod("p-bg", namespace="default", uid="uid-bg")
    for reason in ("Provisioning", "Provisioned", "Started"):
        recorder.pod(pod, "Normal", reason, f"{reason} now")
    recorder.pod(pod, "Normal", "Started", "Started now")

    def counts() -> dict[str, int]:
        return {e["reason"]: e.get("count", 1) for e in events_about(kube, "p-bg")}

    wait_for(lambda: counts() == {"Provisioning": 1, "Provisioned": 1, "Started": 2}, what="the three Events, counted")


class LostAnswer(Kube):
    """Creates the Event, then answers 409 as a retried POST whose first answer was lost does."""

    def __init__(self, inner: Kube) -> None:
        self.__dict__.update(inner.__dict__)

    def create(self, path: str, body: Any) -> dict[str, Any]:
        super().create(path, body)
        raise ConflictError(409, "AlreadyExists", f'events "{body["metadata"]["name"]}" already exists')


def test_a_create_whose_answer_was_lost_counts_on_the_event_it_made(kube: Kube, clocks: Clocks) -> None:
    recorder = EventRecorder(
        LostAnswer(kube), component="test", min_interval=INTERVAL, inline=True, clock=clocks.monotonic, now=clocks.now
    )
    pod = make_pod("p-lost", namespace="default", uid="uid-lost")
    recorder.pod(pod, "Warning", "ProvisionRetrying", "no capacity")
    clocks.advance(1)
    recorder.pod(pod, "Warning", "ProvisionRetrying", "no capacity")
    (event,) = events_about(kube, "p-lost")
    assert event["count"] == 2


def test_past_its_memory_a_recorder_forgets_settled_series_first_and_never_a_pending_one(
    kube: Kube, recorder: EventRecorder, clocks: Clocks, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("kube.events.MAX_REMEMBERED", 2)
    held = make_pod("p-held", namespace="later", uid="uid-held")
    recorder.pod(held, "Warning", "ProvisionRetrying", "no capacity")  # namespace missing: stays pending
    pods = [make_pod(f"p{i}", namespace="default", uid=f"uid-{i}") for i in range(4)]
    for pod in pods:
        recorder.pod(pod, "Normal", "Started", "started")  # each written at once, then settled
    clocks.advance(60)
    recorder.pod(pods[3], "Normal", "Started", "started")  # the newest settled one: still remembered
    recorder.pod(pods[0], "Normal", "Started", "started")  # the oldest: forgotten, so a new Event
    recorder.pod(held, "Warning", "ProvisionRetrying", "no capacity")
    kube.create(path_for("namespaces"), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "later"}})
    clocks.advance(10 * INTERVAL)
    recorder.flush()
    assert [e["count"] for e in events_about(kube, "p3")] == [2]
    assert sorted(e["count"] for e in events_about(kube, "p0")) == [1, 1]
    assert [e["count"] for e in events_about(kube, "p-held", namespace="later")] == [2]


def test_an_event_a_fenced_client_refuses_is_dropped_never_retried(kube: Kube) -> None:
    """A Runner whose node Lease ran out writes no more Events; its recorder must not retry
    them for ever in the background (kube.leases)."""

    def refuse() -> None:
        raise FencedError("nebula-node-x")

    recorder = EventRecorder(kube.fenced(refuse), component="t")
    pod = make_pod("p-fenced", namespace="default", uid="uid-fenced")
    recorder.pod(pod, "Normal", "Started", "Started now")
    wait_for(lambda: recorder.backlog() == 0, 10, what="the refused Event settled")
    assert events_about(kube, "p-fenced") == []
