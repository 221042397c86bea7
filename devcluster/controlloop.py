"""A control loop for the devcluster's own controllers (scheduler, apps): one thread that
wakes on relevant store changes or every `interval`, and runs one pass.

Subclasses say which changes matter (`wants`) and what a pass does (`run_once`); a pass
that raises is logged and retried on the next wake, so one bug never stops the loop.
"""

from __future__ import annotations

import logging
import threading

from devcluster.resources import Resources
from devcluster.watch import Change

log = logging.getLogger(__name__)


class ControlLoop:
    name = "devcluster-loop"

    def __init__(self, resources: Resources, *, interval: float) -> None:
        self.resources = resources
        self.interval = interval
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def wants(self, change: Change) -> bool:
        """True when `change` should wake the loop before its interval ends."""
        raise NotImplementedError

    def run_once(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self.resources.store.add_listener(self._on_change)
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

    def _on_change(self, change: Change) -> None:
        if self.wants(change):
            self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.run_once()
            except Exception:  # the loop must survive a bug in one pass; the next pass retries
                log.exception("%s pass failed", self.name)
