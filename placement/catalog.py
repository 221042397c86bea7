"""The offerings catalog: each registered provider's `offerings()`, cached for a short while.

Read by the placement controller's workers; the only place placement calls a provider.
A failed call keeps the last good answer (I3: could-not-ask is not "sells nothing"); a
provider never answered yet is unknown (`offerings` None), never empty. When a refresh
makes an offering available that was not (sold out, missing, or the provider unknown
before), listeners hear the provider's name, so Pods waiting for it look again. Tested in
tests/placement/test_catalog.py::test_a_failed_call_keeps_the_last_good_answer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from placement.optimizer import ProviderView
from providers.base import Offering, Provider
from providers.errors import ProviderError

logger = logging.getLogger(__name__)

Listener = Callable[[str], None]
OfferingKey = tuple[str | None, int, str, str]  # folded accelerator, GPU count, tier, region


@dataclass
class _Cached:
    offerings: tuple[Offering, ...] | None = None
    fetched_at: float = -1e18
    lock: threading.Lock = field(default_factory=threading.Lock)


class Catalog:
    """Thread-safe; one `offerings()` call per provider per `ttl` seconds at most."""

    def __init__(
        self, providers: Mapping[str, Provider], *, ttl: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._providers = dict(providers)
        self._ttl = ttl
        self._clock = clock
        self._cache = {name: _Cached() for name in self._providers}
        self._lock = threading.Lock()
        self._revision = 0
        self._listeners: list[Listener] = []

    @property
    def ttl(self) -> float:
        """Seconds an answer is kept: a look this long after a `views()` asks every provider again."""
        return self._ttl

    def subscribe(self, listener: Listener) -> None:
        """Call `listener(provider)` (outside every lock) when a refresh of that provider made
        an offering available that was not."""
        with self._lock:
            self._listeners.append(listener)

    def revision(self) -> int:
        """A number that grows whenever some provider's offerings gained an available one."""
        with self._lock:
            return self._revision

    def views(self) -> dict[str, ProviderView]:
        return {name: self._view(name, provider) for name, provider in self._providers.items()}

    def _view(self, name: str, provider: Provider) -> ProviderView:
        cached = self._cache[name]
        gained = False
        with cached.lock:  # single flight per provider
            if self._clock() - cached.fetched_at >= self._ttl:
                before = cached.offerings
                try:
                    cached.offerings = tuple(provider.offerings())
                except ProviderError as exc:
                    logger.warning("offerings of %s unavailable; keeping the last answer: %s", name, exc)
                cached.fetched_at = self._clock()
                gained = became_available(before, cached.offerings)
            offerings = cached.offerings
        if gained:
            with self._lock:
                self._revision += 1
                listeners = list(self._listeners)
            for listener in listeners:
                listener(name)
        capabilities = provider.capabilities()
        return ProviderView(name, offerings, provider.expand_regions, capabilities.shapes, capabilities.egress)


def became_available(before: Sequence[Offering] | None, after: Sequence[Offering] | None) -> bool:
    """Pure: does `after` sell something `before` did not offer as available? A provider that
    answers for the first time counts (unknown is not "sells nothing", so its answer is news)."""
    if after is None:
        return False
    if before is None:
        return True
    return bool(_available(after) - _available(before))


def _available(offerings: Sequence[Offering]) -> set[OfferingKey]:
    return {
        (o.accelerator.casefold() if o.accelerator else None, o.gpu_count, o.tier.value, o.region)
        for o in offerings
        if o.available
    }
