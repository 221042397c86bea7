"""The fake cloud's resource usage: what its scenario says each running container uses.

Read by `FakeProvider.usage`; pure (the instance's facts and the time in, usage out). The
scenario's `usage` key gives `cpu_millicores` and `memory_bytes` per running container (a
`containers` map overrides them by name); cumulative CPU is that rate times the seconds the
container has run, so a scraper computes the same rate back.
Tests: tests/providers/fake/test_fake_usage.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from providers import base
from providers.shape import ContainerState
from providers.usage import instance_usage

DEFAULT_CPU_MILLICORES = 100
DEFAULT_MEMORY_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Load:
    cpu_millicores: int = DEFAULT_CPU_MILLICORES
    memory_bytes: int = DEFAULT_MEMORY_BYTES


@dataclass(frozen=True)
class UsageScript:
    default: Load = field(default_factory=Load)
    containers: Mapping[str, Load] = field(default_factory=dict)

    def load_of(self, name: str) -> Load:
        return self.containers.get(name, self.default)


def parse_usage(data: object) -> UsageScript:
    """The scenario's `usage` mapping; ValueError names a bad value."""
    if data is None:
        return UsageScript()
    if not isinstance(data, Mapping):
        raise ValueError("fake scenario: 'usage' is a mapping with cpu_millicores, memory_bytes, containers")
    default = _load(data, Load(), "usage")
    containers = data.get("containers") or {}
    if not isinstance(containers, Mapping):
        raise ValueError("fake scenario: 'usage.containers' maps a container name to its usage")
    return UsageScript(default, {str(k): _load(v, default, f"usage.containers.{k}") for k, v in containers.items()})


def _load(data: Any, default: Load, where: str) -> Load:
    if not isinstance(data, Mapping):
        raise ValueError(f"fake scenario: '{where}' must be a mapping")
    values = {}
    for key in ("cpu_millicores", "memory_bytes"):
        value = data.get(key, getattr(default, key))
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"fake scenario: '{where}.{key}' must be a non-negative integer")
        values[key] = value
    return Load(**values)


def usage_of(instance: base.Instance, script: UsageScript, *, now: datetime) -> base.InstanceUsage | None:
    """The scripted usage of the instance's running containers at `now`; None when none runs."""
    if instance.state is not base.InstanceState.RUNNING:
        return None
    running = [(c.name, c.started_at) for c in instance.containers if c.state is ContainerState.RUNNING]
    if not instance.containers:
        running = [("", instance.started_at)]
    measured = {name: _used(script.load_of(name), started, now) for name, started in running if started is not None}
    return instance_usage(measured)


def _used(load: Load, started: datetime, now: datetime) -> base.ResourceUsage:
    seconds = max((now - started).total_seconds(), 0.0)
    return base.ResourceUsage(
        cpu_nano_cores=load.cpu_millicores * 1_000_000,
        memory_bytes=load.memory_bytes,
        cpu_core_nanoseconds=int(seconds * load.cpu_millicores * 1_000_000),
        rss_bytes=load.memory_bytes,
        sampled_at=now,
    )
