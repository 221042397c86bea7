"""FakeProvider's wiring: options, scenarios (file, inline, example), the pure methods,
the shared in-process cloud, and conformance to the optional protocols."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from providers import errors
from providers.base import (
    Attacher,
    BlockBreadth,
    ClaimName,
    Executor,
    LogOptions,
    LogStreamer,
    ProvisionRequest,
    Restarter,
    Tier,
)
from providers.fake import FakeProvider
from providers.fake.registry import forget
from providers.fake.scenario import load_scenario
from providers.registry import ConfigurationError, build_provider
from tests.support.factories import make_pod_spec

ROOT = Path(__file__).resolve().parents[3]


def test_the_default_scenario_has_a_cpu_and_an_h100_spot_and_on_demand_offering() -> None:
    provider = FakeProvider(f"default-{uuid.uuid4().hex}")
    shapes = {(o.accelerator, o.gpu_count, o.tier, o.region) for o in provider.offerings()}
    assert (None, 0, Tier.ON_DEMAND, "us-east-1") in shapes
    assert {("h100", 8, tier, region) for tier in Tier for region in ("us-east-1", "eu-west-1")} <= shapes
    caps = provider.capabilities()
    assert caps.poll_interval == 1.0 and caps.pulls_images and caps.log_timestamps
    assert caps.capacity["nvidia.com/gpu"] == "1000" and set(caps.tiers) == set(Tier)
    forget(provider.name)


def test_a_new_provider_object_of_the_same_owner_and_cloud_name_sees_the_same_instances() -> None:
    name = f"shared-{uuid.uuid4().hex}"
    first = FakeProvider("a", {"cloud": name})
    result = first.provision(make_pod_spec(), ProvisionRequest(claim=ClaimName("c1")))
    second = FakeProvider("a", {"cloud": name})
    assert [i.id for i in second.list()] == [result.instance_id]
    assert second.cloud is first.cloud
    assert FakeProvider("b", {"cloud": name}).list() == []  # another alias is another owner
    assert FakeProvider("a", {"cloud": f"other-{uuid.uuid4().hex}"}).list() == []
    forget(name)


def test_the_example_scenario_loads_and_drives_capabilities_and_regions() -> None:
    path = ROOT / "docs" / "examples" / "fake-scenario.yaml"
    provider = FakeProvider("fake", {"cloud": f"example-{uuid.uuid4().hex}", "scenario": str(path)})
    caps = provider.capabilities()
    assert (caps.list_lag, caps.tiers) == (0.5, (Tier.ON_DEMAND, Tier.SPOT))
    assert provider.expand_regions(["us", "US", "eu", "us-east-1", "ap-south-1"]) == [
        "us-east-1",
        "us-west-2",
        "eu-west-1",
        "ap-south-1",
    ]
    assert provider.expand_regions([]) == []
    assert load_scenario(path).commands["nvidia-smi"].stdout.startswith("8x")


def test_a_broken_scenario_file_is_unavailable_not_a_crash(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("offerings: 3\n")
    provider = FakeProvider("fake", {"cloud": f"broken-{uuid.uuid4().hex}", "scenario": str(broken)})
    with pytest.raises(errors.Unavailable, match="offerings"):
        provider.list()
    missing = FakeProvider("fake", {"cloud": f"missing-{uuid.uuid4().hex}", "scenario": str(tmp_path / "nope.yaml")})
    with pytest.raises(errors.Unavailable):
        missing.provision(make_pod_spec(), ProvisionRequest(claim=ClaimName("c")))
    assert missing.capabilities().poll_interval > 0


@pytest.mark.parametrize(
    "options",
    [
        {"bogus": 1},
        {"url": "http://127.0.0.1:1", "cloud": "x"},
        {"url": "ftp://example"},
        {"url": 8600},
        {"scenario": 42},
        {"scenario": {"offerings": []}},
        {"scenario": {"offerings": [{"tier": "Reserved"}]}},
        {"scenario": {"log": {"lines": ["{secret}"]}}},
        {"scenario": {"poll_interval": 0}},
        {"scenario": {"retention_seconds": -1}},
        {"restarts_in_place": "no"},
    ],
)
def test_bad_options_fail_at_construction(options: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        FakeProvider("fake", options)


def test_the_registry_builds_it_from_settings_and_reports_bad_options() -> None:
    entry = {"BACKEND": "providers.fake.FakeProvider", "OPTIONS": {"cloud": f"reg-{uuid.uuid4().hex}"}}
    provider = build_provider("fake", entry, cluster="c1")
    assert provider.name == "fake"
    with pytest.raises(ConfigurationError):
        build_provider("fake", {"BACKEND": "providers.fake.FakeProvider", "OPTIONS": {"nope": True}}, cluster="c1")


def test_refusals_classify_with_the_default_block_scope() -> None:
    provider = FakeProvider("fake", {"cloud": f"classify-{uuid.uuid4().hex}"})
    where: dict[str, Any] = {"accelerator": "h100", "tier": Tier.SPOT, "region": "us-east-1"}
    assert provider.classify_provision_error(errors.Unauthorized("x"), **where).breadth is BlockBreadth.PROVIDER
    assert provider.classify_provision_error(errors.QuotaExceeded("x"), **where).breadth is BlockBreadth.TIER
    scope = provider.classify_provision_error(errors.NoCapacity("x"), **where)
    assert (scope.breadth, scope.accelerator, scope.region) == (BlockBreadth.OFFERING, "h100", "us-east-1")


def test_it_is_a_log_streamer_an_executor_an_attacher_and_a_restarter() -> None:
    provider = FakeProvider("fake", {"cloud": f"proto-{uuid.uuid4().hex}"})
    assert isinstance(provider, LogStreamer) and isinstance(provider, Executor)
    assert isinstance(provider, Attacher) and isinstance(provider, Restarter)


def test_every_provider_call_is_counted_by_its_kind_and_a_followed_stream_counts_once() -> None:
    name = f"calls-{uuid.uuid4().hex}"
    provider = FakeProvider("fake", {"cloud": name, "scenario": {"log": {"interval": 0.01}}})
    instance_id = provider.provision(make_pod_spec(), ProvisionRequest(claim=ClaimName("c"))).instance_id
    provider.get(instance_id)
    provider.list()
    stream, seen = provider.logs(instance_id, LogOptions(follow=True)), b""
    while b"line 5\n" not in seen:  # several fetches of the one stream
        chunk = stream.read()
        assert chunk, f"the stream ended early: {seen!r}"
        seen += chunk
    stream.close()
    for process in (
        provider.exec(instance_id, ["true"], tty=False, stdin=False),
        provider.attach(instance_id, stdin=False, tty=False),
    ):
        process.close()
    provider.cloud.exit(instance_id, code=0)
    provider.restart(instance_id)
    provider.terminate(instance_id)
    counts = provider.cloud.call_counts()
    provider_kinds = ("provision", "get", "list", "logs", "exec", "attach", "restart", "terminate")
    assert {kind: counts.get(kind) for kind in provider_kinds} == dict.fromkeys(provider_kinds, 1)
    assert [c.method for c in provider.cloud.call_log() if c.method in provider_kinds] == list(provider_kinds)
    assert all("owner=standalone.fake" in c.args for c in provider.cloud.call_log() if c.method in provider_kinds)
    provider.cloud.reset()
    assert provider.cloud.call_counts() == {}
    forget(name)


def test_over_http_the_cloud_property_is_not_supported() -> None:
    provider = FakeProvider("fake", {"url": "http://127.0.0.1:1"})
    with pytest.raises(errors.NotSupported):
        _ = provider.cloud
    assert provider.client is not None
