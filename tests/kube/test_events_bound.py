"""The Event recorders' bound (I7): past `max_queued` series waiting to be written in the process
(one budget shared by every recorder, `kube.eventbudget`), the oldest of any recorder is
dropped, counted in `nebula_events_dropped_total` and told in at most one WARNING a minute; a
dropped series never written starts afresh, one whose Event exists counts on from what it wrote.
Real HTTP to the embedded API server, stopped for the unreachable case."""

from __future__ import annotations

import logging
import threading
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

from console import metrics
from console import observer as console_observer
from devcluster import DevCluster
from kube import eventbudget, observe
from kube import events as events_module
from kube.client import Kube, path_for
from kube.events import MAX_QUEUED, MAX_REMEMBERED, EventBudget, EventRecorder
from kube.leases import FencedError
from tests.kube.test_events import INTERVAL, Clocks, events_about
from tests.support.factories import make_pod
from tests.support.polling import wait_for

DROPPED = "nebula_events_dropped_total"
# The flusher never gets a token (burst 0): only `flush()` writes, so a test decides each write.
STARVED: dict[str, Any] = {"qps": 0.5, "burst": 0, "min_interval": INTERVAL}


@pytest.fixture
def clocks() -> Clocks:
    return Clocks()


@pytest.fixture
def console_metrics() -> Iterator[None]:
    """The console's observer installed, as `runvnode` does: facts reach the Prometheus registry."""
    console_observer.install()
    yield
    console_observer.uninstall()


class Drops(observe.NullObserver):
    def __init__(self) -> None:
        self.lost: list[int] = []

    def event_dropped(self, occurrences: int) -> None:
        self.lost.append(occurrences)


@pytest.fixture
def drops() -> Iterator[Drops]:
    heard = Drops()
    observe.install(heard)
    yield heard
    observe.install(None)


def dropped_total() -> float:
    return metrics.REGISTRY.get_sample_value(DROPPED) or 0.0


def structures(recorder: EventRecorder) -> dict[str, int]:
    """The length of every structure the recorder keeps, by its attribute's name."""
    return {
        name: len(value)
        for name, value in vars(recorder).items()
        if isinstance(value, dict | set | list) and name.startswith("_")
    }


def recorded_in_events_py() -> int:
    """Bytes still allocated by lines of kube/events.py and kube/eventbudget.py (the recorder's
    own memory and its share of the budget's)."""
    files = [tracemalloc.Filter(True, module.__file__) for module in (events_module, eventbudget)]
    snapshot = tracemalloc.take_snapshot().filter_traces(files)
    return sum(stat.size for stat in snapshot.statistics("filename"))


def test_I7_events_queue_is_bounded_when_the_api_server_is_unreachable(
    cluster: DevCluster, kube: Kube, console_metrics: None
) -> None:
    """10,000 Events about distinct Pods while the API server is gone (its port closed): the
    queue stays at its bound, every structure stays bounded, memory stays flat, and the drop
    counter reads exactly the difference."""
    gave_up = threading.Event()

    def fence() -> None:
        if gave_up.is_set():
            raise FencedError("nebula-node-x")

    # A budget of the process's size, of its own: what other tests left waiting is not counted.
    recorder = EventRecorder(kube.fenced(fence), component="test", host="h", min_interval=0.05, budget=EventBudget())
    cluster.stop()
    try:
        assert_bounded_while_unreachable(recorder)
    finally:  # the replica lets go: the backlog settles and the flusher ends, pass or fail
        gave_up.set()
        recorder.flush()
    wait_for(lambda: recorder.backlog() == 0, 30, what="the backlog settled once fenced")


