"""A NodePool's `spec.interruption` and `spec.failover.waitForCapacity`, parsed into values.

Pure; `placement.pools.parse_pool` calls it for every NodePool. Messages name the field and
the fix, as the rest of the NodePool's do.
Tests: tests/placement/test_pool_interruption.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from placement.durations import PoolError, bounded_duration, fields_of

DEFAULT_INTERRUPTED_TTL = 600.0  # spec.interruption.blocklistTTL: 10m
MIN_INTERRUPTED_TTL, MAX_INTERRUPTED_TTL = 1.0, 86_400.0  # 1s .. 24h
DEFAULT_WINDOW = 3600.0  # spec.interruption.window: 1h
MIN_WINDOW, MAX_WINDOW = 60.0, 7 * 86_400.0  # 1m .. 168h (7 days)
MIN_WAIT, MAX_WAIT = 60.0, 7 * 86_400.0  # spec.failover.waitForCapacity: 1m .. 168h (7 days)
INTERRUPTION_FIELDS = ("blocklistTTL", "fallbackToOnDemandAfter", "window", "proactive")
FAILOVER_FIELDS = ("blocklistTTL", "waitForCapacity")  # spec.failover's, checked by placement.pools


@dataclass(frozen=True)
class Interruption:
    """`spec.interruption`. `fallback_after`: interruptions of one workload within `window`
    seconds that move its next Pod to OnDemand (None: never). `blocklist_ttl`: seconds an
    interrupted candidate is skipped. `proactive`: a rebalance recommendation stops the Pod."""

    blocklist_ttl: float = DEFAULT_INTERRUPTED_TTL
    fallback_after: int | None = None
    window: float = DEFAULT_WINDOW
    proactive: bool = False


def interruption(raw: Any) -> Interruption:
    """`spec.interruption` (absent: the defaults); PoolError names the field and the fix."""
    if raw is None:
        return Interruption()
    raw = fields_of(raw, "spec.interruption", INTERRUPTION_FIELDS, "{fallbackToOnDemandAfter: 2, window: 1h}")
    after = raw.get("fallbackToOnDemandAfter")
    if after is not None and (isinstance(after, bool) or not isinstance(after, int) or after < 1):
        raise PoolError(
            f"spec.interruption.fallbackToOnDemandAfter: {after!r} is not a whole number >= 1, e.g. 2;"
            " leave it out to never fall back"
        )
    proactive = raw.get("proactive", False)
    if not isinstance(proactive, bool):
        raise PoolError(f"spec.interruption.proactive: {proactive!r} is not true or false")
    ttl = raw.get("blocklistTTL")
    window = raw.get("window")
    return Interruption(
        blocklist_ttl=DEFAULT_INTERRUPTED_TTL
        if ttl is None
        else bounded_duration(ttl, "spec.interruption.blocklistTTL", MIN_INTERRUPTED_TTL, MAX_INTERRUPTED_TTL),
        fallback_after=after,
        window=DEFAULT_WINDOW
        if window is None
        else bounded_duration(window, "spec.interruption.window", MIN_WINDOW, MAX_WINDOW),
        proactive=proactive,
    )


def wait_for_capacity(raw: Any) -> float | None:
    """`spec.failover.waitForCapacity` (the field's value) in seconds; None when absent (a Pod
    waits as long as it takes). `spec.failover` itself is read once, by `placement.pools`."""
    return None if raw is None else bounded_duration(raw, "spec.failover.waitForCapacity", MIN_WAIT, MAX_WAIT)
