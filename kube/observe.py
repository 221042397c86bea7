"""The observer seam: what the core tells whoever watches it (metrics, the console's memory).

The Handler, node controller, leader elector and Event recorder call `current().<fact>(...)`
with one line per fact; `manage.py runvnode` installs the console's observer. The default
does nothing. An observer must be cheap, thread-safe and never raise; nothing here may
import Django or a metrics library (the core knows no screen).
Tests: tests/console/test_console_units.py.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Subject:
    """Who a fact is about, where known: the Pod (`namespace/name`), its claim, its instance."""

    pod: str = ""
    claim: str = ""
    instance: str = ""

    def on(self, instance: str) -> Subject:
        """The same Pod and claim, now served by `instance`."""
        return Subject(self.pod, self.claim, instance)


class Observer(Protocol):
    """Facts, never secrets: no env value, credential or provider payload crosses here."""

    def provisioned(self, provider: str, outcome: str, seconds: float, subject: Subject) -> None:
        """One `provider.provision` call ended: outcome is ok, refused, invalid, unavailable or error."""

    def terminated(self, provider: str, outcome: str, subject: Subject) -> None:
        """One `provider.terminate` for a Pod ended: ok, unavailable or error."""

    def orphan_swept(self, provider: str, subject: Subject) -> None:
        """The orphan sweep terminated one instance no Pod claims."""

    def listed(self, provider: str, seconds: float, ok: bool) -> None:
        """One `provider.list()` (the poll) took `seconds`; `ok` False when it failed."""

    def node_synced(self, node: str) -> None:
        """The node controller wrote the node's status and renewed its Lease just now."""

    def leadership(self, leader: bool | None) -> None:
        """The leader election asked the cluster: True leads, False stands by, None could not ask."""

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
        """An Event was written (or attempted) about a Pod or Node: `event` is the Event
        object's name (its repeats are written under the same name) and `count` its count so far."""

    def event_dropped(self, occurrences: int) -> None:
        """The Event recorder's queue was full: `occurrences` of Events were never written (I7)."""

    def interrupted(self, provider: str, tier: str, kind: str, subject: Subject) -> None:
        """The provider took an instance back: `kind` is the notice's (`providers.notices.NoticeKind`
        value) or `Reclaimed` (seen only after the fact); `tier` Spot, OnDemand or "" (unknown)."""

    def workload_failed(self, provider: str, reason: str, subject: Subject) -> None:
        """A Pod's workload failed (its own exit, not an interruption): `reason` is the Pod's."""

    def reachability(self, provider: str, reachable: bool, pods: int) -> None:
        """The provider's answers stopped (`reachable` False: `pods` Pods wait, none failed) or came back."""

    def placement_decided(self, outcome: str) -> None:
        """Placement decided for one Pod: placed, blocked, no_candidate, invalid, not_gated (no gate to act on)."""

    def stream_opened(self, kind: str) -> None:
        """A kubelet stream (logs, exec, attach) opened."""

    def stream_closed(self, kind: str) -> None:
        """That stream closed."""


class NullObserver:
    """The default: every fact is dropped."""

    def provisioned(self, provider: str, outcome: str, seconds: float, subject: Subject) -> None:
        pass

    def terminated(self, provider: str, outcome: str, subject: Subject) -> None:
        pass

    def orphan_swept(self, provider: str, subject: Subject) -> None:
        pass

    def listed(self, provider: str, seconds: float, ok: bool) -> None:
        pass

    def node_synced(self, node: str) -> None:
        pass

    def leadership(self, leader: bool | None) -> None:
        pass

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
        pass

    def event_dropped(self, occurrences: int) -> None:
        pass

    def interrupted(self, provider: str, tier: str, kind: str, subject: Subject) -> None:
        pass

    def workload_failed(self, provider: str, reason: str, subject: Subject) -> None:
        pass

    def reachability(self, provider: str, reachable: bool, pods: int) -> None:
        pass

    def placement_decided(self, outcome: str) -> None:
        pass

    def stream_opened(self, kind: str) -> None:
        pass

    def stream_closed(self, kind: str) -> None:
        pass


_NULL: Observer = NullObserver()
_lock = threading.Lock()
_current: Observer = _NULL


def current() -> Observer:
    """The installed observer (a plain read: the hot path takes no lock)."""
    return _current


def install(observer: Observer | None) -> None:
    """Install `observer` process-wide; None restores the no-op default."""
    global _current
    with _lock:
        _current = observer if observer is not None else _NULL
