"""`kubectl top` through `ModalProvider.usage`: the SDK's SandboxGetStats against the fake,
whose figures are measured from the sandbox's real processes (`providers.modal.fake.stats`);
the median of the last minutes, read once per interval; nothing for a sandbox not running."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from providers import errors
from providers.base import InstanceId, InstanceState
from tests.providers.modal.modal_rig import fake_modal, make_pod, provider_on, request_for
from tests.support.polling import wait_for

__all__ = ["fake_modal"]

BUSY = "head -c 64000000 /dev/zero | tail -c 1 > /dev/null; while :; do :; done"  # 64 MB held, a core spun


def _samples(fake: Any, sandbox_id: str) -> list[Any]:
    sampler = fake.state.sandboxes[sandbox_id].sampler
    return sampler.samples(0, math.inf) if sampler is not None else []


def test_a_busy_sandbox_reports_its_cores_and_memory_and_a_reading_is_reused(fake_modal: Any, tmp_path: Path) -> None:
    provider = provider_on(fake_modal, tmp_path)
    pod = make_pod(command=("sh", "-c", BUSY))
    instance_id = provider.provision(pod, request_for(pod)).instance_id
    wait_for(lambda: len([s for s in _samples(fake_modal, instance_id) if s.cores > 0.3]) >= 3, 20)
    usage = provider.usage(instance_id)
    assert usage is not None and usage.total.cpu_nano_cores is not None and usage.total.memory_bytes is not None
    assert usage.total.cpu_nano_cores > 300_000_000 and usage.total.memory_bytes > 0
    assert set(usage.containers) == {""} and usage.total.sampled_at is not None
    calls = fake_modal.calls().count("SandboxGetStats")
    assert provider.usage(instance_id) == usage and fake_modal.calls().count("SandboxGetStats") == calls
    provider.terminate(instance_id)


def test_no_usage_for_a_sandbox_that_ended_and_unknown_ids_are_not_found(fake_modal: Any, tmp_path: Path) -> None:
    provider = provider_on(fake_modal, tmp_path)
    pod = make_pod(command=("true",))
    instance_id = provider.provision(pod, request_for(pod)).instance_id
    wait_for(lambda: (i := provider.get(instance_id)) is not None and i.state is InstanceState.SUCCEEDED, 20)
    assert provider.usage(instance_id) is None
    with pytest.raises(errors.NotFound):
        provider.usage(InstanceId("sb-doesnotexist0000000000"))


def test_a_sandbox_not_sampled_yet_reports_no_figures(fake_modal: Any, tmp_path: Path) -> None:
    provider = provider_on(fake_modal, tmp_path)
    pod = make_pod()
    instance_id = provider.provision(pod, request_for(pod)).instance_id
    fake_modal.state.sandboxes[instance_id].sampler = None  # as Modal before its first sample is published
    usage = provider.usage(instance_id)
    assert usage is not None and (usage.total.cpu_nano_cores, usage.total.memory_bytes) == (None, None)


def test_the_cpu_counter_integrates_the_median_rate_between_readings() -> None:
    from types import SimpleNamespace

    from providers.modal.usage import CPU_KEY, INTERVAL, UsageCache

    def stats(cores: float) -> Any:
        median = SimpleNamespace(percentile=50.0, value=cores)
        return SimpleNamespace(percentile_stats={CPU_KEY: SimpleNamespace(percentiles=[median])})

    clock = [100.0]
    cache = UsageCache(clock=lambda: clock[0])
    rates = iter([2.0, 0.5])
    first = cache.get("sb-1", lambda since: stats(next(rates)))
    assert (first.total.cpu_nano_cores, first.total.cpu_core_nanoseconds) == (2_000_000_000, 0)
    clock[0] += INTERVAL / 2
    assert cache.get("sb-1", lambda since: pytest.fail("read again within the interval")) is first
    clock[0] += INTERVAL * 2  # 25 s after the first reading at half a core
    second = cache.get("sb-1", lambda since: stats(next(rates)))
    assert second.total.cpu_core_nanoseconds == 12_500_000_000 and second.total.memory_bytes is None
