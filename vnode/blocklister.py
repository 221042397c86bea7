"""The Blocklister protocol: how the vnode reports a refusal to placement.

The vnode Handler is the one writer; placement's blocklist implements it. Lives here so
vnode depends on placement's contract, not on its machinery.
"""

from __future__ import annotations

from typing import Protocol

from providers.base import BlockScope


class Blocklister(Protocol):
    def record(self, provider: str, scope: BlockScope, ttl: float, *, pool: str | None = None) -> None:
        """Block `scope` of `provider` for about `ttl` seconds (jitter is the blocklist's).
        `pool`: the refused Pod's `nebula.io/pool`; when given, its NodePool's TTL wins."""
        ...
