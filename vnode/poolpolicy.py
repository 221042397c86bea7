"""The PoolPolicies protocol: what the vnode reads of a Pod's NodePool.

A Pod placed from a pool carries the pool's name in its `nebula.io/pool` label; the vnode
asks this protocol for that pool's egress policy (it goes to the provider in
`ProvisionRequest.egress`) and its provisioning timeout (an instance still PROVISIONING after
it is given up with reason `QueuedTooLong`, so placement's replacement goes elsewhere).
Placement's pool cache implements it; it lives here so vnode depends on placement's contract,
not on its machinery (as `vnode.blocklister` does).
Tests: tests/placement/test_pool_policy.py.
"""

from __future__ import annotations

from typing import Protocol

from providers.egress import Egress


class PoolPolicies(Protocol):
    def egress_of(self, pool: str | None) -> Egress:
        """The egress policy of `pool` (Open for None, or for a pool not known)."""
        ...

    def provisioning_timeout_of(self, pool: str | None) -> float | None:
        """Seconds an instance of a Pod of `pool` may stay PROVISIONING; None: no limit (the
        Pod is in no pool, so nothing could take it elsewhere)."""
        ...

    def replaces_on_rebalance(self, pool: str | None) -> bool:
        """The pool's `spec.interruption.proactive` (False for None, or for a pool not known)."""
        ...
