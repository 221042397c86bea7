"""One `modal.Sandbox.create` on its own daemon thread, so `provision` need not wait for it.

Called by `ModalProvider.provision`. SDK 1.6.4's (V1) `Sandbox.create` sends SandboxCreate
and then waits until Modal schedules the sandbox (up to its `_SANDBOX_SCHEDULING_TIMEOUT`,
21 minutes); `provision` waits only `create_wait` for it and then reports the queued
sandbox it finds by the claim's tags. The thread keeps waiting on Modal's schedule; once
`provision` has returned (the create is abandoned), its outcome is only logged: a scheduled
sandbox at debug, an exception by its type only (never its text, which could quote a
request). No exception leaves the thread.
Tests: tests/providers/modal/test_modal_provider_queue.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)


class BackgroundCreate:
    """`call` (the SDK's create) on a daemon thread; `wait` for it, `abandon` it."""

    def __init__(self, call: Callable[[], Any], claim: str) -> None:
        self._call = call
        self._claim = claim
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._abandoned = False
        self.sandbox: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"modal-create-{claim[:40]}")

    def start(self) -> BackgroundCreate:
        self._thread.start()
        return self

    def wait(self, timeout: float) -> bool:
        """True once the create returned or raised (then `sandbox` or `error` says which)."""
        return self._done.wait(timeout)

    def abandon(self) -> bool:
        """Leave the create to its thread; False if it had already ended (read its outcome)."""
        with self._lock:
            if self._done.is_set():
                return False
            self._abandoned = True
            return True

    def _run(self) -> None:
        sandbox: Any = None
        error: BaseException | None = None
        try:
            sandbox = self._call()
        except BaseException as exc:  # handed to provision, or logged by type: never raised here
            error = exc
        with self._lock:
            self.sandbox, self.error = sandbox, error
            self._done.set()
            abandoned = self._abandoned
        if not abandoned:
            return
        if error is None:
            logger.debug("modal scheduled the queued sandbox %s (claim %s)", getattr(sandbox, "object_id", "?"),
                         self._claim)  # fmt: skip
        else:
            logger.info("the create of the queued modal sandbox for claim %s ended with %s", self._claim,
                        type(error).__name__)  # fmt: skip
