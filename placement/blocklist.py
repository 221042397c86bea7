"""The blocklist: which candidates a provider refused recently, the working copy in memory (I6).

Written by the vnode Handler (through the `Blocklister` protocol), by operators (`clear`) and by
the cluster's copy (`apply`, `drop`: `placement.blockstore`, which its `BlockSink` feeds); read by
placement, the console and the REST API. Keyed by block scope, whose hash is the entry's id on
every replica; the expiry only moves later. Alone decides a TTL. Never does I/O. Tested in
tests/placement/test_blocklist.py and tests/placement/test_blockstore.py.
"""

from __future__ import annotations

import hashlib
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Protocol

from placement.interruptspec import DEFAULT_INTERRUPTED_TTL
from providers.base import BlockBreadth, BlockScope, Tier

logger = logging.getLogger(__name__)

MAX_JITTER = 30.0  # seconds: the jitter is uniform in [0, min(MAX_JITTER, JITTER_FRACTION * ttl))
JITTER_FRACTION = 0.1
MAX_ENTRIES = 10_000  # I7: a refusal storm cannot grow memory without bound
DEFAULT_TTL = 300.0  # seconds (5m): a refusal of a Pod whose pool names no TTL, or of a Pod in no pool

PoolTtl = Callable[[str], float | None]
Listener = Callable[[], None]
ID_DIGITS = 12  # an entry id is `b` and 12 digits (the console's and the API's id pattern)
ScopeKey = tuple[str, BlockBreadth, Tier | None, str | None, str | None]


@dataclass(frozen=True)
class BlockEntry:
    """One blocked scope. Times are aware UTC datetimes; `seconds_left` is as of the read."""

    id: str
    provider: str
    scope: BlockScope
    reason: str
    pool: str | None
    recorded_at: datetime
    expires_at: datetime
    seconds_left: float


def scope_covers(
    scope: BlockScope, provider: str, *, accelerator: str | None, tier: Tier | None, region: str | None
) -> bool:
    """Pure: does `scope` block the candidate? A field the scope leaves None matches anything,
    except the accelerator of an offering-wide scope, where None means CPU-only."""
    if scope.provider != provider:
        return False
    if scope.breadth is BlockBreadth.PROVIDER:
        return True
    if scope.tier is not None and scope.tier != tier:
        return False
    if scope.breadth is BlockBreadth.TIER:
        return True
    if _fold(scope.accelerator) != _fold(accelerator):
        return False
    return scope.region is None or scope.region == region


def _fold(text: str | None) -> str | None:
    return None if text is None else text.casefold()


def _scope_key(provider: str, scope: BlockScope) -> ScopeKey:
    if scope.breadth is BlockBreadth.PROVIDER:
        return (provider, scope.breadth, None, None, None)
    if scope.breadth is BlockBreadth.TIER:
        return (provider, scope.breadth, scope.tier, None, None)
    return (provider, scope.breadth, scope.tier, _fold(scope.accelerator), scope.region)


def entry_id(provider: str, scope: BlockScope) -> str:
    """Pure: the id of the entry blocking `scope` of `provider`, the same on every replica and the
    name of its object in the cluster (a hash of the scope key: `b` and 12 digits)."""
    key = _scope_key(provider, scope)
    text = "\x1f".join("" if part is None else str(getattr(part, "value", part)) for part in key)
    digest = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    return f"b{digest % 10**ID_DIGITS:0{ID_DIGITS}d}"


class BlockSink(Protocol):
    """Where the blocklist reports its local changes (the cluster's copy, `placement.blockstore`).
    Called under the blocklist's lock, right after memory changed, so a record and a clear reach
    it in the order memory saw them (a later clear always wins); must not block and must not call
    back into the Blocklist."""

    def recorded(self, entry: BlockEntry) -> None: ...

    def cleared(self, entry_id: str) -> None: ...


@dataclass
class _Slot:
    id: str
    provider: str
    scope: BlockScope
    pool: str | None
    recorded_at: float
    expires_at: float


