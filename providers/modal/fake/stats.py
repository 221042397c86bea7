"""Test infrastructure: SandboxGetStats for the fake Modal, measured from the sandbox's real
processes.

`Sampler` (one daemon thread per running sandbox, started by `State.start`) reads, every
`interval` seconds until the process ends, the CPU time and resident memory of every process
in the sandbox's session (its command runs in a session of its own) from /proc: CPU as cores
(CPU seconds over wall seconds between two readings), memory in GiB. `stats_response` answers
the SDK's `Sandbox._experimental_stats(since=, until=)` as Modal does: the samples within
`[since, until)`, as p50/p90/p99 under "CPU Usage (cores)" and "Memory Usage (GiB)" (a key
left out when nothing was sampled), with mean and max, and the range echoed back.
Tests: tests/providers/modal/test_modal_fake_stats.py
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from modal_proto import api_pb2

CPU_KEY = "CPU Usage (cores)"
MEMORY_KEY = "Memory Usage (GiB)"
PERCENTILES = (5000, 9000, 9900)  # basis points: p50, p90, p99
_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Sample:
    at: float  # wall clock, seconds
    cores: float
    gib: float


def _session_reading(session: int) -> tuple[float, int]:
    """(CPU seconds, resident bytes) of every live process whose session is `session`."""
    cpu, rss = 0.0, 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields[0] is the state (field 3); the session is field 6, utime/stime 14/15, rss 24
        if int(fields[3]) != session:
            continue
        cpu += (int(fields[11]) + int(fields[12])) / _TICKS
        rss += int(fields[21]) * _PAGE
    return cpu, rss


class Sampler:
    """Samples the session of `pid` every `interval` seconds until `done` is set."""

    def __init__(self, pid: int, done: threading.Event, interval: float = 0.5) -> None:
        self._pid = pid
        self._done = done
        self._interval = interval
        self._lock = threading.Lock()
        self._samples: list[Sample] = []
        threading.Thread(target=self._run, daemon=True, name=f"fake-modal-stats-{pid}").start()

    def _run(self) -> None:
        last: tuple[float, float] | None = None  # (monotonic, cpu seconds)
        while not self._done.is_set():
            now, cpu_and_rss = time.monotonic(), _session_reading(self._pid)
            cpu, rss = cpu_and_rss
            if last is not None and now > last[0]:
                cores = max(cpu - last[1], 0.0) / (now - last[0])
                with self._lock:
                    self._samples.append(Sample(time.time(), cores, rss / 2**30))
            last = (now, cpu)
            self._done.wait(self._interval)

    def samples(self, since: float, until: float) -> list[Sample]:
        with self._lock:
            return [s for s in self._samples if since <= s.at < until]


def _percentile(values: list[float], basis_points: int) -> float:
    ordered = sorted(values)
    rank = max(math.ceil(basis_points / 10000 * len(ordered)) - 1, 0)
    return ordered[rank]


def _distribution(values: list[float], unit: str) -> Any:
    return api_pb2.StatsPercentileDistribution(
        unit=unit,
        percentiles=[
            api_pb2.StatsPercentile(percentile_basis_points=b, value=_percentile(values, b)) for b in PERCENTILES
        ],
    )


def _seconds(req: Any, name: str, default: float) -> float:
    if not req.HasField(name):
        return default
    stamp = getattr(req, name)
    return float(stamp.seconds) + float(stamp.nanos) / 1e9


def stats_response(sampler: Sampler | None, created_at: float, req: Any) -> Any:
    """The SandboxGetStatsResponse for `req` (module doc)."""
    since = _seconds(req, "since", created_at)
    until = _seconds(req, "until", time.time())
    samples = sampler.samples(since, until) if sampler is not None else []
    response = api_pb2.SandboxGetStatsResponse(num_datapoints=len(samples))
    response.since.FromNanoseconds(int(since * 1e9))
    response.until.FromNanoseconds(int(until * 1e9))
    if samples:
        cores, gib = [s.cores for s in samples], [s.gib for s in samples]
        response.percentile_stats[CPU_KEY].CopyFrom(_distribution(cores, "cores"))
        response.percentile_stats[MEMORY_KEY].CopyFrom(_distribution(gib, "GiB"))
        response.cpu_cores.mean, response.cpu_cores.max = sum(cores) / len(cores), max(cores)
        response.memory_gib.mean, response.memory_gib.max = sum(gib) / len(gib), max(gib)
        response.duration_hours = (samples[-1].at - samples[0].at) / 3600
    return response
