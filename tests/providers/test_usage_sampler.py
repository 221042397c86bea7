"""The usage seam's sampling schedule (`providers.usage.UsageSampler`) with an injected clock:
at most one reading per key per interval whatever the scrape rate, the CPU rate from two
readings, and instance totals (`total_of`)."""

from __future__ import annotations

from datetime import UTC, datetime

from providers.usage import Reading, ResourceUsage, UsageSampler, instance_usage, total_of


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Counter:
    """A reading source that counts how often it is read."""

    def __init__(self, *readings: Reading | None) -> None:
        self.readings = list(readings)
        self.reads = 0

    def __call__(self) -> Reading | None:
        self.reads += 1
        return self.readings.pop(0)


def _sampler(clock: Clock, interval: float = 10.0) -> UsageSampler:
    return UsageSampler(interval, clock=clock, wall=lambda: datetime(2026, 1, 1, tzinfo=UTC))


def test_readings_are_cached_for_the_interval_whatever_the_scrape_rate() -> None:
    clock = Clock()
    sampler = _sampler(clock)
    source = Counter(Reading(1_000_000_000, 4096, 2048), Reading(3_000_000_000, 8192, 4096))
    first = sampler.sample("run", source)
    for _ in range(50):
        clock.now += 0.1
        assert sampler.sample("run", source) == first
    assert source.reads == 1
    assert first == ResourceUsage(None, 4096, 1_000_000_000, 2048, datetime(2026, 1, 1, tzinfo=UTC))


def test_the_cpu_rate_comes_from_two_readings_an_interval_apart() -> None:
    clock = Clock()
    sampler = _sampler(clock)
    source = Counter(Reading(1_000_000_000, 1, 1), Reading(6_000_000_000, 1, 1))
    sampler.sample("run", source)
    clock.now += 10.0
    second = sampler.sample("run", source)
    assert second is not None and second.cpu_nano_cores == 500_000_000  # 5 core-seconds over 10 s
    assert source.reads == 2


def test_a_counter_that_goes_back_is_a_new_process_with_no_rate_yet() -> None:
    clock = Clock()
    sampler = _sampler(clock, 1.0)
    source = Counter(Reading(9_000_000_000, 1, 1), Reading(1_000_000_000, 1, 1))
    sampler.sample("run", source)
    clock.now += 1.0
    again = sampler.sample("run", source)
    assert again is not None and again.cpu_nano_cores is None and again.cpu_core_nanoseconds == 1_000_000_000


def test_nothing_running_is_none_and_forgotten() -> None:
    clock = Clock()
    sampler = _sampler(clock, 1.0)
    source = Counter(Reading(5, 1, 1), None, Reading(7, 1, 1))
    assert sampler.sample("run", source) is not None
    clock.now += 1.0
    assert sampler.sample("run", source) is None
    clock.now += 1.0
    fresh = sampler.sample("run", source)
    assert fresh is not None and fresh.cpu_nano_cores is None  # no earlier reading to rate against


def test_keys_unread_for_ten_intervals_are_dropped() -> None:
    clock = Clock()
    sampler = _sampler(clock, 1.0)
    sampler.sample("old", Counter(Reading(1, 1, 1)))
    clock.now += 11.0
    sampler.sample("new", Counter(Reading(1, 1, 1)))
    later = Counter(Reading(2, 1, 1))
    sampler.sample("old", later)
    assert later.reads == 1  # read afresh: its sample was forgotten, not served from the cache


def test_instance_totals_sum_what_every_container_measured() -> None:
    stamp = datetime(2026, 1, 1, tzinfo=UTC)
    a = ResourceUsage(100, 10, 1000, 5, stamp)
    b = ResourceUsage(None, 20, 3000, 7, stamp)
    assert total_of({"a": a, "b": b}) == ResourceUsage(None, 30, 4000, 12, stamp)
    assert instance_usage({}) is None
    usage = instance_usage({"a": a})
    assert usage is not None and usage.containers == {"a": a} and usage.total == a
