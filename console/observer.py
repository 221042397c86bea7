"""The console's observer: hears the core's facts (`kube.observe`), counts them in
`console.metrics`, logs the ones worth knowing (Pod, claim and instance named) and keeps the
little memory the mirror needs that no Handler holds: lease renewals, leadership, the latest
Events (one per Event object, its repeats counted), open streams, and how each provider's
instances ended (`console.ends`: interrupted, unreachable, failed; bounded).

Installed by the process wiring (`nebula_site.manager`); called on the core's threads, so
every method is cheap, thread-safe and never raises.
Tests: tests/console/test_console_units.py, tests/console/test_console_ends.py.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from console import ends, metrics
from kube import observe

logger = logging.getLogger("nebula.events")

RECENT_EVENTS = 50
PLACEMENT_OUTCOMES = ("placed", "blocked", "no_candidate", "budget", "invalid", "not_gated", "capacity_wait_exceeded")


@dataclass(frozen=True)
class EventNote:
    """One Event the manager wrote, as the console remembers it: one note per Event object
    (`key`, its namespace/name), its repeats counted; `seq` orders the last writes, `at` is
    the last one's time and `first_at` the first's."""

    seq: int
    at: datetime
    kind: str
    namespace: str
    name: str
    type: str
    reason: str
    message: str
    key: str = ""
    count: int = 1
    first_at: datetime | None = None


class ConsoleObserver:
    """Implements kube.observe.Observer."""

    def __init__(self, *, now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._now = now
        self._lock = threading.Lock()
        self._seq = itertools.count(1)
        self._events: OrderedDict[str, EventNote] = OrderedDict()  # by Event, last written last
        self._node_synced: dict[str, datetime] = {}
        self._leader: bool | None = None
        self._leadership_at = float("-inf")  # monotonic
        self._open_streams = dict.fromkeys(metrics.STREAM_KINDS, 0)
        self._ends = ends.EndsMemory()
        for outcome in PLACEMENT_OUTCOMES:
            metrics.PLACEMENTS.labels(outcome=outcome)

    # -- facts from the core -------------------------------------------------------------------
    def provisioned(self, provider: str, outcome: str, seconds: float, subject: observe.Subject) -> None:
        metrics.PROVISIONS.labels(provider=provider, outcome=outcome).inc()
        metrics.PROVISION_SECONDS.labels(provider=provider, outcome=outcome).observe(seconds)
        level = logging.INFO if outcome == "ok" else logging.WARNING
        logger.log(
            level,
            "provision on %s: %s after %.3fs",
            provider,
            outcome,
            seconds,
            extra=_extra(provider, subject, outcome=outcome),
        )

    def terminated(self, provider: str, outcome: str, subject: observe.Subject) -> None:
        metrics.TERMINATIONS.labels(provider=provider, outcome=outcome).inc()
        level = logging.INFO if outcome == "ok" else logging.WARNING
        logger.log(level, "terminate on %s: %s", provider, outcome, extra=_extra(provider, subject, outcome=outcome))

    def orphan_swept(self, provider: str, subject: observe.Subject) -> None:
        metrics.ORPHANS_SWEPT.labels(provider=provider).inc()

    def listed(self, provider: str, seconds: float, ok: bool) -> None:
        metrics.POLL_SECONDS.labels(provider=provider).observe(seconds)
        if not ok:
            metrics.POLL_ERRORS.labels(provider=provider).inc()

    def interrupted(self, provider: str, tier: str, kind: str, subject: observe.Subject) -> None:
        tier, kind = self._ends.interrupted(provider, tier, kind)  # the bounded names
        metrics.INTERRUPTIONS.labels(provider=provider, tier=tier, kind=kind).inc()
        logger.warning(
            "%s interrupted on %s (%s)",
            kind,
            provider,
            tier if tier != ends.UNKNOWN_TIER else "tier unknown",
            extra=_extra(provider, subject, outcome=kind),
        )

    def workload_failed(self, provider: str, reason: str, subject: observe.Subject) -> None:
        reason = self._ends.failed(provider, reason)
        metrics.WORKLOAD_FAILURES.labels(provider=provider, reason=reason).inc()

    def reachability(self, provider: str, reachable: bool, pods: int) -> None:
        self._ends.reachability(provider, reachable, pods, self._now())
        metrics.UNREACHABLE_PODS.labels(provider=provider).set(0 if reachable else max(0, pods))

    def node_synced(self, node: str) -> None:
        with self._lock:
            self._node_synced[node] = self._now()

    def leadership(self, leader: bool | None) -> None:
        with self._lock:
            self._leader, self._leadership_at = leader, time.monotonic()

    def event_recorded(
        self,
        kind: str,
        namespace: str,
        name: str,
        event_type: str,
        reason: str,
        message: str,
        *,
        count: int = 1,
        event: str = "",
    ) -> None:
        """A repeat of an Event (same `event` name) updates its one note: count, message, time."""
        metrics.EVENTS.labels(kind=kind, type=event_type).inc()
        with self._lock:
            seq, now = next(self._seq), self._now()
            key = f"{namespace}/{event}" if event else f"#{seq}"  # an unnamed Event is its own row
            before = self._events.pop(key, None)
            first = before.first_at if before is not None else now
            note = EventNote(seq, now, kind, namespace, name, event_type, reason, message, key, count, first)
            self._events[key] = note
            while len(self._events) > RECENT_EVENTS:
                self._events.popitem(last=False)

    def event_dropped(self, occurrences: int) -> None:
        metrics.EVENTS_DROPPED.inc(occurrences)

    def placement_decided(self, outcome: str) -> None:
        metrics.PLACEMENTS.labels(outcome=outcome).inc()

    def stream_opened(self, kind: str) -> None:
        with self._lock:
            self._open_streams[kind] = self._open_streams.get(kind, 0) + 1
            metrics.STREAMS_OPEN.labels(kind=kind).set(self._open_streams[kind])

    def stream_closed(self, kind: str) -> None:
        with self._lock:
            self._open_streams[kind] = max(0, self._open_streams.get(kind, 0) - 1)
            metrics.STREAMS_OPEN.labels(kind=kind).set(self._open_streams[kind])

    # -- what the mirror and /readyz read ------------------------------------------------------
    def node_synced_at(self, node: str) -> datetime | None:
        with self._lock:
            return self._node_synced.get(node)

    def last_node_sync(self) -> datetime | None:
        with self._lock:
            return max(self._node_synced.values(), default=None)

    def leadership_seen(self) -> tuple[bool | None, float]:
        """The last leadership answer (None: could not ask) and its monotonic time (-inf: never)."""
        with self._lock:
            return self._leader, self._leadership_at

    def recent_events(self) -> list[EventNote]:
        with self._lock:
            return list(self._events.values())

    def ends_of(self, provider: str) -> ends.Ends:
        """How `provider`'s instances ended so far (interrupted, unreachable, failed)."""
        return self._ends.of(provider)


def _extra(provider: str, subject: observe.Subject, **more: str) -> dict[str, str]:
    return {"provider": provider, "pod": subject.pod, "claim": subject.claim, "instance": subject.instance, **more}


_installed: list[ConsoleObserver] = []


def install(observer: ConsoleObserver | None = None) -> ConsoleObserver:
    """Make `observer` (or a new one) the process's observer; returns it."""
    chosen = observer or ConsoleObserver()
    _installed[:] = [chosen]
    observe.install(chosen)
    return chosen


def uninstall() -> None:
    _installed.clear()
    observe.install(None)


def installed() -> ConsoleObserver | None:
    return _installed[0] if _installed else None
