"""The fake cloud's stored instance records, indexed so a call costs what it touches.

Used by `FakeCloud` under its lock: records by id, by claim (provision's idempotency
check), and a heap of the times retained records are forgotten (the sweep), so neither
walks every record. Records are advanced to a time only when asked: `advance_all` for the
calls that read every one, `with_claim` and the cloud's own lookups for the rest, which is
the same answer as advancing all of them on every call, because a record's transitions
depend on time alone.
Tests: tests/providers/fake/test_fake_store.py.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from providers import errors
from providers.fake import ownership
from providers.fake.faults import Action
from providers.fake.records import GOING_STATES, InstanceRecord
from providers.fake.scenario import Scenario
from providers.fake.workload import ContainerRecord


class Records:
    def __init__(self) -> None:
        self._by_id: dict[str, InstanceRecord] = {}
        self._by_claim: dict[str, dict[str, None]] = {}  # claim -> ids, in the order made
        self._going: list[tuple[float, str]] = []  # heap of (gone_at, id)

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[InstanceRecord]:
        return iter(self._by_id.values())

    def get(self, instance_id: str) -> InstanceRecord | None:
        return self._by_id.get(instance_id)

    def add(self, record: InstanceRecord) -> None:
        self._by_id[record.id] = record
        self._by_claim.setdefault(record.claim, {})[record.id] = None
        self.going(record)

    def remove(self, instance_id: str) -> None:
        record = self._by_id.pop(instance_id)
        ids = self._by_claim.get(record.claim)
        if ids is not None:
            ids.pop(instance_id, None)
            if not ids:
                del self._by_claim[record.claim]

    def clear(self) -> None:
        self._by_id.clear()
        self._by_claim.clear()
        self._going.clear()

    def going(self, record: InstanceRecord) -> None:
        """Note when `record` is to be forgotten (call after anything sets its gone_at)."""
        if record.gone_at is not None:
            heapq.heappush(self._going, (record.gone_at, record.id))

    def owned(self, instance_id: str, owner: str, now: float, scenario: Scenario) -> InstanceRecord | None:
        """The owner's record `instance_id`, advanced to `now`; None for none (or another's)."""
        record = ownership.owned(self._by_id.get(instance_id), owner)
        if record is not None:
            record.advance(now, scenario)
        return record

    def require(self, instance_id: str, owner: str, now: float, scenario: Scenario) -> InstanceRecord:
        """`owned`, or NotFound."""
        record = self.owned(instance_id, owner, now, scenario)
        if record is None:
            raise errors.NotFound(f"fake: no instance {instance_id}")
        return record

    def require_running(
        self, instance_id: str, owner: str, container: str, now: float, scenario: Scenario
    ) -> ContainerRecord:
        """The owner's running container (empty: the first app container); NotFound otherwise."""
        record = self.require(instance_id, owner, now, scenario)
        found = record.require(container)
        if record.state in GOING_STATES or not found.running:
            raise errors.NotFound(f"fake: container {container or found.name!r} of {instance_id} is not running")
        return found

    def apply(self, action: Action, now: float, scenario: Scenario) -> InstanceRecord:
        """A one-shot control action (lose, exit, file) on the record it names, whoever owns it
        (records advanced to `now` first); NotFound for none."""
        record = ownership.control_target(self, action.instance, action.claim)
        if record is None:
            raise errors.NotFound(f"fake: no instance {action.instance or action.claim}")
        if action.kind == "lose" and action.vanish:
            self.remove(record.id)
        elif action.kind == "lose":
            record.lose(now, scenario.retention_seconds)
            self.going(record)
        elif action.kind == "file":
            record.require(action.container or "").set_file(action.path, present=action.present)
        elif action.container is not None:
            record.exit_container(now, action.container, action.code, scenario)
        else:
            record.finish(now, action.code, scenario)
        return record

    def with_claim(self, claim: str, now: float, scenario: Scenario) -> list[InstanceRecord]:
        """The records with `claim`, oldest first, advanced to `now`."""
        found = [self._by_id[i] for i in self._by_claim.get(claim, {})]
        for record in found:
            record.advance(now, scenario)
        return found

    def advance_all(self, now: float, scenario: Scenario) -> None:
        for record in self._by_id.values():
            record.advance(now, scenario)

    def sweep(self, now: float) -> int:
        """Forget the records whose retention ended by `now`; how many."""
        count = 0
        while self._going and self._going[0][0] <= now:
            gone_at, instance_id = heapq.heappop(self._going)
            record = self._by_id.get(instance_id)
            if record is not None and record.gone_at == gone_at:  # else stale: re-terminated, or gone
                self.remove(instance_id)
                count += 1
        return count
