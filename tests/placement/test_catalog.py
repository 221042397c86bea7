"""The offerings catalog: one `offerings()` call per provider per TTL, the last good answer kept
when a call fails (I3: could-not-ask is not "sells nothing"), and unknown (None) before any
answer, never empty."""

from __future__ import annotations

from collections.abc import Sequence

from placement.catalog import Catalog
from providers import errors
from providers.base import Offering, Tier

H100 = Offering("h100", 8, Tier.SPOT, "us-east-1", 10.0)


class CountingProvider:
    """Just the two methods the catalog calls; `fail` makes `offerings()` raise Unavailable."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail = False

    def offerings(self) -> list[Offering]:
        self.calls += 1
        if self.fail:
            raise errors.Unavailable("the API is down")
        return [H100]

    def expand_regions(self, declared: Sequence[str]) -> list[str]:
        return list(declared)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_offerings_are_asked_once_per_ttl() -> None:
    provider, clock = CountingProvider(), Clock()
    catalog = Catalog({"gpu-a": provider}, ttl=10.0, clock=clock)  # type: ignore[dict-item]
    assert catalog.views()["gpu-a"].offerings == (H100,)
    clock.now += 9
    catalog.views()
    assert provider.calls == 1
    clock.now += 1
    catalog.views()
    assert provider.calls == 2


def test_a_failed_call_keeps_the_last_good_answer() -> None:
    provider, clock = CountingProvider(), Clock()
    catalog = Catalog({"gpu-a": provider}, ttl=10.0, clock=clock)  # type: ignore[dict-item]
    catalog.views()
    provider.fail = True
    clock.now += 10
    assert catalog.views()["gpu-a"].offerings == (H100,)
    assert provider.calls == 2


def test_a_provider_never_answered_is_unknown_not_empty() -> None:
    provider = CountingProvider()
    provider.fail = True
    catalog = Catalog({"gpu-a": provider}, clock=Clock())  # type: ignore[dict-item]
    assert catalog.views()["gpu-a"].offerings is None
