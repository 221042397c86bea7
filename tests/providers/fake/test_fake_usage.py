"""The fake provider's usage from its scenario (`providers.fake.usage`): each running
container's scripted CPU and memory, cumulative CPU growing with its run time, bad
`usage` values refused by name."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from providers import errors
from providers.base import ClaimName, Instance, InstanceId, InstanceState, ProvisionRequest, UsageReporter
from providers.fake import FakeProvider
from providers.fake.registry import forget
from providers.fake.scenario import parse_scenario
from providers.fake.usage import Load, parse_usage, usage_of
from tests.support.factories import make_pod_spec
from tests.support.polling import wait_for

STARTED = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_running_instance_uses_what_the_scenario_says_growing_with_its_run_time() -> None:
    script = parse_usage({"cpu_millicores": 250, "memory_bytes": 1 << 20})
    instance = Instance(InstanceId("i"), ClaimName("c"), InstanceState.RUNNING, STARTED, started_at=STARTED)
    usage = usage_of(instance, script, now=STARTED + timedelta(seconds=10))
    assert usage is not None and set(usage.containers) == {""}
    assert usage.total.cpu_nano_cores == 250_000_000 and usage.total.memory_bytes == 1 << 20
    assert usage.total.cpu_core_nanoseconds == 2_500_000_000  # 0.25 cores for 10 s
    stopped = Instance(InstanceId("i"), ClaimName("c"), InstanceState.SUCCEEDED, STARTED, started_at=STARTED)
    assert usage_of(stopped, script, now=STARTED) is None


@pytest.mark.parametrize(
    ("usage", "named"),
    [
        ({"cpu_millicores": -1}, "usage.cpu_millicores"),
        ({"memory_bytes": "lots"}, "usage.memory_bytes"),
        ({"containers": {"web": {"cpu_millicores": True}}}, "usage.containers.web.cpu_millicores"),
        ([1], "'usage' is a mapping"),
    ],
)
def test_bad_usage_in_a_scenario_is_refused_by_name(usage: object, named: str) -> None:
    with pytest.raises(ValueError, match=named.replace(".", r"\.")):
        parse_scenario({"usage": usage})


def test_a_container_entry_overrides_the_default() -> None:
    script = parse_usage({"memory_bytes": 10, "containers": {"side": {"cpu_millicores": 5}}})
    assert script.load_of("side") == Load(5, 10) and script.load_of("main") == Load(100, 10)


def test_the_fake_provider_reports_usage_of_its_running_instances() -> None:
    name = f"usage-{uuid.uuid4().hex}"
    provider = FakeProvider(name, {"scenario": {"usage": {"cpu_millicores": 300, "memory_bytes": 4096}}})
    assert isinstance(provider, UsageReporter)
    result = provider.provision(make_pod_spec(), ProvisionRequest(claim=ClaimName("c1")))
    usage = wait_for(lambda: provider.usage(result.instance_id), 30, what="the running instance's usage")
    assert usage.total.cpu_nano_cores == 300_000_000 and usage.total.memory_bytes == 4096
    with pytest.raises(errors.NotFound):
        provider.usage(InstanceId("nope"))
    forget(name)
