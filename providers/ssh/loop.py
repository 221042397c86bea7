"""The process-wide asyncio event loop thread that every SSH connection of this process runs on.

Called by `providers.ssh.process`, `providers.ssh.logs` and `providers.ssh.forward` (whose
detached port-forwards are pumped here, never on a thread of their own), whose callers are
synchronous threads. `LoopThread` itself lives in `providers.eventloop`; this module owns the
one shared instance, stopped at interpreter exit.
Tests: tests/providers/ssh/test_ssh.py, tests/providers/ssh/test_ssh_forward.py.
"""

from __future__ import annotations

import atexit

from providers.eventloop import LoopThread

__all__ = ["LoopThread", "shared_loop"]

_shared = LoopThread("nebula-ssh")
atexit.register(_shared.stop)


def shared_loop() -> LoopThread:
    """The process-wide SSH loop (connections are cheap to multiplex on one thread)."""
    return _shared
