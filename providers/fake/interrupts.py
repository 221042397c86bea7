"""The fake cloud's interruptions with a notice window: the notices it holds until acked,
the instances it takes at their deadlines, and `NoticeCalls`, the `notices`/`ack` calls
and the `interrupt` action the cloud mixes in.

An `interrupt` fault issues one notice per chosen instance (`NoticeBook.issue`); the
provider's long poll (`notices`) delivers the owner's unacked ones, each hidden for the
scenario's `notice_redelivery` seconds after a delivery (as a queue's visibility timeout),
then delivered again until acked. At the deadline the instance is taken as `lose` takes it
(TERMINATED, preempted) unless it is already going; a rebalance recommendation takes
nothing. With the scenario's `notices: false` the wire says nothing ahead: no notice is
held, the instance is still taken at the deadline. Bounded: `MAX_NOTICES` held, `BATCH` a
delivery, `MAX_WAIT` seconds a poll. Owned by `FakeCloud` under its lock.
Tests: tests/providers/fake/test_fake_notices.py.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from providers import base, errors
from providers.fake import ownership
from providers.fake.calllog import CallLog
from providers.fake.faults import Action
from providers.fake.records import GOING_STATES, LIVE_STATES, InstanceRecord
from providers.fake.scenario import Scenario
from providers.fake.store import Records
from providers.notices import Notice, NoticeKind

MAX_NOTICES = 10_000  # held (unacked) notices, and pending deadlines, per cloud
BATCH = 100  # notices one delivery carries at most
MAX_WAIT = 20.0  # seconds a long poll waits at most, whatever it asks


@dataclass
class HeldNotice:
    id: str
    instance: str
    owner: str
    kind: NoticeKind
    issued_at: float
    deadline: float | None  # None: a rebalance recommendation (nothing goes)
    visible_at: float = 0.0  # hidden from deliveries until then (after one)
    deliveries: int = 0

    def to_notice(self) -> Notice:
        deadline = None if self.deadline is None else datetime.fromtimestamp(self.deadline, UTC)
        said = "no capacity is taken" if deadline is None else f"the instance is taken at {deadline.isoformat()}"
        return Notice(
            id=self.id,
            instance_id=base.InstanceId(self.instance),
            kind=self.kind,
            issued_at=datetime.fromtimestamp(self.issued_at, UTC),
            deadline=deadline,
            detail=f"fake: {self.kind.value} for {self.instance}: {said}",
            receipt=self.id,
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "kind": self.kind.value}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HeldNotice:
        return cls(**{**data, "kind": NoticeKind(data["kind"])})


class NoticeBook:
    """The held notices (by id, in the order issued) and the deadlines still to come."""

    def __init__(self) -> None:
        self._held: dict[str, HeldNotice] = {}
        self._by_target: dict[tuple[str, NoticeKind], str] = {}  # (instance, kind) -> notice id
        self._deadlines: list[tuple[float, str]] = []  # heap of (deadline, instance id)
        self._doomed: dict[str, float] = {}  # instance id -> its earliest pending deadline
        self._counter = 0

    def __len__(self) -> int:
        return len(self._held)

    def issue(
        self, targets: Iterable[InstanceRecord], kind: NoticeKind, *, now: float, notice: float, told: bool
    ) -> list[str]:
        """A notice about each target (unless one of this kind is held for it), the deadline
        noted when the kind takes capacity; `told` false holds no notice (the wire says
        nothing ahead). The ids issued (or already held). ValueError past `MAX_NOTICES`."""
        chosen = list(targets)
        if len(self._held) + len(chosen) > MAX_NOTICES or len(self._deadlines) + len(chosen) > MAX_NOTICES:
            raise ValueError(f"interrupt: at most {MAX_NOTICES} notices are held at once")
        ids = []
        for record in chosen:
            held = self.held_for(record.id, kind)
            if held is not None:
                ids.append(held.id)
                continue
            deadline = None if kind is NoticeKind.REBALANCE else now + notice
            if deadline is not None:
                heapq.heappush(self._deadlines, (deadline, record.id))
                self._doomed[record.id] = min(deadline, self._doomed.get(record.id, deadline))
            if not told:
                continue
            self._counter += 1
            notice_id = f"n-{self._counter}"
            self._hold(HeldNotice(notice_id, record.id, record.owner, kind, now, deadline))
            ids.append(notice_id)
        return ids

    def noticed(self, instance_id: str, kind: NoticeKind) -> bool:
        """Whether an interrupt of `kind` would add nothing: a notice of it is held, or (for
        a kind that takes capacity) the instance's deadline is already set."""
        return self.held_for(instance_id, kind) is not None or (
            kind is not NoticeKind.REBALANCE and instance_id in self._doomed
        )

    def held_for(self, instance_id: str, kind: NoticeKind) -> HeldNotice | None:
        notice_id = self._by_target.get((instance_id, kind))
        return None if notice_id is None else self._held.get(notice_id)

    def _hold(self, held: HeldNotice) -> None:
        self._held[held.id] = held
        self._by_target[(held.instance, held.kind)] = held.id

    def _drop(self, held: HeldNotice) -> None:
        del self._held[held.id]
        self._by_target.pop((held.instance, held.kind), None)

    def deliver(self, owner: str, now: float, limit: int, redelivery: float, records: Records) -> list[Notice]:
        """The owner's visible notices, oldest first, at most `limit`; each is hidden for
        `redelivery` seconds. A notice whose instance is forgotten is dropped."""
        found: list[Notice] = []
        for held in list(self._held.values()):
            if records.get(held.instance) is None:
                self._drop(held)
                continue
            if held.owner != owner or not held.owner or held.visible_at > now:
                continue
            held.visible_at, held.deliveries = now + redelivery, held.deliveries + 1
            found.append(held.to_notice())
            if len(found) >= limit:
                break
        return found

    def ack(self, notice_id: str, owner: str) -> bool:
        """Forget the owner's notice; False if none was held (acked already, or another's)."""
        held = self._held.get(notice_id)
        if held is None or held.owner != owner:
            return False
        self._drop(held)
        return True

    def take_due(self, now: float, records: Records, scenario: Scenario) -> int:
        """Take every instance whose deadline passed by `now` (at its deadline), unless it is
        already going; how many were taken."""
        taken = 0
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, instance_id = heapq.heappop(self._deadlines)
            if self._doomed.get(instance_id) == deadline:
                del self._doomed[instance_id]
            record = records.get(instance_id)
            if record is None or record.state in GOING_STATES:
                continue
            record.advance(deadline, scenario)
            record.lose(deadline, scenario.retention_seconds)
            records.going(record)
            taken += 1
        return taken

    def clear(self) -> None:
        self._held.clear()
        self._by_target.clear()
        self._deadlines.clear()
        self._doomed.clear()

    def to_dict(self) -> dict[str, Any]:
        return {
            "counter": self._counter,
            "held": [h.to_dict() for h in self._held.values()],
            "deadlines": [list(d) for d in sorted(self._deadlines)],
        }

    def restore(self, data: Mapping[str, Any]) -> None:
        """Load `to_dict`'s form (a state file); an empty mapping is an empty book. ValueError
        if it is not that form."""
        self.clear()
        try:
            self._counter = int(data.get("counter", 0))
            for raw in data.get("held") or ():
                self._hold(HeldNotice.from_dict(raw))
            self._deadlines = [(float(at), str(instance)) for at, instance in data.get("deadlines") or ()]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"fake state: malformed notices: {exc}") from exc
        heapq.heapify(self._deadlines)
        for at, instance in self._deadlines:
            self._doomed[instance] = min(at, self._doomed.get(instance, at))


