"""In-memory object storage with one global resourceVersion counter and a bounded event history.

Resource behaviour (`resources.py`) is the only writer; it holds `Store.lock` around each
read-modify-write. Every write is fanned out to the open watchers under the same lock, so a
watcher sees each change exactly once and in order. Stored dicts are never mutated in place:
callers copy before changing and pass a new dict to `put`.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from devcluster.watch import Change, Watcher

Listener = Callable[[Change], None]


class Expired(Exception):
    """The requested resourceVersion is older than the retained history (410 Gone)."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")


class Store:
    """Objects by storage key, namespace and name; changes numbered by one counter."""

    def __init__(self, *, history: int = 10000, watcher_queue: int = 20000) -> None:
        self.lock = threading.RLock()
        self._objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        self._history: deque[Change] = deque(maxlen=max(1, history))
        self._watchers: set[Watcher] = set()
        self._listeners: list[Listener] = []
        self._rv = 0
        self._compacted = 0
        self._watcher_queue = watcher_queue
        # The garbage collector's graph: which uids exist, and who names each as an owner.
        self._uids: set[str] = set()  # the uid of every stored object
        self._dependents: dict[str, set[tuple[str, str, str]]] = {}  # owner uid -> (key, ns, name)
        self._owned: dict[str, set[tuple[str, str]]] = {}  # storage key -> (ns, name) of objects with owners

    @property
    def resource_version(self) -> int:
        with self.lock:
            return self._rv

    def next_rv(self) -> int:
        with self.lock:
            self._rv += 1
            return self._rv

    def get(self, storage_key: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            return self._objects.get(storage_key, {}).get((namespace, name))

    def list_objects(self, storage_key: str, namespace: str | None = None) -> tuple[list[dict[str, Any]], int]:
        """Objects sorted by namespace and name, with the resourceVersion they are consistent with."""
        with self.lock:
            bucket = self._objects.get(storage_key, {})
            keys = sorted(k for k in bucket if namespace is None or k[0] == namespace)
            return [bucket[k] for k in keys], self._rv

    def list_owned(self, storage_key: str) -> list[dict[str, Any]]:
        """The objects of `storage_key` that name an owner, sorted by namespace and name: what a
        controller of owned objects (Jobs, ReplicaSets) reads each pass, without the others."""
        with self.lock:
            bucket = self._objects.get(storage_key, {})
            return [bucket[k] for k in sorted(self._owned.get(storage_key, ()))]

    def all_objects(self) -> list[tuple[str, dict[str, Any]]]:
        with self.lock:
            return [(key, obj) for key, bucket in self._objects.items() for obj in bucket.values()]

    def put(self, storage_key: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store `obj` (ADDED or MODIFIED) under a new resourceVersion, which is written into it."""
        with self.lock:
            meta = obj["metadata"]
            ident = (meta.get("namespace", ""), meta["name"])
            bucket = self._objects.setdefault(storage_key, {})
            old = bucket.get(ident)
            rv = self.next_rv()
            meta["resourceVersion"] = str(rv)
            bucket[ident] = obj
            if old is not None:
                self._unindex(storage_key, ident, old)
            self._index(storage_key, ident, obj)
            self._record(Change("MODIFIED" if old else "ADDED", storage_key, ident[0], ident[1], rv, obj, old))
            return obj

    def remove(self, storage_key: str, namespace: str, name: str) -> dict[str, Any] | None:
        """Remove an object; the DELETED event carries its last state with the deletion's resourceVersion."""
        with self.lock:
            bucket = self._objects.get(storage_key, {})
            old = bucket.pop((namespace, name), None)
            if old is None:
                return None
            self._unindex(storage_key, (namespace, name), old)
            rv = self.next_rv()
            gone = {**old, "metadata": {**old["metadata"], "resourceVersion": str(rv)}}
            self._record(Change("DELETED", storage_key, namespace, name, rv, gone, old))
            return gone

    def uid_exists(self, uid: str) -> bool:
        with self.lock:
            return uid in self._uids

    def dependents(self, uid: str) -> list[tuple[str, dict[str, Any]]]:
        """The objects whose ownerReferences name `uid`, as (storage key, object)."""
        with self.lock:
            found = []
            for key, namespace, name in sorted(self._dependents.get(uid, ())):
                obj = self._objects.get(key, {}).get((namespace, name))
                if obj is not None:
                    found.append((key, obj))
            return found

    def _index(self, storage_key: str, ident: tuple[str, str], obj: dict[str, Any]) -> None:
        uid = obj["metadata"].get("uid")
        if uid:
            self._uids.add(uid)
        owners = _owner_uids(obj)
        for owner in owners:
            self._dependents.setdefault(owner, set()).add((storage_key, *ident))
        if owners:
            self._owned.setdefault(storage_key, set()).add(ident)

    def _unindex(self, storage_key: str, ident: tuple[str, str], obj: dict[str, Any]) -> None:
        uid = obj["metadata"].get("uid")
        if uid:
            self._uids.discard(uid)
        owners = _owner_uids(obj)
        for owner in owners:
            named = self._dependents.get(owner)
            if named is not None:
                named.discard((storage_key, *ident))
                if not named:
                    del self._dependents[owner]
        if owners:
            self._owned.get(storage_key, set()).discard(ident)

    def _record(self, change: Change) -> None:
        if len(self._history) == self._history.maxlen:
            self._compacted = self._history[0].rv
        self._history.append(change)
        for watcher in self._watchers:
            if watcher.wants(change):
                watcher.offer(change)
        for listener in self._listeners:
            listener(change)

    def history(self) -> list[Change]:
        with self.lock:
            return list(self._history)

    def compact(self) -> None:
        """Forget the event history: watches from any older resourceVersion now get 410."""
        with self.lock:
            self._history.clear()
            self._compacted = self._rv

    def add_listener(self, listener: Listener) -> None:
        """`listener` runs under the store lock for every change: it must be quick and never write."""
        with self.lock:
            self._listeners.append(listener)

    def watch(self, storage_key: str, namespace: str | None, since: int | None) -> tuple[Watcher, list[Change], int]:
        """Open a watcher atomically with its starting point.

        `since=None`: the caller sends the current state itself (returned as synthetic ADDED
        changes); otherwise every retained change newer than `since` is queued first. Returns
        the watcher, the synthetic initial changes and the resourceVersion they reflect.
        Raises Expired when `since` is older than the retained history.
        """
        with self.lock:
            watcher = Watcher(storage_key, namespace, max_queue=self._watcher_queue)
            initial: list[Change] = []
            if since is None:
                objects, _ = self.list_objects(storage_key, namespace)
                for obj in objects:
                    meta = obj["metadata"]
                    rv = int(meta.get("resourceVersion", "0"))
                    initial.append(Change("ADDED", storage_key, meta.get("namespace", ""), meta["name"], rv, obj))
            else:
                if since < self._compacted:
                    raise Expired(since, self._compacted)
                for change in self._history:
                    if change.rv > since and watcher.wants(change):
                        watcher.offer(change)
            self._watchers.add(watcher)
            return watcher, initial, self._rv

    @property
    def watcher_count(self) -> int:
        with self.lock:
            return len(self._watchers)

    def unwatch(self, watcher: Watcher) -> None:
        with self.lock:
            self._watchers.discard(watcher)
        watcher.close()

    def close_watchers(self) -> None:
        with self.lock:
            watchers = list(self._watchers)
            self._watchers.clear()
        for watcher in watchers:
            watcher.close()


def _owner_uids(obj: dict[str, Any]) -> list[str]:
    owners = obj["metadata"].get("ownerReferences") or []
    return [o["uid"] for o in owners if isinstance(o, dict) and isinstance(o.get("uid"), str)]
