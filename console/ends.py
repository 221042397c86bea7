"""How instances ended, per provider, as the console's observer remembers it: the three causes
kept apart (docs/interruptions.md). *Interrupted*: the provider took the instance back, counted by
the notice's kind and by tier. *Unreachable*: the provider does not answer; since when, and how
many Pods wait on it (none of them failed for it). *Failed*: the workload itself failed, counted
by the Pod's reason.

The memory is bounded: at most MAX_PROVIDERS providers (the least recently told one is
forgotten first), at most MAX_NAMES kinds, tiers or reasons per provider and family (any further
one is counted as OTHER), names cut to NAME_LENGTH. The observer counts its metrics with the
same folded names, so the console's line and the series agree. Counts start when the process
starts (Prometheus keeps the long view). Holds names and counts only, never a message, an env
value or a credential (I4). Thread-safe; never raises on its inputs.

The line texts (`counted`, `interrupted_text`, `failed_text`) are what the dashboard prints.
Tests: tests/console/test_console_ends.py.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

MAX_PROVIDERS = 64
MAX_NAMES = 12
NAME_LENGTH = 63
OTHER = "Other"
UNKNOWN_TIER = "unknown"  # the tier of an instance whose tier nobody reported
FAILED = "Failed"  # a failed Pod with no reason of its own


@dataclass(frozen=True)
class Ends:
    """One provider's ends so far: copies, safe to read without the lock."""

    provider: str
    interruptions: Mapping[str, int] = field(default_factory=dict)  # by the notice's kind
    interruption_tiers: Mapping[str, int] = field(default_factory=dict)  # by tier
    failures: Mapping[str, int] = field(default_factory=dict)  # by the Pod's reason
    unreachable_since: datetime | None = None  # None: the provider answers
    unreachable_pods: int = 0  # Pods waiting on it while it does not answer

    @property
    def interrupted(self) -> int:
        return sum(self.interruptions.values())

    @property
    def failed(self) -> int:
        return sum(self.failures.values())


@dataclass
class _Memory:
    interruptions: dict[str, int] = field(default_factory=dict)
    interruption_tiers: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    unreachable_since: datetime | None = None
    unreachable_pods: int = 0


class EndsMemory:
    """Per provider: interruptions by kind and tier, failures by reason, the unreachable state."""

    def __init__(self, *, max_providers: int = MAX_PROVIDERS, max_names: int = MAX_NAMES) -> None:
        self._lock = threading.Lock()
        self._max_providers = max_providers
        self._max_names = max_names
        self._providers: OrderedDict[str, _Memory] = OrderedDict()  # least recently told first

    def interrupted(self, provider: str, tier: str, kind: str) -> tuple[str, str]:
        """Count one interruption; the (tier, kind) it was counted under (bounded names)."""
        with self._lock:
            memory = self._told(provider)
            kind = _count(memory.interruptions, kind or OTHER, self._max_names)
            tier = _count(memory.interruption_tiers, tier or UNKNOWN_TIER, self._max_names)
            return tier, kind

    def failed(self, provider: str, reason: str) -> str:
        """Count one failed workload; the reason it was counted under (bounded)."""
        with self._lock:
            return _count(self._told(provider).failures, reason or FAILED, self._max_names)

    def reachability(self, provider: str, reachable: bool, pods: int, at: datetime) -> None:
        """Unreachable: remember since when (the first time told) and the Pods waiting now.
        Reachable again: forget both."""
        with self._lock:
            memory = self._told(provider)
            if reachable:
                memory.unreachable_since, memory.unreachable_pods = None, 0
            else:
                memory.unreachable_since = memory.unreachable_since or at
                memory.unreachable_pods = max(0, int(pods))

    def of(self, provider: str) -> Ends:
        """What is remembered of `provider` (nothing yet: zero counts, reachable)."""
        with self._lock:
            memory = self._providers.get(_name(provider))
            return _copy(_name(provider), memory) if memory is not None else Ends(_name(provider))

    def all(self) -> list[Ends]:
        """Every provider remembered, by name."""
        with self._lock:
            return [_copy(name, memory) for name, memory in sorted(self._providers.items())]

    def _told(self, provider: str) -> _Memory:
        name = _name(provider)
        memory = self._providers.pop(name, None) or _Memory()
        self._providers[name] = memory
        while len(self._providers) > self._max_providers:
            self._providers.popitem(last=False)
        return memory


def _name(text: str) -> str:
    return str(text)[:NAME_LENGTH]


def _count(counts: dict[str, int], name: str, limit: int) -> str:
    """Add one to `name` in `counts`, or to OTHER once `limit` names are held; the name counted."""
    name = _name(name)
    if name not in counts and len(counts) >= limit - (0 if OTHER in counts else 1):
        name = OTHER  # the last place is kept for OTHER
    counts[name] = counts.get(name, 0) + 1
    return name


def _copy(provider: str, memory: _Memory) -> Ends:
    return Ends(
        provider,
        dict(memory.interruptions),
        dict(memory.interruption_tiers),
        dict(memory.failures),
        memory.unreachable_since,
        memory.unreachable_pods,
    )


# -- the dashboard's words -----------------------------------------------------------------------
def counted(counts: Mapping[str, int]) -> str:
    """`SpotInterruption 2, Reclaimed 1`: the most first, then by name; OTHER last."""
    ordered = sorted(counts.items(), key=lambda item: (item[0] == OTHER, -item[1], item[0]))
    return ", ".join(f"{name} {n}" for name, n in ordered if n)


def interrupted_text(kinds: Mapping[str, int], tiers: Mapping[str, int]) -> str:
    """`3 (SpotInterruption 2, Reclaimed 1) on Spot`, `3 (...) on Spot 2, OnDemand 1`, or `none`."""
    total = sum(kinds.values())
    if not total:
        return "none"
    live = {tier: n for tier, n in tiers.items() if n}
    on = next(iter(live)) if len(live) == 1 else counted(live)
    return f"{total} ({counted(kinds)})" + (f" on {on}" if on and on != UNKNOWN_TIER else "")


def failed_text(reasons: Mapping[str, int]) -> str:
    """`2 (Error 1, OOMKilled 1)`, or `none`."""
    total = sum(reasons.values())
    return f"{total} ({counted(reasons)})" if total else "none"
