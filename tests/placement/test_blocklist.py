"""The blocklist: scopes, TTL plus bounded jitter, coalescing, expiry order, the read side."""

from __future__ import annotations

import threading

import pytest

from placement.blocklist import Blocklist, scope_covers
from providers.base import BlockBreadth, BlockScope, Tier
from tests.support.clock import ManualClock


def offering(
    provider: str = "gpu-a", tier: Tier = Tier.SPOT, accelerator: str | None = "h100", region: str | None = "us-east-1"
) -> BlockScope:
    return BlockScope(
        provider, BlockBreadth.OFFERING, tier=tier, accelerator=accelerator, region=region, reason="NoCapacity: full"
    )


@pytest.mark.parametrize(
    ("scope", "candidate", "covered"),
    [
        (BlockScope("a", BlockBreadth.PROVIDER), ("a", None, Tier.ON_DEMAND, "eu"), True),
        (BlockScope("a", BlockBreadth.PROVIDER), ("b", None, Tier.ON_DEMAND, "eu"), False),
        (BlockScope("a", BlockBreadth.TIER, tier=Tier.SPOT), ("a", "h100", Tier.SPOT, "eu"), True),
        (BlockScope("a", BlockBreadth.TIER, tier=Tier.SPOT), ("a", "h100", Tier.ON_DEMAND, "eu"), False),
        (offering("a"), ("a", "H100", Tier.SPOT, "us-east-1"), True),
        (offering("a"), ("a", "h100", Tier.SPOT, "us-west-2"), False),
        (offering("a"), ("a", "a100", Tier.SPOT, "us-east-1"), False),
        (offering("a", region=None), ("a", "h100", Tier.SPOT, "us-west-2"), True),
        (offering("a", accelerator=None), ("a", None, Tier.SPOT, "us-east-1"), True),
        (offering("a", accelerator=None), ("a", "h100", Tier.SPOT, "us-east-1"), False),
    ],
)
def test_scope_covers_exactly_its_breadth(scope: BlockScope, candidate: tuple, covered: bool) -> None:  # type: ignore[type-arg]
    provider, accelerator, tier, region = candidate
    assert scope_covers(scope, provider, accelerator=accelerator, tier=tier, region=region) is covered


def test_entry_lives_ttl_plus_bounded_jitter_and_counts_down() -> None:
    clock = ManualClock(1_800_000_000.0)
    blocklist = Blocklist(clock=clock, uniform=lambda: 0.999, default_ttl=100.0)
    blocklist.record("gpu-a", offering())
    (entry,) = blocklist.entries()
    assert 100.0 < entry.seconds_left <= 110.0  # jitter at most 10% of the TTL (and 30s)
    clock.now += 50
    assert blocklist.entries()[0].seconds_left == pytest.approx(entry.seconds_left - 50)
    clock.now += 60
    assert blocklist.entries() == []
    assert blocklist.blocked("gpu-a", accelerator="h100", tier=Tier.SPOT, region="us-east-1") is None


def test_jitter_never_exceeds_thirty_seconds() -> None:
    blocklist = Blocklist(clock=ManualClock(1_800_000_000.0), uniform=lambda: 0.999, default_ttl=3600.0)
    blocklist.record("gpu-a", offering())
    assert blocklist.entries()[0].seconds_left <= 3630.0


def test_identical_scopes_coalesce_and_the_expiry_only_moves_later() -> None:
    clock = ManualClock(1_800_000_000.0)
    ttls = {"short": 30.0, "long": 200.0}
    blocklist = Blocklist(clock=clock, uniform=lambda: 0.0, pool_ttl=ttls.get, default_ttl=100.0)
    blocklist.record("gpu-a", offering())
    clock.now += 10
    blocklist.record("gpu-a", offering(accelerator="H100"), pool="short")  # shorter: keeps the later expiry
    (entry,) = blocklist.entries()
    assert entry.seconds_left == pytest.approx(90.0)
    blocklist.record("gpu-a", offering(), pool="long")
    (entry,) = blocklist.entries()
    assert entry.seconds_left == pytest.approx(200.0)


def test_entries_are_ordered_by_expiry_and_blocked_returns_the_latest_covering() -> None:
    ttls = {"fifty": 50.0, "ten": 10.0}
    blocklist = Blocklist(clock=ManualClock(1_800_000_000.0), uniform=lambda: 0.0, pool_ttl=ttls.get, default_ttl=100.0)
    blocklist.record("gpu-a", offering())
    blocklist.record("gpu-a", BlockScope("gpu-a", BlockBreadth.TIER, tier=Tier.SPOT), pool="fifty")
    blocklist.record("gpu-b", BlockScope("gpu-b", BlockBreadth.PROVIDER), pool="ten")
    assert [e.provider for e in blocklist.entries()] == ["gpu-b", "gpu-a", "gpu-a"]
    entry = blocklist.blocked("gpu-a", accelerator="h100", tier=Tier.SPOT, region="us-east-1")
    assert entry is not None and entry.seconds_left == pytest.approx(100.0)