def assert_bounded_while_unreachable(recorder: EventRecorder) -> None:
    """10,000 Events recorded, then the queue, every structure, memory and the counter checked."""
    before = dropped_total()
    tracemalloc.start()
    try:
        for number in range(5_000):
            recorder.pod(make_pod(f"p{number}", uid=f"uid-{number}"), "Normal", "Scheduled", "assigned")
        halfway = recorded_in_events_py()
        for number in range(5_000, 10_000):
            recorder.pod(make_pod(f"p{number}", uid=f"uid-{number}"), "Normal", "Scheduled", "assigned")
        at_end = recorded_in_events_py()
    finally:
        tracemalloc.stop()
    assert recorder.backlog() == MAX_QUEUED
    assert dropped_total() - before == 10_000 - MAX_QUEUED
    sizes = structures(recorder)
    assert sizes["_unsettled"] == sizes["_series"] == MAX_QUEUED, sizes
    assert sizes["_forgettable"] == 0 and sizes["_similar"] <= MAX_REMEMBERED, sizes
    # 5,000 more Events past the bound keep nothing: unbounded, their series would add about
    # 3 MiB (some 650 B each); what moves is dict tables resizing (measured: about 240 KiB).
    assert at_end - halfway < 1024 * 1024, (halfway, at_end)


def test_a_burst_of_drops_is_told_in_one_warning_a_minute(
    kube: Kube, clocks: Clocks, drops: Drops, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = EventRecorder(kube, component="test", max_queued=5, clock=clocks.monotonic, now=clocks.now, **STARVED)

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "kube.events" and "dropped" in r.getMessage()]

    with caplog.at_level(logging.WARNING, logger="kube.events"):
        for number in range(50):
            recorder.pod(make_pod(f"p{number}", uid=f"uid-{number}"), "Normal", "Scheduled", "assigned")
        assert recorder.backlog() == 5 and sum(drops.lost) == 45
        assert len(lines()) == 1 and lines()[0].startswith("dropped 1 Events (1 occurrences)")
        clocks.advance(30)
        for number in range(50, 60):
            recorder.pod(make_pod(f"p{number}", uid=f"uid-{number}"), "Normal", "Scheduled", "assigned")
        assert len(lines()) == 1
        clocks.advance(30)  # a minute since the line: the flusher tells the rest without a new drop
        wait_for(lambda: len(lines()) == 2, 30, what="the second line")
        recorder.pod(make_pod("p60", uid="uid-60"), "Normal", "Scheduled", "assigned")
    assert len(lines()) == 2 and lines()[1].startswith("dropped 54 Events (54 occurrences) since the last")
    assert "more than 5 waited" in lines()[1] and sum(drops.lost) == 56
    recorder.flush()
    assert recorder.backlog() == 0


def test_a_dropped_series_forgets_what_it_never_wrote_and_counts_on_from_what_it_wrote(
    kube: Kube, clocks: Clocks, drops: Drops
) -> None:
    """client-go's correlator sits after the kubelet's queue: an occurrence dropped there is
    never counted, and the next one counts on the Event already written."""
    recorder = EventRecorder(kube, component="test", max_queued=2, clock=clocks.monotonic, now=clocks.now, **STARVED)
    written = make_pod("p-written", uid="uid-written")
    never, later = (make_pod(f"p-{n}", namespace="later", uid=f"uid-{n}") for n in ("never", "later"))
    recorder.pod(written, "Warning", "BackOff", "back-off")
    recorder.flush()  # its Event exists, count 1
    recorder.pod(written, "Warning", "BackOff", "back-off")  # pending: count 2
    recorder.pod(never, "Warning", "BackOff", "back-off")
    recorder.pod(later, "Warning", "BackOff", "back-off")  # the third: `written` (the oldest) dropped
    assert drops.lost == [1] and recorder.backlog() == 2
    recorder.pod(written, "Warning", "BackOff", "back-off")  # the third again: `never` dropped
    assert drops.lost == [1, 1] and recorder.backlog() == 2
    kube.create(path_for("namespaces"), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "later"}})
    recorder.flush()
    recorder.pod(never, "Warning", "BackOff", "back-off")
    recorder.flush()
    assert [e["count"] for e in events_about(kube, "p-written")] == [2]  # 3 occurrences, 1 dropped
    assert [e["count"] for e in events_about(kube, "p-never", namespace="later")] == [1]  # afresh
    assert [e["count"] for e in events_about(kube, "p-later", namespace="later")] == [1]
    assert structures(recorder)["_series"] == 3


