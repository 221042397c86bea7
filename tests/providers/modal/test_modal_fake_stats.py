"""The fake Modal's SandboxGetStats through the SDK's `Sandbox._experimental_stats`: figures
measured from the sandbox's processes, filtered to the range asked, percentiles as Modal
gives them (tests/providers/modal/modal_fake_rig.py's client)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import modal

from providers.modal.fake import FakeModal
from providers.modal.fake.stats import CPU_KEY, MEMORY_KEY, _percentile
from tests.providers.modal.modal_fake_rig import app_for
from tests.support.polling import wait_for


def test_stats_measure_the_sandboxes_processes_within_the_range(client: Any, fake: FakeModal) -> None:
    sb = modal.Sandbox.create("sh", "-c", "while :; do :; done", app=app_for(client), client=client)
    sampler = fake.state.sandboxes[sb.object_id].sampler
    assert sampler is not None
    wait_for(lambda: len(sampler.samples(0, math.inf)) >= 4, 20)
    stats = sb._experimental_stats()
    cpu = {p.percentile: p.value for p in stats.percentile_stats[CPU_KEY].percentiles}
    assert set(cpu) == {50.0, 90.0, 99.0} and cpu[50.0] > 0.3 and cpu[50.0] <= cpu[90.0] <= cpu[99.0]
    assert stats.percentile_stats[MEMORY_KEY].unit == "GiB"
    future = datetime.now(UTC) + timedelta(hours=1)
    later = sb._experimental_stats(since=future, until=future + timedelta(minutes=1))
    assert later.percentile_stats == {} and abs((later.since - future).total_seconds()) < 0.001
    sb.terminate()


def test_percentiles_take_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (_percentile(values, 5000), _percentile(values, 9000), _percentile(values, 9900)) == (50.0, 90.0, 99.0)
    assert _percentile([7.0], 9900) == 7.0
