"""The register of gated Pods placement holds back: what each waits for as last decided, and
which of them a change of offerings, of the blocklist or of a pool's budget room must wake.

Written by the placement controller's workers (`begin`, `note`, `end`, `forget`); read by the
controller's wake-ups and, through `Placement.gated_pods`, by the console. Thread-safe and
memory only: an empty register after a restart is correct (every gated Pod is looked at
again when the Pod reflector lists it). Never does I/O.
Tests: tests/placement/test_gated.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kube import names
from placement.request import is_placeable, labels


@dataclass(frozen=True)
class Waiting:
    """Why one gated Pod is held, as its last look worded it (the Event's words, unless that
    look found the same obstacles and wrote none). `next_look` (epoch seconds) is None when
    only a change of the Pod or its pool can help (a configuration error)."""

    uid: str
    reason: str
    message: str
    next_look: float | None = None
    watched: frozenset[str] = frozenset()  # providers whose offerings coming back may serve it
    blocked: bool = False  # a cleared blocklist entry may serve it
    waits_for: Any = field(default=None, compare=False)  # what the Event is about, without the clock
    budget_pool: str = ""  # held by this pool's budget (BudgetExceeded): a released commitment may serve it


@dataclass(frozen=True)
class GatedPod:
    """A Pod still carrying placement's gate, for the console: `reason` and `message` are
    those of placement's last look at it (None before its first look)."""

    uid: str
    namespace: str
    name: str
    pool: str | None
    reason: str | None
    message: str | None
    next_look: datetime | None


class GatedRegister:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, Waiting] = {}
        self._in_flight: set[str] = set()

    def begin(self, key: str) -> None:
        """An attempt for `key` starts: any wake-up until `end` requeues it, so a change seen
        by no one during the attempt is never lost."""
        with self._lock:
            self._in_flight.add(key)

    def end(self, key: str) -> None:
        with self._lock:
            self._in_flight.discard(key)

    def note(self, key: str, waiting: Waiting) -> bool:
        """Record why `key` waits. True when that differs from what was recorded for the same
        Pod (its uid): the Event about it is due."""
        with self._lock:
            before = self._waiting.get(key)
            self._waiting[key] = waiting
        return before is None or before.uid != waiting.uid or bool(_subject(before) != _subject(waiting))

    def forget(self, key: str) -> None:
        """The Pod was placed, went, or is no longer placement's to hold."""
        with self._lock:
            self._waiting.pop(key, None)

    def get(self, key: str) -> Waiting | None:
        with self._lock:
            return self._waiting.get(key)

    def woken_by_offerings(self, provider: str) -> list[str]:
        """Keys that may be served now that `provider` sells something new, and every key in flight."""
        with self._lock:
            woken = {key for key, w in self._waiting.items() if provider in w.watched}
            return sorted(woken | self._in_flight)

    def woken_by_blocklist(self) -> list[str]:
        """Keys that may be served now that a blocklist entry was cleared, and every key in flight."""
        with self._lock:
            woken = {key for key, w in self._waiting.items() if w.blocked}
            return sorted(woken | self._in_flight)

    def woken_by_budget(self, pool: str) -> list[str]:
        """Keys held by `pool`'s budget, now that it released a commitment, and every key in flight."""
        with self._lock:
            woken = {key for key, w in self._waiting.items() if w.budget_pool == pool}
            return sorted(woken | self._in_flight)

    def watching_offerings(self) -> bool:
        """Does some Pod wait for offerings to come back (so the catalog is worth asking again)?"""
        with self._lock:
            return any(w.watched for w in self._waiting.values())


def gated_pods(pods: Iterable[Mapping[str, Any]], register: GatedRegister) -> list[GatedPod]:
    """Every Pod of `pods` (the placement controller's reflector snapshot) still carrying our
    gate, with what `register` last said of it, by namespace and name."""
    found = []
    for pod in pods:
        if not is_placeable(pod):
            continue
        meta = pod["metadata"]
        uid = str(meta.get("uid", ""))
        waiting = register.get(f"{meta['namespace']}/{meta['name']}")
        if waiting is not None and waiting.uid != uid:
            waiting = None  # a same-named Pod's; this one was not looked at yet
        look = waiting.next_look if waiting is not None else None
        found.append(
            GatedPod(
                uid=uid,
                namespace=meta["namespace"],
                name=meta["name"],
                pool=labels(pod).get(names.POOL_LABEL) or None,
                reason=waiting.reason if waiting else None,
                message=waiting.message if waiting else None,
                next_look=None if look is None else datetime.fromtimestamp(look, UTC),
            )
        )
    return sorted(found, key=lambda g: (g.namespace, g.name))


def _subject(waiting: Waiting) -> Any:
    return waiting.waits_for if waiting.waits_for is not None else (waiting.reason, waiting.message)
