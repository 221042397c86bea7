"""The offerings catalog: one `offerings()` call per provider per TTL, the last good answer kept
when a call fails (I3: could-not-ask is not "sells nothing"), unknown (None) before any answer,
never empty; and a refresh that makes an offering available tells the listeners."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from placement.catalog import Catalog, became_available
from providers import errors
from providers.base import Capabilities, Offering, Tier
from tests.support.clock import ManualClock

H100 = Offering("h100", 8, Tier.SPOT, "us-east-1", 10.0)
SOLD_OUT = replace(H100, available=False)


class CountingProvider:
    """Just the three methods the catalog calls; `fail` makes `offerings()` raise Unavailable."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail = False
        self.answer = [H100]

    def offerings(self) -> list[Offering]:
        self.calls += 1
        if self.fail:
            raise errors.Unavailable("the API is down")
        return list(self.answer)

    def expand_regions(self, declared: Sequence[str]) -> list[str]:
        return list(declared)

    def capabilities(self) -> Capabilities:
        return Capabilities()


def test_offerings_are_asked_once_per_ttl() -> None:
    provider, clock = CountingProvider(), ManualClock(100.0)
    catalog = Catalog({"gpu-a": provider}, ttl=10.0, clock=clock)  # type: ignore[dict-item]
    assert catalog.views()["gpu-a"].offerings == (H100,)
    clock.now += 9
    catalog.views()
    assert provider.calls == 1
    clock.now += 1
    catalog.views()
    assert provider.calls == 2


def test_a_failed_call_keeps_the_last_good_answer() -> None:
    provider, clock = CountingProvider(), ManualClock(100.0)
    catalog = Catalog({"gpu-a": provider}, ttl=10.0, clock=clock)  # type: ignore[dict-item]
    catalog.views()
    provider.fail = True
    clock.now += 10
    assert catalog.views()["gpu-a"].offerings == (H100,)
    assert provider.calls == 2


def test_a_provider_never_answered_is_unknown_not_empty() -> None:
    provider = CountingProvider()
    provider.fail = True
    catalog = Catalog({"gpu-a": provider}, clock=ManualClock(100.0))  # type: ignore[dict-item]
    assert catalog.views()["gpu-a"].offerings is None


@pytest.mark.parametrize(
    ("before", "after", "news"),
    [
        (None, (H100,), True),  # the first answer: unknown is not "sells nothing"
        (None, (), True),
        ((H100,), None, False),
        ((H100,), (H100,), False),
        ((SOLD_OUT,), (H100,), True),
        ((H100,), (SOLD_OUT,), False),  # selling less wakes no one
        ((), (H100,), True),  # a shape not offered before
        ((H100,), (H100, replace(H100, region="us-west-2")), True),
        ((H100,), (replace(H100, hourly_price=12.0),), False),  # a price change serves no new Pod
        ((H100,), (replace(H100, accelerator="H100"),), False),  # the accelerator is compared folded
    ],
)
def test_became_available_means_an_available_row_that_was_not(
    before: tuple[Offering, ...] | None, after: tuple[Offering, ...] | None, news: bool
) -> None:
    assert became_available(before, after) is news


def test_a_refresh_that_gains_an_offering_tells_the_listeners_and_moves_the_revision() -> None:
    provider, clock = CountingProvider(), ManualClock(100.0)
    catalog = Catalog({"gpu-a": provider}, ttl=10.0, clock=clock)  # type: ignore[dict-item]
    heard: list[str] = []
    catalog.subscribe(heard.append)
    provider.answer = [SOLD_OUT]
    catalog.views()
    assert heard == ["gpu-a"] and catalog.revision() == 1  # the first answer
    clock.now += 10
    provider.fail = True
    catalog.views()  # the last answer is kept: nothing new
    clock.now += 10
    provider.fail = False
    catalog.views()  # still sold out
    assert heard == ["gpu-a"] and catalog.revision() == 1
    provider.answer = [H100]
    catalog.views()  # within the TTL: not asked
    clock.now += 10
    catalog.views()
    assert heard == ["gpu-a", "gpu-a"] and catalog.revision() == 2
