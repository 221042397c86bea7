"""The offerings catalog: each registered provider's `offerings()`, cached for a short while.

Read by the placement controller's workers; the only place placement calls a provider.
A failed call keeps the last good answer (I3: could-not-ask is not "sells nothing"); a
provider never answered yet is unknown (`offerings` None), never empty. Tested in
tests/placement/test_catalog.py::test_a_failed_call_keeps_the_last_good_answer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from placement.optimizer import ProviderView
from providers.base import Offering, Provider
from providers.errors import ProviderError

logger = logging.getLogger(__name__)


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

    def views(self) -> dict[str, ProviderView]:
        return {name: self._view(name, provider) for name, provider in self._providers.items()}

    def _view(self, name: str, provider: Provider) -> ProviderView:
        cached = self._cache[name]
        with cached.lock:  # single flight per provider
            if self._clock() - cached.fetched_at >= self._ttl:
                try:
                    cached.offerings = tuple(provider.offerings())
                except ProviderError as exc:
                    logger.warning("offerings of %s unavailable; keeping the last answer: %s", name, exc)
                cached.fetched_at = self._clock()
            offerings = cached.offerings
        return ProviderView(name, offerings, provider.expand_regions)
