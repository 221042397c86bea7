"""`kubectl top` for Modal sandboxes: the SDK's `Sandbox._experimental_stats` (SandboxGetStats),
the one usage call SDK 1.6.4 has.

Called by `ModalProvider.usage`. Modal samples a running sandbox every few seconds and may
publish the samples minutes late, so a sandbox's usage is the median (p50) of its samples
over the last `WINDOW` seconds: CPU in cores, memory in GiB (as working set and RSS both:
Modal reports one memory figure). No sample in the window yet: both are None (the vnode
reports the container without figures). Modal gives no cumulative CPU time, which
`/metrics/resource` (and so metrics-server) needs: `cpu_core_nanoseconds` is the median rate
integrated over the time between readings, from 0 at this process's first reading (a
manager restart resets it, as a container restart resets the kubelet's). One stats call per
sandbox per `INTERVAL` seconds, however often the kubelet API is scraped.
Tests: tests/providers/modal/test_modal_provider_usage.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from providers.usage import InstanceUsage, ResourceUsage

WINDOW = 300.0  # seconds of samples a reading takes the median of
INTERVAL = 10.0  # seconds a reading is reused (cadvisor's housekeeping, as providers.usage)
CPU_KEY = "CPU Usage (cores)"
MEMORY_KEY = "Memory Usage (GiB)"
NANO = 1_000_000_000


def median_of(stats: Any, key: str) -> float | None:
    """The p50 of the distribution `key` of a `SandboxStats`, None when Modal sampled none."""
    distribution = (getattr(stats, "percentile_stats", None) or {}).get(key)
    for percentile in getattr(distribution, "percentiles", None) or ():
        if getattr(percentile, "percentile", None) == 50.0:  # the SDK's StatsPercentile: percent, value
            return float(percentile.value)
    return None


def usage_from(stats: Any, *, sampled_at: datetime, cpu_total: int | None = None) -> InstanceUsage:
    """The reading of one `SandboxStats`; `cpu_total` the integrated CPU nanoseconds."""
    cores, gib = median_of(stats, CPU_KEY), median_of(stats, MEMORY_KEY)
    memory = int(gib * 2**30) if gib is not None else None
    usage = ResourceUsage(
        cpu_nano_cores=int(cores * NANO) if cores is not None else None,
        memory_bytes=memory,
        cpu_core_nanoseconds=cpu_total if cores is not None else None,
        rss_bytes=memory,
        sampled_at=sampled_at,
    )
    return InstanceUsage(usage, {"": usage})


@dataclass
class _Last:
    at: float  # monotonic
    usage: InstanceUsage
    cpu_total: int  # nanoseconds integrated so far


class UsageCache:
    """The last reading per sandbox, reused for `INTERVAL` seconds; `read(since)` is the
    stats call."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, _Last] = {}

    def get(self, sandbox_id: str, read: Callable[[datetime], Any]) -> InstanceUsage:
        now = self._clock()
        with self._lock:
            last = self._last.get(sandbox_id)
        if last is not None and now - last.at < INTERVAL:
            return last.usage
        wall = datetime.now(UTC)
        stats = read(wall - timedelta(seconds=WINDOW))
        cores = median_of(stats, CPU_KEY)
        total = last.cpu_total if last is not None else 0
        if last is not None and cores is not None:
            total += int(cores * NANO * (now - last.at))
        usage = usage_from(stats, sampled_at=wall, cpu_total=total)
        with self._lock:
            self._last[sandbox_id] = _Last(now, usage, total)
            for stale in [k for k, kept in self._last.items() if now - kept.at > WINDOW]:
                del self._last[stale]
        return usage
