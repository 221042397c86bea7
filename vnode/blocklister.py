"""The Blocklister protocol: how the vnode reports a refusal to placement.

The vnode's provisioning (`vnode.phases.provision`) is the one writer; placement's blocklist
implements it, and alone owns how long a block lasts. Lives here so vnode depends on
placement's contract, not on its machinery.
Tests: tests/placement/test_one_reader.py.
"""

from __future__ import annotations

from typing import Protocol

from providers.base import BlockScope


class Blocklister(Protocol):
    def record(self, provider: str, scope: BlockScope, *, pool: str | None = None, interrupted: bool = False) -> None:
        """Block `scope` of `provider` for the blocklist's TTL (the NodePool's, when `pool`,
        the refused Pod's `nebula.io/pool`, names one) plus its jitter. `interrupted`: the block
        follows an interruption of a Pod of `pool`: it lasts the pool's
        `spec.interruption.blocklistTTL` (default 10m) instead of its `failover.blocklistTTL`."""
        ...
