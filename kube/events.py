"""Kubernetes Events for Pods and Nodes, written by the vnode and placement: repeats are counted.

Called by the vnode and placement. `record` never waits for the API server: the flusher
thread writes (an Event costs the API server a write, and a Pod's provisioning must not wait
for it, as client-go's broadcaster does not). The first occurrence of an Event (same object,
type, reason and message) is created as soon as the flusher gets to it, named
`<object>.<random hex>` and remembered by that key. A
repeat adds one to its `count` and moves `lastTimestamp` (`firstTimestamp` stays), as client-go's
EventRecorder does for core/v1 Events; the repeat is written as a merge PATCH of `count`,
`lastTimestamp` and `message`, at most once per `min_interval` seconds per key. Repeats in
between are accumulated and written by a background flusher once the interval has passed, so
a burst of N repeats costs a handful of writes and the Event still reaches count N: the bound
is on writes, not on occurrences (client-go's spam filter, a token bucket per object, drops
Events instead). A PATCH that finds no Event (it expired) creates it
again with the same name and the accumulated count, as client-go does. Like client-go's
EventAggregator, once 10 different messages for one (object, type, reason) arrive within 10
minutes, further ones become one Event "(combined from similar events): <latest message>",
counted the same way. A failed write is logged, never raised, and retried with the
accumulated count after a back-off (`min_interval`, doubling, at most 5 minutes). Writes are
paced as the kubelet paces its own (`--event-qps` 50, `--event-burst` 100): what waits for a
token stays pending, counted. The series waiting to be written are bounded once per process
(`kube.eventbudget`: 1000 across every recorder, as the kubelet's one broadcaster queue; I7):
past it the oldest one not being written, whichever recorder holds it, is dropped, its pending
occurrences never written (`observe.event_dropped`, one WARNING a minute per process).
Messages are built by the caller from fixed text and provider error messages, which never
carry secrets (I4); see
tests/vnode/test_secrets.py::test_I4_env_values_and_credentials_reach_only_the_provider_and_connect_secret.
Tests: tests/kube/test_events.py, tests/kube/test_events_bound.py.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kube import observe
from kube.client import ConflictError, Kube, KubeError, NotFoundError, path_for
from kube.eventbudget import MAX_QUEUED, PROCESS_BUDGET, EventBudget, Waiting
from kube.leases import FencedError
from kube.times import rfc3339

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]
MIN_INTERVAL = 1.0  # seconds between two writes of one Event
MAX_RETRY_DELAY = 300.0
SIMILAR_LIMIT = 10  # client-go's maxEvents: distinct messages before they are combined
SIMILAR_WINDOW = 600.0  # client-go's maxIntervalInSeconds
COMBINED_PREFIX = "(combined from similar events): "
MAX_REMEMBERED = 4096  # client-go's LRU cache size for event series
# The kubelet's own limit on its Event writes (`--event-qps`, `--event-burst` defaults): a burst
# of Pods must not turn into a burst of Event writes that slows the API server's other work.
EVENT_QPS = 50.0
EVENT_BURST = 100
__all__ = ["MAX_QUEUED", "MAX_REMEMBERED", "EventBudget", "EventRecorder"]
_names = random.Random()  # Event names' suffixes: no syscall under the lock (uuid4 reads urandom)

_Similar = tuple[str, str, str, str, str, str]  # kind, namespace, name, uid, type, reason
_Key = tuple[_Similar, str | None]  # the similar-key and the message (None: combined)


@dataclass
class _Series:
    """One Event as this recorder knows it: what occurred, and what the API server holds."""

    namespace: str
    body: JsonDict
    key: _Key
    count: int = 0
    message: str = ""
    last_seen: str = ""
    written: int = 0
    created: bool = False
    writing: bool = False
    last_write: float = float("-inf")
    failures: int = 0

    def due(self, min_interval: float) -> float:
        return self.last_write + min(min_interval * 2.0**self.failures, MAX_RETRY_DELAY)

    @property
    def pending(self) -> bool:
        return self.count > self.written


@dataclass
class _Messages:
    seen: set[str] = field(default_factory=set)
    last: float = float("-inf")


class EventRecorder:
    """Thread-safe. `record` never blocks on the API: the flusher thread writes (unless
    `inline`, where a due write happens in `record`, for tests that step a fake clock).

    Invariant (I7): at most `budget.max_queued` series wait to be written across every recorder
    sharing the budget (the process's, `PROCESS_BUDGET`, unless `budget` or `max_queued` give
    one of its own), however slow or unreachable the API server, and every structure here stays
    bounded (`_series` by the bound + MAX_REMEMBERED, `_similar` by MAX_REMEMBERED); see
    tests/kube/test_events_bound.py::test_I7_events_queue_is_bounded_when_the_api_server_is_unreachable
    and ::test_I7_one_event_bound_per_process_across_recorders. A series that would pass the
    bound drops the oldest one not being written, of any recorder (or itself, when every other
    is being written). Dropped means: its occurrences not yet written are lost and
    counted in `observe.event_dropped`. A series never written is forgotten entirely: its next
    occurrence starts afresh (a new Event, count 1). A series whose Event exists keeps what it
    wrote, as client-go's correlator (after the kubelet's queue) never saw the dropped ones:
    its next occurrence counts on that Event from its written count."""

    def __init__(
        self,
        kube: Kube,
        *,
        component: str,
        host: str = "",
        min_interval: float = MIN_INTERVAL,
        qps: float = EVENT_QPS,
        burst: int = EVENT_BURST,
        inline: bool = False,
        max_queued: int | None = None,
        budget: EventBudget | None = None,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if max_queued is not None and budget is not None:
            raise ValueError("give max_queued (a budget of its own) or budget (a shared one), not both")
        self._kube = kube
        self._budget = budget or (PROCESS_BUDGET if max_queued is None else EventBudget(max_queued, clock=clock))
        self._inline = inline  # write a due Event in `record` itself (the counting tests' fake clocks)
        self._qps, self._burst = qps, float(burst)
        self._tokens, self._tokens_at = float(burst), clock()
        self._component = component
        self._host = host
        self._min_interval = min_interval
        self._clock = clock
        self._now = now
        self._series: OrderedDict[_Key, _Series] = OrderedDict()
        self._unsettled: dict[int, _Series] = {}  # pending or being written: what the flusher looks at
        # The settled series (everything written), oldest settled first: what may be forgotten.
        # Kept apart so that forgetting never walks a backlog of unsettled ones.
        self._forgettable: OrderedDict[int, _Key] = OrderedDict()
        self._similar: OrderedDict[_Similar, _Messages] = OrderedDict()
        self._lock = self._budget.lock  # one lock for every recorder of the budget: drops cross them
        self._settled = threading.Condition(self._lock)  # notified whenever a write ends
        self._wake = threading.Event()
        self._flusher: threading.Thread | None = None

    def record(self, obj: Mapping[str, Any], kind: str, event_type: str, reason: str, message: str) -> None:
        """One occurrence of an Event about `obj` (a Pod or Node dict)."""
        meta = obj.get("metadata") or {}
        involved = {
            "kind": kind,
            "apiVersion": "v1",
            "name": meta.get("name"),
            "namespace": meta.get("namespace", ""),
            "uid": str(meta.get("uid", "")),
        }
        namespace = str(meta.get("namespace") or "default")
        similar: _Similar = (kind, namespace, str(meta.get("name")), involved["uid"], event_type, reason)
        stamp = rfc3339(self._now())
        with self._lock:
            key, message = self._correlate(similar, message)
            series = self._series.get(key)
            if series is None:
                series = _Series(namespace, self._new_event(involved, namespace, event_type, reason, stamp), key)
                self._series[key] = series
                self._forget_old()
            else:
                self._series.move_to_end(key)
                self._forgettable.pop(id(series), None)
            series.count += 1
            series.message, series.last_seen = message, stamp
            if id(series) not in self._unsettled:
                self._unsettled[id(series)] = series
                self._budget.enter(series, self._dropped)
            lost = self._budget.drop_past_bound()
            now_due = (
                self._inline
                and id(series) in self._unsettled
                and not series.writing
                and self._clock() >= series.due(self._min_interval)
            )
            series.writing = series.writing or now_due
            if not now_due:
                self._start_flusher()
            report = self._budget.drop_report()
        if lost:
            observe.current().event_dropped(lost)
        self._warn_dropped(report)
        if now_due:
            self._write(series)

    @property
    def budget(self) -> EventBudget:
        """The bound this recorder shares (the process's unless it was given one)."""
        return self._budget

    def pod(self, pod: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        self.record(pod, "Pod", event_type, reason, message)

    def node(self, node: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        self.record(node, "Node", event_type, reason, message)

    def backlog(self) -> int:
        """The Events with occurrences not yet written (the flusher paces them at `qps`)."""
        with self._lock:
            return sum(1 for series in self._unsettled.values() if series.pending)

    def flush(self) -> None:
        """Write every accumulated count now, whatever the interval (for shutdown and tests);
        returns once they are written (or failed), writes already under way included."""
        with self._lock:
            while any(s.writing for s in self._unsettled.values()):
                self._settled.wait()
            claimed = [s for s in self._unsettled.values() if s.pending and not s.writing]
            for series in claimed:
                series.writing = True
        for series in claimed:
            self._write(series)

    # -- correlation ---------------------------------------------------------------------------
    def _correlate(self, similar: _Similar, message: str) -> tuple[_Key, str]:
        """client-go's EventAggregator: the key to count under, and the message to write."""
        now = self._clock()
        messages = self._similar.pop(similar, None)
        if messages is None or now - messages.last > SIMILAR_WINDOW:
            messages = _Messages()
        messages.seen.add(message)
        messages.last = now
        self._similar[similar] = messages
        while len(self._similar) > MAX_REMEMBERED:
            self._similar.popitem(last=False)
        if len(messages.seen) < SIMILAR_LIMIT:
            return (similar, message), message
        messages.seen.pop()  # never more than the limit: one new message combines again
        return (similar, None), COMBINED_PREFIX + message

    # -- the bound -----------------------------------------------------------------------------
    def _dropped(self, waiting: Waiting) -> int:
        """Under the lock, called by the budget: forget one unsettled series of this recorder;
        the occurrences lost (see the class docstring for what is kept)."""
        assert isinstance(waiting, _Series)
        series = waiting
        del self._unsettled[id(series)]
        lost = series.count - series.written
        if series.created:  # its Event holds `written`: a later repeat counts on from there
            series.count = series.written
            self._forgettable[id(series)] = series.key
        else:
            del self._series[series.key]
        return lost

    def _warn_dropped(self, report: tuple[int, int]) -> None:
        if report[0]:
            logger.warning(
                "dropped %d Events (%d occurrences) since the last such line: more than %d waited to be"
                " written (is the API server slow or unreachable?)",
                report[0],
                report[1],
                self._budget.max_queued,
            )

    def _forget_old(self) -> None:
        """Keep at most MAX_REMEMBERED series while some are settled, forgetting those settled
        longest ago (one seen again is unsettled until written). Unsettled ones are never
        forgotten, so a backlog of them costs nothing here."""
        while len(self._series) > MAX_REMEMBERED and self._forgettable:
            _, key = self._forgettable.popitem(last=False)
            del self._series[key]

    def _new_event(self, involved: JsonDict, namespace: str, event_type: str, reason: str, stamp: str) -> JsonDict:
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{involved['name']}.{_names.getrandbits(64):016x}", "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "type": event_type,
            "source": {"component": self._component, "host": self._host},
            "reportingComponent": self._component,
            "reportingInstance": self._host,
            "firstTimestamp": stamp,
        }

    # -- writing -------------------------------------------------------------------------------
    def _write(self, series: _Series) -> None:
        """Create or patch one series with its count so far; the caller has set `writing`."""
        with self._lock:
            count, last_seen, message, created = series.count, series.last_seen, series.message, series.created
        body = series.body
        name = body["metadata"]["name"]
        involved = body["involvedObject"]
        kind, subject = involved["kind"], str(involved["name"])
        report = observe.current().event_recorded
        report(kind, series.namespace, subject, body["type"], body["reason"], message, count=count, event=name)
        fields = {"count": count, "lastTimestamp": last_seen, "message": message}
        ok = False
        try:
            if created:
                try:
                    self._kube.patch(path_for("events", namespace=series.namespace, name=name), fields)
                except NotFoundError:
                    self._kube.create(path_for("events", namespace=series.namespace), {**body, **fields})
            else:
                try:
                    self._kube.create(path_for("events", namespace=series.namespace), {**body, **fields})
                except ConflictError:  # a create whose answer was lost (and retried) made it
                    self._kube.patch(path_for("events", namespace=series.namespace, name=name), fields)
            ok = True
        except FencedError as exc:  # this replica may no longer write for the node: never retried
            logger.info("not recording event %s on %s/%s: %s", body["reason"], series.namespace, involved["name"], exc)
            ok = True
        except KubeError as exc:
            logger.warning(
                "could not record event %s on %s/%s: %s", body["reason"], series.namespace, involved["name"], exc
            )
        with self._lock:
            series.writing = False
            series.last_write = self._clock()
            if ok:
                series.written, series.created, series.failures = count, True, 0
            else:
                series.failures += 1
            if series.pending:
                self._start_flusher()
            elif self._unsettled.pop(id(series), None) is not None:
                self._budget.leave(series)
                self._forgettable[id(series)] = series.key
            self._settled.notify_all()

    def _start_flusher(self) -> None:
        """Under the lock: make sure the flusher runs and looks again at what is due."""
        self._wake.set()
        if self._flusher is None:
            self._flusher = threading.Thread(target=self._flush_due, name="event-flusher", daemon=True)
            self._flusher.start()

    def _flush_due(self) -> None:
        """The flusher: write each series whose interval has passed; end when nothing is pending."""
        while True:
            with self._lock:
                self._wake.clear()
                now = self._clock()
                if not self._unsettled:
                    self._flusher = None
                    return
                self._tokens = min(self._burst, self._tokens + (now - self._tokens_at) * self._qps)
                self._tokens_at = now
                # Oldest first, and no further than the tokens allow: a backlog costs O(tokens)
                # under the lock, never a walk of every pending Event (record() waits on it).
                due: list[_Series] = []
                delay = float("inf")
                for series in self._unsettled.values():
                    if len(due) >= int(self._tokens):
                        delay = (1.0 - (self._tokens - len(due))) / self._qps
                        break
                    if series.writing:
                        continue
                    at = series.due(self._min_interval)
                    if at <= now:
                        due.append(series)
                    else:
                        delay = min(delay, at - now)
                self._tokens -= len(due)
                for series in due:
                    series.writing = True
                if not due and delay == float("inf"):  # every unsettled one is being written
                    delay = self._min_interval
                report = self._budget.drop_report()
            self._warn_dropped(report)
            for series in due:
                self._write(series)
            if not due:
                self._wake.wait(max(delay, 0.001))
