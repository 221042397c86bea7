"""The blocklist's cluster copy: BlocklistEntry objects written from, and watched into, memory (I6).

Built and started by the manager on every replica (`nebula_site.manager.main`), attached to the
replica's `Blocklist` as its sink: a local record or clear goes to the `BlockWriter`; the watch
feeds every object into memory (`apply`) and every deletion out of it (`drop`: a clear wins over
older records, a sweep does not); while leading (`lead`) it deletes expired objects. Never blocks
a record or a clear on the API. Tests: tests/placement/test_blockstore.py, test_blockstore_clear.py.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from kube.client import Kube, KubeError, NotFoundError
from kube.reflector import Reflector
from placement.blocklist import MAX_ENTRIES, BlockEntry, Blocklist
from placement.blockobject import ENTRIES, BlockObjectError, decode, expires_of
from placement.blockwriter import MAX_PENDING, BlockWriter

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]
SWEEP_INTERVAL = 30.0  # seconds between the leader's sweeps of expired objects
SWEEP_GRACE = 5.0  # seconds an object stays past its expiry before it is swept (clocks differ)


class Blockstore:
    """Thread-safe. `start` attaches it to `blocklist` and starts the watch, the writer and the
    sweeper; `stop(timeout)` writes what is queued (within `timeout`) and stops them."""

    def __init__(
        self,
        blocklist: Blocklist,
        kube: Kube,
        watch_kube: Kube,
        *,
        sweep_interval: float = SWEEP_INTERVAL,
        sweep_grace: float = SWEEP_GRACE,
        max_pending: int = MAX_PENDING,
        max_backoff: float = 10.0,
    ) -> None:
        self.blocklist = blocklist
        self._kube = kube
        self.writer = BlockWriter(kube, clock=blocklist.now, max_pending=max_pending, max_backoff=max_backoff)
        self.reflector = Reflector(watch_kube, ENTRIES, on_change=self._changed, max_backoff=max_backoff)
        self._sweep_interval = sweep_interval
        self._sweep_grace = sweep_grace
        self._leading = threading.Event()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        self._complained: set[str] = set()  # malformed objects already logged (bounded: MAX_ENTRIES)
        self._held: dict[str, float] = {}  # name -> the expiry its object last showed (bounded: MAX_ENTRIES)

    # -- life ----------------------------------------------------------------------------------
    def start(self) -> None:
        self.blocklist.attach(self)
        self.writer.start()
        self.reflector.start()
        self._sweeper = threading.Thread(target=self._sweep_loop, name="blocklist sweeper", daemon=True)
        self._sweeper.start()

    def stop(self, timeout: float) -> list[threading.Thread]:
        self._stop.set()
        self._wake.set()
        self.reflector.stop()
        return self.writer.stop(timeout)

    @property
    def synced(self) -> threading.Event:
        """Set once the first list has been applied to memory."""
        return self.reflector.synced

    def wait_listed(self, timeout: float) -> bool:
        """Wait (up to `timeout`) for the first list: True once memory holds every entry the
        cluster holds. False at once when the cluster does not serve BlocklistEntry (its CRD
        not installed: the blocklist is this replica's memory only, logged) or at the timeout."""
        if self.synced.is_set():
            return True
        try:
            self._kube.list(ENTRIES, limit="1")
        except NotFoundError:
            logger.warning("the cluster serves no blocklistentries.nebula.io (CRD not installed): refusals stay here")
            return False
        except KubeError:
            pass  # not answering: wait for the watch's list as long as allowed
        return self.synced.wait(timeout)

    def lead(self, leading: bool) -> None:
        """While leading, this replica sweeps expired objects (one sweeper: no write storm)."""
        if leading:
            self._leading.set()
            self._wake.set()
        else:
            self._leading.clear()

    # -- the sink (the Blocklist calls these outside its lock) ---------------------------------
    def recorded(self, entry: BlockEntry) -> None:
        self.writer.put(entry)

    def cleared(self, entry_id: str) -> None:
        self.writer.delete(entry_id)

    # -- the watch -----------------------------------------------------------------------------
    def _changed(self, name: str, obj: JsonDict | None) -> None:
        if obj is None:
            self._deleted(name)
            return
        self._remember(name, expires_of(obj))
        if self.writer.clearing(name):
            return  # cleared here; the delete is on its way
        if self.writer.undone(name, (obj.get("metadata") or {}).get("resourceVersion")):
            return  # a withdrawn write of ours that landed late, deleted again already
        try:
            entry = decode(obj, now=self.blocklist.now())
        except BlockObjectError as exc:
            if name not in self._complained and len(self._complained) < MAX_ENTRIES:
                self._complained.add(name)
                logger.warning("ignoring %s", exc)
            return
        self.writer.seen(name, entry.expires_at.timestamp())
        self.blocklist.apply(entry)

    def _remember(self, name: str, expires: float | None) -> None:
        if expires is None:
            self._held.pop(name, None)
            return
        if name not in self._held and len(self._held) >= MAX_ENTRIES:
            now = self.blocklist.now()
            self._held = {k: v for k, v in self._held.items() if v > now - self._sweep_grace}
            if len(self._held) >= MAX_ENTRIES:
                return  # unknown at its deletion: taken for a clear
        self._held[name] = expires

    def _deleted(self, name: str) -> None:
        """Deleted in the cluster. Our own clear: memory dropped it then; a record made here since
        is newer and stays. A sweep (the deleted object had expired): a record here expiring later
        stays and is written again. Otherwise a clear on another replica or `kubectl delete`
        (an unknown expiry counts as one): dropped, with every write of a record made before now."""
        self._complained.discard(name)
        deleted = self._held.pop(name, None)
        self.writer.seen(name, None)
        if self.writer.own_deletion(name):
            return
        if deleted is not None and deleted <= self.blocklist.now():
            local = self.blocklist.get(name)
            if local is not None and local.expires_at.timestamp() > deleted:
                logger.info("BlocklistEntry %s swept; a later refusal here writes it again", name)
                self.writer.put(local)
                return
            self.blocklist.drop(name)
            return
        if self.blocklist.drop(name, then=self.writer.withdraw):
            logger.info("BlocklistEntry %s deleted in the cluster: the entry is cleared here too", name)

    # -- the sweep -----------------------------------------------------------------------------
    def _sweep_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._sweep_interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            if self._leading.is_set() and self.reflector.synced.is_set():
                self.sweep()

    def sweep(self) -> int:
        """Queue the deletion of every object past its expiry (and the grace), each on its
        resourceVersion so an extension made meanwhile survives. Returns how many."""
        cutoff = self.blocklist.now() - self._sweep_grace
        count = 0
        for obj in self.reflector.snapshot():
            expires = expires_of(obj)
            meta = obj.get("metadata") or {}
            name, version = meta.get("name"), meta.get("resourceVersion")
            if expires is not None and expires <= cutoff and name and version:
                self.writer.delete(str(name), resource_version=str(version))
                count += 1
        if count:
            logger.info("sweeping %d expired blocklist entries", count)
        return count