def targets(action: Action, records: Records, book: NoticeBook) -> list[InstanceRecord]:
    """The instances an `interrupt` names: by id or claim (one not going away), or `count` of
    the live ones (of `tier`, if given) not yet interrupted so, oldest first."""
    kind = NoticeKind(action.notice_kind)
    if action.count is None:
        record = ownership.control_target(records, action.instance, action.claim)
        if record is None or record.state in GOING_STATES:
            raise errors.NotFound(f"fake: no live instance {action.instance or action.claim} to interrupt")
        return [record]
    chosen = []
    for record in records:  # in the order made: oldest first
        fits = action.tier is None or record.tier is action.tier
        if record.state in LIVE_STATES and fits and not book.noticed(record.id, kind):
            chosen.append(record)
            if len(chosen) == action.count:
                break
    if not chosen:
        raise errors.NotFound("fake: no live instance to interrupt")
    return chosen


class NoticeCalls:
    """The cloud's `notices` and `ack` (the provider's NoticeSource calls, owner-scoped) and
    its `interrupt` action; mixed into `FakeCloud`, which defines what is declared here."""

    scenario: Scenario
    _lock: threading.RLock
    _changed: threading.Condition  # over `_lock`: notified when a notice is issued
    _book: NoticeBook
    _instances: Records
    _calls: CallLog
    _clock: Callable[[], float]

    def _call(self, method: str, summary: str, *, owner: str | None = None) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def _save(self) -> None:
        raise NotImplementedError

    def notices(self, *, owner: str, wait: float, limit: int = BATCH) -> list[Notice]:
        """The owner's unacked notices not delivered in the last `notice_redelivery` seconds,
        waiting up to `wait` seconds (real time, at most `MAX_WAIT`) for one to be issued."""
        wait, limit = min(max(float(wait), 0.0), MAX_WAIT), min(max(int(limit), 1), BATCH)
        with self._call("notices", f"owner={owner} wait={wait:g}", owner=owner) as call:
            end = time.monotonic() + wait
            while True:
                found = self._book.deliver(
                    owner, self._clock(), limit, self.scenario.notice_redelivery, self._instances
                )
                left = end - time.monotonic()
                if found or left <= 0:
                    break
                self._changed.wait(left)
            call.outcome = f"ok {len(found)} notices"
            return found

    def ack(self, notice_id: str, *, owner: str) -> None:
        """Idempotent: the notice is never delivered again (unknown or another's: nothing)."""
        with self._call("ack", f"owner={owner} id={notice_id}", owner=owner) as call:
            acked = self._book.ack(notice_id, owner)
            call.outcome = "ok" if acked else "ok not held"
            if acked:
                self._save()

    def _interrupt(self, action: Action, now: float) -> dict[str, Any]:
        chosen = targets(action, self._instances, self._book)
        kind = NoticeKind(action.notice_kind)
        ids = self._book.issue(chosen, kind, now=now, notice=action.notice, told=self.scenario.notices)
        self._calls.add(now, "inject", f"interrupt {kind.value} x{len(chosen)} notice={action.notice:g}", "ok")
        self._save()
        self._changed.notify_all()
        return {"kind": "interrupt", "instances": [r.id for r in chosen], "notices": ids, "applied": True}