def test_the_pool_ttl_wins_over_the_default_and_clear_get_work_by_id() -> None:
    blocklist = Blocklist(clock=ManualClock(1_800_000_000.0), uniform=lambda: 0.0, pool_ttl={"train": 20.0}.get)
    blocklist.record("gpu-a", offering(), pool="train")
    blocklist.record("gpu-b", offering("gpu-b"), pool="missing")
    first, second = blocklist.entries()
    assert (first.pool, first.seconds_left) == ("train", pytest.approx(20.0))
    assert second.seconds_left == pytest.approx(300.0)
    assert blocklist.get(first.id) == first
    assert blocklist.clear(first.id) is True
    assert blocklist.clear(first.id) is False
    assert blocklist.get(first.id) is None


def test_a_refusal_in_a_pool_gets_the_pools_ttl_and_keeps_the_first_pool_named() -> None:
    """What placement's attribution of a refusal to its pool did, `record(pool=)` now does at once."""
    clock = ManualClock(1_800_000_000.0)
    blocklist = Blocklist(clock=clock, uniform=lambda: 0.0, pool_ttl={"train": 5.0, "other": 1.0}.get)
    blocklist.record("gpu-a", offering(), pool="train")
    clock.now += 1
    (entry,) = blocklist.entries()
    assert (entry.pool, entry.seconds_left) == ("train", pytest.approx(4.0))
    blocklist.record("gpu-a", offering(), pool="other")
    assert [(e.pool, e.seconds_left) for e in blocklist.entries()] == [("train", pytest.approx(4.0))]


def test_without_a_pool_ttl_the_default_is_five_minutes() -> None:
    blocklist = Blocklist(clock=ManualClock(1_800_000_000.0), uniform=lambda: 0.0, pool_ttl={"zero": 0.0}.get)
    blocklist.record("gpu-a", offering())
    blocklist.record("gpu-b", offering("gpu-b"), pool="zero")  # a pool TTL of 0 is no TTL
    blocklist.use_pool_ttls(lambda name: None)
    blocklist.record("gpu-c", offering("gpu-c"), pool="train")  # a pool the cache does not know
    assert [e.seconds_left for e in blocklist.entries()] == [pytest.approx(300.0)] * 3


def test_clear_notifies_subscribers_and_record_does_not() -> None:
    woken: list[int] = []
    blocklist = Blocklist(clock=ManualClock(1_800_000_000.0), uniform=lambda: 0.0)
    blocklist.subscribe(lambda: woken.append(1))
    blocklist.record("gpu-a", offering())
    assert woken == []  # a record only ever moves an expiry later: nobody waiting can go sooner
    assert blocklist.clear(blocklist.entries()[0].id)
    assert woken == [1]


def test_an_unsubscribed_listener_is_not_told() -> None:
    woken: list[str] = []
    blocklist = Blocklist(clock=ManualClock(1_800_000_000.0), uniform=lambda: 0.0)

    def first() -> None:
        woken.append("first")

    blocklist.subscribe(first)
    blocklist.subscribe(lambda: woken.append("second"))
    blocklist.unsubscribe(first)
    blocklist.record("gpu-a", offering())
    assert blocklist.clear(blocklist.entries()[0].id)
    assert woken == ["second"]


def test_revision_changes_on_record_clear_and_expiry() -> None:
    clock = ManualClock(1_800_000_000.0)
    blocklist = Blocklist(clock=clock, uniform=lambda: 0.0, default_ttl=10.0)
    start = blocklist.revision()
    blocklist.record("gpu-a", offering())
    recorded = blocklist.revision()
    assert recorded != start
    assert blocklist.revision() == recorded
    clock.now += 11
    assert blocklist.revision() != recorded


def test_an_empty_provider_records_nothing() -> None:
    blocklist = Blocklist(clock=ManualClock(1_800_000_000.0))
    blocklist.record("", BlockScope("", BlockBreadth.PROVIDER))
    blocklist.record("gpu-a", BlockScope("gpu-b", BlockBreadth.PROVIDER))
    assert blocklist.entries() == []


def test_concurrent_writers_and_readers_keep_one_entry_per_scope() -> None:
    blocklist = Blocklist()

    def write(index: int) -> None:
        for n in range(200):
            blocklist.record("gpu-a", offering(region=f"r{n % 10}"))
            blocklist.entries()

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(blocklist.entries()) == 10
    assert len({e.id for e in blocklist.entries()}) == 10