class SlowKube(Kube):
    """Creates an Event only once the test lets it: the API server answering slowly."""

    def __init__(self, inner: Kube) -> None:
        self.__dict__.update(inner.__dict__)
        self.entered, self.answer = threading.Event(), threading.Event()

    def create(self, path: str, obj: Any) -> dict[str, Any]:
        self.entered.set()
        assert self.answer.wait(60), "the test never let the create answer"
        return super().create(path, obj)


def test_a_series_being_written_is_never_dropped_the_newest_goes_instead(kube: Kube, drops: Drops) -> None:
    slow = SlowKube(kube)
    recorder = EventRecorder(slow, component="test", max_queued=1, min_interval=INTERVAL)
    recorder.pod(make_pod("p-writing", uid="uid-writing"), "Normal", "Started", "started")
    assert slow.entered.wait(60), "the flusher never wrote"
    recorder.pod(make_pod("p-new", uid="uid-new"), "Normal", "Started", "started")
    assert drops.lost == [1] and recorder.backlog() == 1
    slow.answer.set()
    wait_for(lambda: recorder.backlog() == 0, 30, what="the one being written settled")
    assert [e["count"] for e in events_about(kube, "p-writing")] == [1]
    assert events_about(kube, "p-new") == []


def test_a_queue_bound_below_one_is_refused(kube: Kube) -> None:
    with pytest.raises(ValueError, match="max_queued must be at least 1, not 0"):
        EventRecorder(kube, component="test", max_queued=0)


def test_a_recorder_is_given_a_bound_or_a_budget_not_both(kube: Kube) -> None:
    with pytest.raises(ValueError, match="not both"):
        EventRecorder(kube, component="test", max_queued=5, budget=EventBudget(5))


def test_recorders_share_the_process_budget_unless_given_one(kube: Kube) -> None:
    node, placement = EventRecorder(kube, component="node"), EventRecorder(kube, component="placement")
    assert node.budget is placement.budget is eventbudget.PROCESS_BUDGET
    assert eventbudget.PROCESS_BUDGET.max_queued == MAX_QUEUED == 1000
    assert EventRecorder(kube, component="own", max_queued=5).budget.max_queued == 5


def test_I7_one_event_bound_per_process_across_recorders(
    kube: Kube, clocks: Clocks, drops: Drops, caplog: pytest.LogCaptureFixture
) -> None:
    """Four recorders (three nodes' and placement's) on one budget of 100, none writing: 1,000
    Events round-robin leave 100 waiting in all, the newest 100 whichever recorder holds them,
    900 occurrences dropped across recorders, told in one WARNING; the oldest go first even
    when the one recording is not the one that holds them."""
    budget = EventBudget(100)
    recorders = [
        EventRecorder(kube, component=f"c{n}", budget=budget, clock=clocks.monotonic, now=clocks.now, **STARVED)
        for n in range(4)
    ]
    with caplog.at_level(logging.WARNING, logger="kube.events"):
        for number in range(1_000):
            pod = make_pod(f"p{number}", uid=f"uid-{number}")
            recorders[number % 4].pod(pod, "Normal", "Scheduled", "assigned")
    lines = [r.getMessage() for r in caplog.records if r.name == "kube.events" and "dropped" in r.getMessage()]
    assert budget.waiting() == sum(r.backlog() for r in recorders) == 100
    assert [r.backlog() for r in recorders] == [25, 25, 25, 25]
    assert sum(drops.lost) == 900 and len(lines) == 1 and "more than 100 waited" in lines[0]
    # One recorder alone now: it drops the others' oldest first, not its own.
    for number in range(1_000, 1_050):
        recorders[0].pod(make_pod(f"p{number}", uid=f"uid-{number}"), "Normal", "Scheduled", "assigned")
    assert [r.backlog() for r in recorders] == [25 - 13 + 50, 25 - 13, 25 - 12, 25 - 12]  # p900..p949 gone
    assert sum(drops.lost) == 950 and budget.waiting() == 100
    for recorder in recorders:
        recorder.flush()
    assert budget.waiting() == 0
    survivors = sorted(int(e["involvedObject"]["name"][1:]) for e in all_events(kube))
    assert survivors == list(range(950, 1_050))


def all_events(kube: Kube) -> list[dict[str, Any]]:
    items, _ = kube.list(path_for("events", namespace="default"))
    return items