class Blocklist:
    """Thread-safe. `clock` gives epoch seconds and `uniform` a number in [0, 1): both
    injected so tests control time and jitter. The one place a TTL is decided: the pool's
    (`pool_ttl` / `use_pool_ttls`), else `default_ttl`."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        uniform: Callable[[], float] = random.random,
        pool_ttl: PoolTtl | None = None,
        default_ttl: float = DEFAULT_TTL,
    ) -> None:
        self._clock = clock
        self._default_ttl = default_ttl
        self._uniform = uniform
        self._pool_ttl = pool_ttl
        self._interrupted_ttl: PoolTtl | None = None
        self._slots: dict[ScopeKey, _Slot] = {}
        self._lock = threading.Lock()
        self._revision = 0
        self._listeners: list[Listener] = []
        self._sink: BlockSink | None = None

    # -- wiring ----------------------------------------------------------------------------
    def use_pool_ttls(self, pool_ttl: PoolTtl, interrupted: PoolTtl | None = None) -> None:
        """Resolve a pool's `failover.blocklistTTL` by name (the pool cache offers it), and its
        `interruption.blocklistTTL` for a block that follows an interruption (`interrupted`)."""
        self._pool_ttl = pool_ttl
        if interrupted is not None:
            self._interrupted_ttl = interrupted

    def attach(self, sink: BlockSink) -> None:
        """Report every local record and clear to `sink` from now on (the cluster's copy)."""
        self._sink = sink

    def subscribe(self, listener: Listener) -> None:
        """Call `listener` (outside the lock) whenever an entry is cleared or dropped (an expiry
        only ever moves later otherwise), so Pods waiting for an expiry are looked at again at once."""
        with self._lock:
            self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        """Stop calling `listener` (a placement that stops: each leadership subscribes its own)."""
        with self._lock:
            self._listeners = [known for known in self._listeners if known != listener]

    def _ttl_for(self, pool: str | None, interrupted: bool = False) -> float:
        """The TTL a refusal of a Pod in `pool` gets: the pool's, else the default. After an
        interruption: the pool's `interruption.blocklistTTL`, else DEFAULT_INTERRUPTED_TTL (10m)."""
        resolve = self._interrupted_ttl if interrupted else self._pool_ttl
        if pool and resolve is not None:
            ttl = resolve(pool)
            if ttl is not None and ttl > 0:
                return ttl
        return DEFAULT_INTERRUPTED_TTL if interrupted else self._default_ttl

    # -- the write side ----------------------------------------------------------------------
    def record(self, provider: str, scope: BlockScope, *, pool: str | None = None, interrupted: bool = False) -> None:
        """Block `scope` of `provider` for the TTL of `pool` (the refused Pod's `nebula.io/pool`;
        its NodePool's `failover.blocklistTTL`), else the default TTL, plus bounded jitter.
        `interrupted`: the block follows an interruption of a Pod of `pool`, so it lasts the
        pool's `interruption.blocklistTTL` (10m when the pool names none or is unknown). An
        identical live scope is extended, never shortened, and keeps the pool it first named.
        An empty provider, or a scope of another provider, records nothing."""
        if not provider or scope.provider != provider:
            return
        seconds = self._ttl_for(pool, interrupted)
        now = self._clock()
        expires = now + seconds + self._jitter(seconds)
        key = _scope_key(provider, scope)
        with self._lock:
            self._purge_locked(now)
            slot = self._slots.get(key)
            if slot is not None:
                slot.expires_at = max(slot.expires_at, expires)
                slot.scope = scope
                slot.pool = slot.pool or pool
            elif len(self._slots) < MAX_ENTRIES:
                slot = self._slots[key] = _Slot(entry_id(provider, scope), provider, scope, pool, now, expires)
            self._revision += 1
            if slot is not None and self._sink is not None:
                self._sink.recorded(_entry(slot, now))
        logger.info("blocked %s for %.0fs: %s", describe_scope(provider, scope), seconds, scope.reason)

    def clear(self, entry_id: str) -> bool:
        """Remove one entry (an operator's action). False if there is no such live entry."""
        with self._lock:
            self._purge_locked(self._clock())
            key = self._key_of_locked(entry_id)
            if key is None:
                return False
            del self._slots[key]
            self._revision += 1
            if self._sink is not None:
                self._sink.cleared(entry_id)
        self._notify()
        return True

    # -- the cluster's copy (placement.blockstore) -----------------------------------------
    def apply(self, entry: BlockEntry) -> bool:
        """An entry as the cluster holds it (any replica's record): upserted under its scope,
        the expiry only moving later, the pool first named kept. Nothing for an entry already
        expired, one whose id is not its scope's, or past MAX_ENTRIES (I7). Not reported to the
        sink. True when memory holds it."""
        if not entry.provider or entry.scope.provider != entry.provider:
            return False
        if entry.id != entry_id(entry.provider, entry.scope):
            return False
        now = self._clock()
        expires = entry.expires_at.timestamp()
        if expires <= now:
            return False
        key = _scope_key(entry.provider, entry.scope)
        with self._lock:
            self._purge_locked(now)
            slot = self._slots.get(key)
            if slot is None:
                if len(self._slots) >= MAX_ENTRIES:
                    return False
                recorded = entry.recorded_at.timestamp()
                self._slots[key] = _Slot(entry.id, entry.provider, entry.scope, entry.pool, recorded, expires)
                self._revision += 1
            elif expires > slot.expires_at:
                slot.expires_at = expires
                slot.scope = entry.scope
                slot.pool = slot.pool or entry.pool
                self._revision += 1
            return True

    def drop(self, entry_id: str, *, then: Callable[[str], None] | None = None) -> bool:
        """The cluster no longer holds the entry (cleared on another replica, deleted by hand,
        or expired): removed here too, without telling the sink, and the subscribers told, as
        for a clear. `then(entry_id)` runs under the lock right after (held or not), so no record
        lands between the two (the blockstore withdraws the writes of older records). False if
        memory held no such entry."""
        with self._lock:
            key = self._key_of_locked(entry_id)
            if key is not None:
                del self._slots[key]
                self._revision += 1
            if then is not None:
                then(entry_id)
            if key is None:
                return False
        self._notify()
        return True

    # -- the read side ----------------------------------------------------------------------
    def entries(self, now: float | None = None) -> list[BlockEntry]:
        """Live entries, soonest expiry first."""
        now = self._clock() if now is None else now
        with self._lock:
            self._purge_locked(now)
            slots = sorted(self._slots.values(), key=lambda s: (s.expires_at, s.id))
            return [_entry(slot, now) for slot in slots]

    def get(self, entry_id: str) -> BlockEntry | None:
        now = self._clock()
        with self._lock:
            self._purge_locked(now)
            key = self._key_of_locked(entry_id)
            return None if key is None else _entry(self._slots[key], now)

    def blocked(
        self, provider: str, *, accelerator: str | None, tier: Tier | None, region: str | None
    ) -> BlockEntry | None:
        """The live entry covering the candidate that lapses LAST (the candidate is free
        once it has lapsed), or None."""
        now = self._clock()
        with self._lock:
            self._purge_locked(now)
            covering = [
                s
                for s in self._slots.values()
                if scope_covers(s.scope, provider, accelerator=accelerator, tier=tier, region=region)
            ]
            if not covering:
                return None
            return _entry(max(covering, key=lambda s: s.expires_at), now)

    def revision(self) -> int:
        """A number that changes whenever the set of live entries changes (expiries included)."""
        with self._lock:
            self._purge_locked(self._clock())
            return self._revision

    def now(self) -> float:
        """The blocklist's clock (epoch seconds), so callers compare expiries on one clock."""
        return self._clock()

    # -- internals ---------------------------------------------------------------------------
    def _jitter(self, ttl: float) -> float:
        return self._uniform() * min(MAX_JITTER, JITTER_FRACTION * ttl)

    def _key_of_locked(self, entry_id: str) -> ScopeKey | None:
        """The scope key of the entry `entry_id`, if memory holds it."""
        return next((key for key, slot in self._slots.items() if slot.id == entry_id), None)

    def _purge_locked(self, now: float) -> None:
        expired = [k for k, s in self._slots.items() if s.expires_at <= now]
        for key in expired:
            del self._slots[key]
        if expired:
            self._revision += 1

    def _notify(self) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener()


def _entry(slot: _Slot, now: float) -> BlockEntry:
    return BlockEntry(
        id=slot.id,
        provider=slot.provider,
        scope=replace(slot.scope),
        reason=slot.scope.reason,
        pool=slot.pool,
        recorded_at=datetime.fromtimestamp(slot.recorded_at, UTC),
        expires_at=datetime.fromtimestamp(slot.expires_at, UTC),
        seconds_left=max(0.0, slot.expires_at - now),
    )


def describe_scope(provider: str, scope: BlockScope) -> str:
    """A person's description of a scope, e.g. `gpu-a h100 Spot us-east-1`."""
    if scope.breadth is BlockBreadth.PROVIDER:
        return f"provider {provider}"
    tier = scope.tier.value if scope.tier else "any tier"
    if scope.breadth is BlockBreadth.TIER:
        return f"{provider} {tier}"
    return f"{provider} {scope.accelerator or 'cpu'} {tier} {scope.region or 'any region'}"
