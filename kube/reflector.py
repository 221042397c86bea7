"""List-and-watch of one kind of object into an in-memory cache, re-listing after 410.

Used by the pod controller (Pods on its node; Secrets and ConfigMaps that Pods wait for).
Calls `on_change(key, obj_or_None)` for every add, update and delete, on its own thread;
never writes to the API. Drops `metadata.managedFields` on intake (nothing in Nebula reads them).
Tests: tests/kube/test_reflector.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kube.client import GoneError, Kube, KubeError

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]
OnChange = Callable[[str, JsonDict | None], None]


def intake(obj: JsonDict) -> JsonDict:
    """`obj` as the cache keeps it: without `metadata.managedFields` (server-side apply's field
    owners, often larger than the rest of a Pod; Nebula never reads them, and the API server
    keeps them when an update omits them). Changes `obj` in place: it is fresh from the wire."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def object_key(obj: JsonDict) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


class Reflector:
    """Keeps `cache` equal to the server's set of matching objects."""

    def __init__(
        self,
        kube: Kube,
        path: str,
        *,
        on_change: OnChange,
        field_selector: str = "",
        label_selector: str = "",
        watch_timeout: int = 300,
        max_backoff: float = 10.0,
    ) -> None:
        self._kube = kube
        self._path = path
        self._on_change = on_change
        self._selectors = {"fieldSelector": field_selector, "labelSelector": label_selector}
        self._watch_timeout = watch_timeout
        self._max_backoff = max_backoff
        self.cache: dict[str, JsonDict] = {}
        self.lock = threading.Lock()
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"reflector {self._path}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def snapshot(self) -> list[JsonDict]:
        with self.lock:
            return list(self.cache.values())

    def _run(self) -> None:
        backoff = 0.2
        while not self._stop.is_set():
            try:
                version = self._relist()
                backoff = 0.2
                while not self._stop.is_set():
                    version = self._watch(version)
            except GoneError:
                logger.info("watch of %s expired; re-listing", self._path)
            except KubeError as exc:
                logger.warning("list/watch of %s failed: %s; retrying in %.1fs", self._path, exc, backoff)
                self._stop.wait(backoff)
                backoff = min(self._max_backoff, backoff * 2)

    def _relist(self) -> str:
        items, version = self._kube.list(self._path, **self._selectors)
        fresh = {object_key(obj): intake(obj) for obj in items}
        with self.lock:
            gone = [key for key in self.cache if key not in fresh]
            changed = [key for key, obj in fresh.items() if self.cache.get(key) != obj]
            self.cache = fresh
        for key in gone:
            self._on_change(key, None)
        for key in changed:
            self._on_change(key, fresh[key])
        self.synced.set()
        return version

    def _watch(self, version: str) -> str:
        started = time.monotonic()
        for kind, obj in self._kube.watch(
            self._path, resource_version=version, timeout_seconds=self._watch_timeout, **self._selectors
        ):
            if self._stop.is_set():
                break
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if kind == "BOOKMARK":
                continue
            intake(obj)
            key = object_key(obj)
            with self.lock:
                if kind == "DELETED":
                    self.cache.pop(key, None)
                else:
                    self.cache[key] = obj
            self._on_change(key, None if kind == "DELETED" else obj)
        if time.monotonic() - started < 0.05:
            self._stop.wait(0.2)  # a server that ends watches at once must not make us spin
        return version
