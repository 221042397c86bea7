"""The blocklist's writer: local records and clears carried to the cluster on one background thread.

Fed by `placement.blockstore` (a record from any Handler, a clear, a sweep of an expired object);
writes `blocklistentries.nebula.io`. Never blocks its callers: a bounded queue coalescing by
name (I7), each failed write retried with back-off and logged. Never shortens an expiry, and
never writes back a record older than a clear it was told of (`withdraw`).
Tests: tests/placement/test_blockstore.py, tests/placement/test_blockstore_clear.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from kube.client import ConflictError, Kube, KubeError, NotFoundError
from placement.blocklist import JITTER_FRACTION, MAX_ENTRIES, MAX_JITTER, BlockEntry
from placement.blockobject import ENTRIES, created_of, encode, entry_path, expires_of

logger = logging.getLogger(__name__)

MAX_PENDING = 1024  # writes waiting (one per name); past it a write is dropped, memory keeps the entry
MAX_CONFLICTS = 5  # read-and-extend rounds one write tries before it waits and retries
LOG_EVERY = 30.0  # seconds between two warnings about failing writes (or dropped ones)
_RETRIED = {0, 404, 409, 429}  # unreachable, the CRD not installed yet, conflicts, throttled


@dataclass(frozen=True)
class _Put:
    entry: BlockEntry
    replace: bool = False  # in place of our own clear still queued: delete the object, then create


@dataclass(frozen=True)
class _Delete:
    resource_version: str | None  # a sweep's precondition; None: an operator's clear


_Op = _Put | _Delete


class BlockWriter:
    """Thread-safe. `clock` gives epoch seconds (the blocklist's)."""

    def __init__(
        self,
        kube: Kube,
        *,
        clock: Callable[[], float] = time.time,
        max_pending: int = MAX_PENDING,
        initial_backoff: float = 0.2,
        max_backoff: float = 10.0,
    ) -> None:
        self._kube = kube
        self._clock = clock
        self._max_pending = max_pending
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._pending: OrderedDict[str, _Op] = OrderedDict()
        self._in_flight: tuple[str, _Op] | None = None
        self._written: dict[str, float] = {}  # name -> the expiry the cluster is known to hold
        self._cleared: set[str] = set()  # our own deletions whose DELETED the watch has not shown yet
        # Withdrawn writes that landed and were deleted again: name -> the resourceVersion written,
        # until the watch shows the deletion. Its ADDED may reach the watch after the write and
        # its undoing both ended: that object is not a record (`undone`).
        self._undone: dict[str, str] = {}
        self._withdrawn: set[str] = set()  # the name in flight, if its record was withdrawn meanwhile
        self._cond = threading.Condition()
        self._stopping = False
        self._stopped = threading.Event()  # wakes a back-off wait at once
        self._deadline = 0.0
        self._thread: threading.Thread | None = None
        self.dropped = 0  # writes refused by a full queue
        self.failures = 0  # writes that failed (each retried unless superseded or refused)
        self._logged_at = -LOG_EVERY

    # -- what callers ask for ------------------------------------------------------------------
    def put(self, entry: BlockEntry) -> None:
        """Write `entry` (create, or extend the existing object). Skipped when the cluster
        already holds an expiry this close (within the jitter's width): no write per refusal;
        never skipped while a deletion of the name is queued or being written (the object is
        going). In place of our own clear still queued, the write deletes, then creates."""
        expires = entry.expires_at.timestamp()
        slack = min(MAX_JITTER, JITTER_FRACTION * max(0.0, expires - self._clock()))
        with self._cond:
            ops = self._ops_locked(entry.id)
            deleting = any(isinstance(op, _Delete) or (isinstance(op, _Put) and op.replace) for op in ops)
            if not deleting and self._written.get(entry.id, float("-inf")) >= expires - slack:
                return
            queued = self._pending.get(entry.id)
            if isinstance(queued, _Put) and queued.entry.expires_at >= entry.expires_at:
                return
            replace = isinstance(queued, _Delete) and queued.resource_version is None
            replace = replace or (isinstance(queued, _Put) and queued.replace)
            self._queue_locked(entry.id, _Put(entry, replace=replace))

    def delete(self, name: str, *, resource_version: str | None = None) -> None:
        """Delete the object. With `resource_version` (a sweep of an expired object) only that
        version, and never in place of a record waiting to be written or of a clear; without (a
        clear), in place of anything queued for the name."""
        with self._cond:
            queued = self._pending.get(name)
            if resource_version is not None and (isinstance(queued, _Put) or queued == _Delete(None)):
                return
            if resource_version is None:
                self._cleared.add(name)
                self._trim_cleared_locked()
            self._queue_locked(name, _Delete(resource_version))

    def holds_record(self, name: str) -> bool:
        """A local record of `name` not written yet (queued, or being written and not withdrawn)."""
        with self._cond:
            queued, in_flight = self._ops_locked(name)
            return isinstance(queued, _Put) or (isinstance(in_flight, _Put) and name not in self._withdrawn)

    def clearing(self, name: str) -> bool:
        """A clear of `name` made here is queued or being written, or the record being written was
        withdrawn (the watch may still show an object that is going)."""
        with self._cond:
            ops = self._ops_locked(name)
            return name in self._withdrawn or any(
                (isinstance(op, _Delete) and op.resource_version is None) or (isinstance(op, _Put) and op.replace)
                for op in ops
            )

    def undone(self, name: str, resource_version: object) -> bool:
        """The watch shows the object this writer wrote for a withdrawn record and deleted again."""
        with self._cond:
            return resource_version is not None and self._undone.get(name) == resource_version

    def own_deletion(self, name: str) -> bool:
        """The watch shows `name` deleted: True (once) when this writer deleted it on a clear made
        here; a record made here since is newer than that clear and stays."""
        with self._cond:
            self._undone.pop(name, None)
            if name in self._cleared:
                self._cleared.discard(name)
                return True
            return False

    def withdraw(self, name: str) -> None:
        """Someone else's clear of `name` was seen: drop the record queued (or waiting out a
        back-off) for it; the one being written, if any, is deleted again once written (on its
        resourceVersion). Records put after this call are new and are written."""
        with self._cond:
            if isinstance(self._pending.get(name), _Put):
                del self._pending[name]
            if self._in_flight is not None and self._in_flight[0] == name and isinstance(self._in_flight[1], _Put):
                self._withdrawn.add(name)

    def _ops_locked(self, name: str) -> list[_Op | None]:
        in_flight = self._in_flight[1] if self._in_flight is not None and self._in_flight[0] == name else None
        return [self._pending.get(name), in_flight]

    def seen(self, name: str, expires: float | None) -> None:
        """The cluster holds `name` until `expires` (None: no longer holds it)."""
        with self._cond:
            if expires is None:
                self._written.pop(name, None)
            else:
                self._written[name] = max(expires, self._written.get(name, float("-inf")))
                self._trim_written_locked()

    def idle(self) -> bool:
        """Nothing queued and nothing being written."""
        with self._cond:
            return not self._pending and self._in_flight is None

    def pending(self) -> int:
        with self._cond:
            return len(self._pending)

    # -- the thread ----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="blocklist writer", daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> list[threading.Thread]:
        """Try each queued write once more (within `timeout`; a failure is not retried now), then
        end. Returns the thread if still busy."""
        with self._cond:
            self._stopping = True
            self._deadline = time.monotonic() + timeout
            self._cond.notify_all()
        self._stopped.set()
        thread = self._thread
        if thread is None:
            return []
        thread.join(timeout)
        return [thread] if thread.is_alive() else []

    def _run(self) -> None:
        backoff = self._initial_backoff
        while True:
            with self._cond:
                while not self._pending and not self._stopping:
                    self._cond.wait()
                if not self._pending or (self._stopping and time.monotonic() >= self._deadline):
                    if self._pending:
                        logger.warning("stopping with %d blocklist writes not made", len(self._pending))
                    return
                name, op = self._pending.popitem(last=False)
                self._in_flight = (name, op)
            try:
                self._write(name, op)
                backoff = self._initial_backoff
            except KubeError as exc:
                self._failed(name, op, exc)
                self._stopped.wait(backoff)
                backoff = min(self._max_backoff, backoff * 2)
            finally:
                with self._cond:
                    self._in_flight = None
                    self._withdrawn.discard(name)

    def _failed(self, name: str, op: _Op, exc: KubeError) -> None:
        retried = exc.status in _RETRIED or exc.status >= 500
        with self._cond:
            self.failures += 1
            withdrawn = name in self._withdrawn  # cleared elsewhere meanwhile: not written again
            if retried and name not in self._pending and not self._stopping and not withdrawn:  # stopping: one try each
                self._queue_locked(name, op)
            warn = self._logged_at + LOG_EVERY <= time.monotonic()
            if warn:
                self._logged_at = time.monotonic()
        if not retried:
            logger.error("BlocklistEntry %s not written (the entry is kept in memory only): %s", name, exc)
        elif warn:
            logger.warning("BlocklistEntry %s not written yet (retrying with back-off): %s", name, exc)

    def _queue_locked(self, name: str, op: _Op) -> None:
        if name not in self._pending and len(self._pending) >= self._max_pending:
            self.dropped += 1
            if self._logged_at + LOG_EVERY <= time.monotonic():
                self._logged_at = time.monotonic()
                logger.warning(
                    "blocklist writes queue full (%d): %s kept in memory only (%d dropped so far)",
                    self._max_pending,
                    name,
                    self.dropped,
                )
            return
        self._pending[name] = op
        self._cond.notify_all()

    def _trim_cleared_locked(self) -> None:
        while len(self._cleared) > MAX_ENTRIES:  # a DELETED never seen (the object never written)
            self._cleared.pop()

    def _trim_written_locked(self) -> None:
        if len(self._written) > MAX_ENTRIES:
            now = self._clock()
            self._written = {k: v for k, v in self._written.items() if v > now}
            while len(self._written) > MAX_ENTRIES:
                self._written.pop(next(iter(self._written)))

    # -- the writes ------------------------------------------------------------------------------
    def _write(self, name: str, op: _Op) -> None:
        if isinstance(op, _Put):
            if op.replace:
                self._delete(name, None)
            version = self._extend(op.entry)
            with self._cond:
                withdrawn = name in self._withdrawn
                if withdrawn and version is not None:
                    self._cleared.add(name)  # our own deletion: not a clear of what is recorded since
                    self._undone[name] = version
                    while len(self._undone) > MAX_ENTRIES:  # a DELETED never seen
                        self._undone.pop(next(iter(self._undone)))
            if withdrawn and version is not None:
                self._undo(name, version)
            return
        self._delete(name, op.resource_version)

    def _undo(self, name: str, version: str) -> None:
        """Delete what a withdrawn record just wrote (on its resourceVersion: a later write stays)."""
        try:
            gone = self._delete(name, version)
        except KubeError:
            with self._cond:
                if name not in self._pending:
                    self._queue_locked(name, _Delete(version))  # retried: the object is stale
            return
        if not gone:
            with self._cond:
                self._cleared.discard(name)  # nothing deleted: no DELETED to wait for

    def _delete(self, name: str, resource_version: str | None) -> bool:
        """True when this call deleted the object."""
        options: dict[str, object] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if resource_version is not None:
            options["preconditions"] = {"resourceVersion": resource_version}
        try:
            self._kube.request("DELETE", entry_path(name), body=options)
        except NotFoundError:
            self.seen(name, None)
            return False  # gone already (cleared elsewhere, swept, deleted by hand)
        except ConflictError:
            if resource_version is None:
                raise
            return False  # a sweep: the object moved on (extended since it was read)
        self.seen(name, None)
        return True

    def _extend(self, entry: BlockEntry) -> str | None:
        """Create the object; if it exists, move its expiry to ours when ours is later (never
        earlier), on its resourceVersion, reading again after a conflict. The resourceVersion
        written, or None when the cluster already held a later expiry."""
        expires = entry.expires_at.timestamp()
        for _ in range(MAX_CONFLICTS):
            try:
                made = self._kube.create(ENTRIES, encode(entry, created=self._clock()))
                self.seen(entry.id, expires)
                return _version(made)
            except ConflictError:
                pass  # it exists: read and extend it
            try:
                current = self._kube.get(entry_path(entry.id))
            except NotFoundError:
                continue  # deleted in between: create it again
            held = expires_of(current)
            if held is not None and held >= expires:
                self.seen(entry.id, held)
                return None
            created = created_of(current) or self._clock()
            body = encode(entry, created=created)
            spec = dict(current.get("spec") or {})
            keep = {k: spec[k] for k in ("recordedAt", "pool") if spec.get(k)}
            body["spec"] |= keep
            body["metadata"] = dict(current.get("metadata") or {}, name=entry.id)
            try:
                replaced = self._kube.replace(entry_path(entry.id), body)
            except (ConflictError, NotFoundError):
                continue  # another replica extended it, or it went: read (or create) again
            self.seen(entry.id, expires)
            return _version(replaced)
        raise ConflictError(409, "Conflict", f"blocklist entry {entry.id}: {MAX_CONFLICTS} conflicting writes in a row")


def _version(obj: dict[str, object]) -> str | None:
    meta = obj.get("metadata")
    version = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return str(version) if version else None
