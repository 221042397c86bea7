"""Resource usage across the seam: the values a provider measures (`ResourceUsage`, per
instance and per container in `InstanceUsage`; the optional `UsageReporter` protocol is in `providers.base`), and
`UsageSampler`, the bounded schedule every measuring provider shares.

Re-exported by `providers.base`; used by providers (local, ssh-reached, fake) and read by the
vnode's `/stats/summary` and `/metrics/resource`. The sampler never measures more often than
its interval per key, whatever the scrape rate; it does no I/O of its own.
Tests: tests/providers/test_usage_sampler.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from providers import claimlocks

DEFAULT_SAMPLE_INTERVAL = 10.0  # seconds: cadvisor's housekeeping is 10-15 s, metrics-server's resolution 15 s
NANO = 1_000_000_000


@dataclass(frozen=True)
class ResourceUsage:
    """Usage of one container (or an instance's total) at `sampled_at`.

    `cpu_core_nanoseconds`: cumulative CPU time since the container started; `cpu_nano_cores`:
    the rate between the last two samples (None until there are two); `memory_bytes`: the
    working set; `rss_bytes`: anonymous resident memory. None: not measured."""

    cpu_nano_cores: int | None = None
    memory_bytes: int | None = None
    cpu_core_nanoseconds: int | None = None
    rss_bytes: int | None = None
    sampled_at: datetime | None = None


@dataclass(frozen=True)
class InstanceUsage:
    """An instance's usage: `containers` by name ("" for the one container of a provider that
    runs one), and the instance's total."""

    total: ResourceUsage
    containers: Mapping[str, ResourceUsage] = field(default_factory=dict)


@dataclass(frozen=True)
class Reading:
    """One raw measurement: cumulative CPU core-nanoseconds, working set and RSS bytes."""

    cpu_core_nanoseconds: int
    working_set_bytes: int
    rss_bytes: int


@dataclass
class _Sample:
    reading: Reading
    taken: float  # monotonic
    usage: ResourceUsage


class UsageSampler:
    """Caches the readings of each key (a container's run, or an instance whose containers
    are read together) for `interval` seconds; the CPU rate is computed from two consecutive
    readings of the same key and name. Safe for concurrent use: one key's slow reading (over
    SSH) never holds up another's."""

    def __init__(
        self,
        interval: float = DEFAULT_SAMPLE_INTERVAL,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._interval = interval
        self._clock = clock
        self._wall = wall
        self._samples: dict[tuple[object, str], _Sample] = {}
        self._taken: dict[object, tuple[float, dict[str, ResourceUsage]]] = {}
        self._key_locks = claimlocks.ClaimLocks()
        self._lock = threading.Lock()

    @property
    def interval(self) -> float:
        return self._interval

    def sample(self, key: object, read: Callable[[], Reading | None]) -> ResourceUsage | None:
        """The cached usage of `key`, or a new reading when the cached one is `interval` old.
        `read` returns None when nothing runs (the key's last reading is forgotten)."""

        def read_one() -> Mapping[str, Reading]:
            reading = read()
            return {} if reading is None else {"": reading}

        return self.sample_all(key, read_one).get("")

    def sample_all(self, key: object, read: Callable[[], Mapping[str, Reading]]) -> dict[str, ResourceUsage]:
        """As `sample`, for a key whose reading covers several names (containers) at once;
        a name missing from a reading is forgotten."""
        with self._key_locks.held(key):
            now = self._clock()
            with self._lock:
                cached = self._taken.get(key)
            if cached is not None and now - cached[0] < self._interval:
                return cached[1]
            readings = read()
            with self._lock:
                result = {name: self._record(key, name, reading, now) for name, reading in readings.items()}
                for gone in [k for k in self._samples if k[0] == key and k[1] not in readings]:
                    del self._samples[gone]
                self._taken[key] = (now, result)
                self._forget_stale(now)
            return result

    def _record(self, key: object, name: str, reading: Reading, now: float) -> ResourceUsage:
        usage = ResourceUsage(
            cpu_nano_cores=_rate(self._samples.get((key, name)), reading, now),
            memory_bytes=reading.working_set_bytes,
            cpu_core_nanoseconds=reading.cpu_core_nanoseconds,
            rss_bytes=reading.rss_bytes,
            sampled_at=self._wall(),
        )
        self._samples[(key, name)] = _Sample(reading, now, usage)
        return usage

    def _forget_stale(self, now: float) -> None:
        """Drop keys unread for ten intervals (runs that ended): the cache stays bounded."""
        horizon = 10 * max(self._interval, 1.0)
        for key in [k for k, (taken, _) in self._taken.items() if now - taken > horizon]:
            del self._taken[key]
            for sample in [k for k in self._samples if k[0] == key]:
                del self._samples[sample]


def _rate(previous: _Sample | None, reading: Reading, now: float) -> int | None:
    if previous is None or now <= previous.taken:
        return None
    spent = reading.cpu_core_nanoseconds - previous.reading.cpu_core_nanoseconds
    if spent < 0:
        return None  # a counter that went back is another process: no rate yet
    return int(spent / (now - previous.taken))


def total_of(containers: Mapping[str, ResourceUsage]) -> ResourceUsage:
    """The instance's total: each value summed where every container measured it."""
    values = list(containers.values())

    def summed(name: str) -> int | None:
        parts = [getattr(u, name) for u in values]
        return sum(parts) if parts and all(p is not None for p in parts) else None

    stamps = [u.sampled_at for u in values if u.sampled_at is not None]
    return ResourceUsage(
        cpu_nano_cores=summed("cpu_nano_cores"),
        memory_bytes=summed("memory_bytes"),
        cpu_core_nanoseconds=summed("cpu_core_nanoseconds"),
        rss_bytes=summed("rss_bytes"),
        sampled_at=max(stamps) if stamps else None,
    )


def instance_usage(containers: Mapping[str, ResourceUsage]) -> InstanceUsage | None:
    """An InstanceUsage of the containers measured; None when none was."""
    return InstanceUsage(total_of(containers), dict(containers)) if containers else None
