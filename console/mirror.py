"""The mirror: the single writer that copies the manager's memory into the console's tables.

Started by the process wiring (`nebula_site.manager`), stopped on the way out. At most once
per `interval` it takes a `console.snapshot`, diffs it against what it last wrote, and writes
only the rows that changed, in ONE transaction. Its first sync empties the tables and writes
everything: a restart rebuilds the mirror from memory, and nothing is ever read back (I6).

Invariant: once a sync has committed, no row outlives an object gone before that sync's
snapshot began (`last_snapshot_at`), and every object present since then has its row; see
tests/console/test_mirror_churn.py::test_mirror_keeps_up_with_1000_churning_pods.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db import DatabaseError, connection, transaction

from console import metrics, runtime, snapshot
from console.observer import ConsoleObserver
from console.observer import installed as installed_observer

logger = logging.getLogger(__name__)

TABLES = snapshot.TABLES
STAMPED = {"pods", "claims"}  # tables with first_seen/last_seen columns the mirror fills in
BATCH = 500


@dataclass
class Changes:
    """What one sync writes: rows to upsert and keys to delete, per table."""

    upserts: dict[str, dict[str, snapshot.Row]] = field(default_factory=dict)
    deletes: dict[str, list[str]] = field(default_factory=dict)

    def count(self) -> int:
        return sum(len(rows) for rows in self.upserts.values()) + sum(len(keys) for keys in self.deletes.values())


def diff(written: dict[str, snapshot.Table], taken: snapshot.Snapshot, *, stale: Callable[[str, str], bool]) -> Changes:
    """Pure: the rows of `taken` that differ from `written` (or whose last-seen stamp is
    `stale(table, key)`), and the keys `written` holds that `taken` no longer has."""
    changes = Changes()
    for table, rows in taken.tables.items():
        before = written.get(table, {})
        changes.upserts[table] = {
            key: row for key, row in rows.items() if before.get(key) != row or (table in STAMPED and stale(table, key))
        }
        changes.deletes[table] = sorted(set(before) - set(rows))
    return changes


class Mirror:
    """One per process. `source` gives the manager's memory; `observer` the console's observer."""

    def __init__(
        self,
        source: Callable[[], runtime.Runtime] = runtime.current,
        *,
        observer: Callable[[], ConsoleObserver | None] = installed_observer,
        interval: float = 1.0,
        last_seen_every: float = 30.0,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._source = source
        self._observer = observer
        self._interval = interval
        self._last_seen_every = last_seen_every
        self._now = now
        self._monotonic = monotonic
        self._written: dict[str, snapshot.Table] | None = None  # None: rebuild on the next sync
        self._stamped: dict[str, dict[str, float]] = {}
        self._first_seen: dict[str, datetime] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.syncs = 0
        self.last_sync_at = float("-inf")  # monotonic time of the last commit
        # When the last committed sync began to read memory: every row reflects memory as of then.
        self.last_snapshot_at = float("-inf")

    # -- the thread ------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="console mirror", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> list[threading.Thread]:
        """Stop after the sync in progress; returns the thread if it outlasts `timeout`."""
        self._stop.set()
        if self._thread is None:
            return []
        self._thread.join(timeout)
        return [self._thread] if self._thread.is_alive() else []

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                started = self._monotonic()
                try:
                    self.sync_once()
                except DatabaseError as exc:
                    # The transaction rolled back: what we wrote before still stands, so the
                    # next sync diffs against it and catches up.
                    logger.warning("mirror sync failed; retrying next tick: %s", exc)
                self._stop.wait(max(0.0, self._interval - (self._monotonic() - started)))
        finally:
            connection.close()  # this thread's connection; Django does not close it for us

    # -- one sync --------------------------------------------------------------------------------
    def sync_once(self) -> int:
        """Read memory, write what changed in one transaction; returns rows written."""
        started = self._monotonic()
        taken = snapshot.take(self._source(), self._observer())
        rebuild = self._written is None
        written = self._written or {}
        changes = diff(written, taken, stale=self._stale)
        now = self._now()
        with transaction.atomic():
            if rebuild:
                for model in TABLES.values():
                    model.objects.all().delete()
            for table, keys in changes.deletes.items():
                self._delete(table, keys)
            for table, rows in changes.upserts.items():
                self._upsert(table, rows.values(), now)
        self._remember(taken, changes)
        finished = self._monotonic()
        self.syncs += 1
        self.last_sync_at, self.last_snapshot_at = finished, started
        metrics.mirror_synced(finished)
        metrics.MIRROR_SYNC_SECONDS.observe(finished - started)
        return changes.count()

    def _stale(self, table: str, key: str) -> bool:
        stamped = self._stamped.get(table, {}).get(key)
        return stamped is None or self._monotonic() - stamped >= self._last_seen_every

    def _delete(self, table: str, keys: list[str]) -> None:
        model = TABLES[table]
        for start in range(0, len(keys), BATCH):
            chunk = keys[start : start + BATCH]
            model.objects.filter(**{f"{model.mirror_key}__in": chunk}).delete()
        if keys:
            metrics.MIRROR_ROWS.labels(table=table).inc(len(keys))

    def _upsert(self, table: str, rows: Iterable[snapshot.Row], now: datetime) -> None:
        model = TABLES[table]
        objects = []
        for row in rows:
            values = dict(row)
            if table in STAMPED:
                values["first_seen" if table == "claims" else "provisioned_at"] = self._first_seen_for(table, row, now)
                values["last_seen"] = now
            objects.append(model(**values))
        if not objects:
            return
        fields = [f.name for f in model._meta.concrete_fields if f.name not in ("id", model.mirror_key)]
        model.objects.bulk_create(
            objects, batch_size=BATCH, update_conflicts=True, unique_fields=[model.mirror_key], update_fields=fields
        )
        metrics.MIRROR_ROWS.labels(table=table).inc(len(objects))

    def _first_seen_for(self, table: str, row: snapshot.Row, now: datetime) -> datetime | None:
        """Claims: when this process first saw the instance. Pods: when the instance was
        created, as the provider says; else when this process first saw it served (never for
        a Pod another replica serves: the API says null for it, and so does the mirror)."""
        if table == "pods" and (
            row.get("provisioned_at") is not None or not row.get("instance_id") or row.get("served_here") is False
        ):
            return row.get("provisioned_at")
        key = f"{table}/{row[TABLES[table].mirror_key]}"
        return self._first_seen.setdefault(key, now)

    def _remember(self, taken: snapshot.Snapshot, changes: Changes) -> None:
        """After the commit: what the tables now hold, and when each stamped row was written."""
        self._written = {table: dict(rows) for table, rows in taken.tables.items()}
        at = self._monotonic()
        for table in STAMPED:
            stamps = self._stamped.setdefault(table, {})
            for key in changes.deletes.get(table, []):
                stamps.pop(key, None)
                self._first_seen.pop(f"{table}/{key}", None)
            for key in changes.upserts.get(table, {}):
                stamps[key] = at
