"""Every public method of `RunPodProvider` raises only `providers.errors` types when RunPod is
down, answers 5xx, refuses capacity or rejects the key; the key never shows in a log, a
message or a repr; refusals block as wide as they should."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from providers import errors
from providers.base import BlockBreadth, InstanceId, LogOptions, PodSpec, ProvisionRequest, Tier
from providers.claim import claim_name
from providers.runpod import RunPodProvider, sdk
from providers.runpod.classify import LowBid, translate
from tests.providers.runpod.fake_runpod import FakeRunPod, start_fake_runpod
from tests.providers.runpod.runpod_pods import can_run_pods
from tests.support.polling import wait_for

KEY = "rpa_SECRETKEY0123456789abcdef"


@pytest.fixture(name="fake")
def fake_fixture(tmp_path: Path) -> Iterator[FakeRunPod]:
    reason = can_run_pods()
    if reason:
        pytest.skip(reason)
    with start_fake_runpod(api_key=KEY, folder=tmp_path / "runpod") as fake:
        yield fake


def make(fake: FakeRunPod, tmp_path: Path, key: str = KEY) -> RunPodProvider:
    creds = tmp_path / f"creds-{uuid.uuid4().hex[:6]}"
    creds.mkdir()
    (creds / "RUNPOD_API_KEY").write_text(key)
    return RunPodProvider("runpod", {"api_base_url": fake.url, "credentials_dir": str(creds)})


def pod_of(**fields: object) -> PodSpec:
    values: dict[str, object] = {"namespace": "default", "name": "w", "uid": str(uuid.uuid4()), "container": "main",
                                 "image": "busybox", "command": ("sleep", "600")}  # fmt: skip
    values.update(fields)
    return PodSpec(**values)  # type: ignore[arg-type]


def request_of(pod: PodSpec, **fields: Any) -> ProvisionRequest:
    return ProvisionRequest(claim=claim_name(pod.namespace, pod.name, pod.uid), **fields)


def every_method(provider: RunPodProvider, instance_id: InstanceId) -> list[Callable[[], object]]:
    gpu = pod_of(accelerator="rtx4090")
    return [
        lambda: provider.provision(gpu, request_of(gpu)),
        lambda: provider.provision(gpu, request_of(gpu, capacity_type=Tier.SPOT)),
        lambda: provider.get(instance_id),
        provider.list,
        lambda: provider.terminate(instance_id),
        provider.offerings,
        lambda: provider.logs(instance_id, LogOptions()),
        lambda: provider.exec(instance_id, ["true"], tty=False, stdin=False),
        lambda: provider.usage(instance_id),
    ]


def only_provider_errors(calls: list[Callable[[], object]]) -> list[errors.ProviderError]:
    raised = []
    for call in calls:
        try:
            call()
        except errors.ProviderError as exc:
            raised.append(exc)
        # anything else propagates and fails the test
    return raised


@pytest.mark.parametrize("mode", [True, "503", "refused"])
def test_an_outage_is_unavailable_from_every_method(
    fake: FakeRunPod, tmp_path: Path, mode: bool | str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    provider = make(fake, tmp_path)
    pod = pod_of()
    live = provider.provision(pod, request_of(pod)).instance_id
    fake.outage(mode)
    raised = only_provider_errors(every_method(provider, live))
    assert len(raised) == 9 and all(isinstance(e, errors.Unavailable) for e in raised)
    fake.outage(False)
    assert provider.get(live) is not None
    assert KEY not in caplog.text and all(KEY not in str(e) for e in raised)


def test_a_wrong_key_is_unauthorized_and_blocks_the_provider(
    fake: FakeRunPod, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    provider = make(fake, tmp_path, key="rpa_WRONGKEY9876543210")
    raised = only_provider_errors(every_method(provider, InstanceId("abc123")))
    assert len(raised) == 9 and all(isinstance(e, errors.Unauthorized) for e in raised)
    scope = provider.classify_provision_error(raised[0], accelerator="rtx4090", tier=Tier.ON_DEMAND, region=None)
    assert scope.breadth is BlockBreadth.PROVIDER
    assert "WRONGKEY" not in caplog.text and "WRONGKEY" not in repr(provider)
    assert all("WRONGKEY" not in str(e) for e in raised)


def test_no_key_at_all_is_unauthorized(fake: FakeRunPod, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUNPOD_API_KEY", raising=False)
    provider = RunPodProvider("runpod", {"api_base_url": fake.url})
    with pytest.raises(errors.Unauthorized):
        provider.list()
    monkeypatch.setenv("RUNPOD_API_KEY", KEY)
    assert provider.list() == []


def test_no_capacity_blocks_the_offering_and_nothing_is_left_behind(fake: FakeRunPod, tmp_path: Path) -> None:
    provider = make(fake, tmp_path)
    gpu = pod_of(accelerator="rtx4090")
    for tier in (Tier.ON_DEMAND, Tier.SPOT):
        fake.refuse_capacity(times=1)
        with pytest.raises(errors.NoCapacity) as caught:
            provider.provision(gpu, request_of(gpu, capacity_type=tier, region="EU-RO-1"))
        scope = provider.classify_provision_error(caught.value, accelerator="rtx4090", tier=tier, region="EU-RO-1")
        assert scope.breadth is BlockBreadth.OFFERING and scope.tier is tier and scope.region == "EU-RO-1"
    assert fake.pods() == []
    result = provider.provision(gpu, request_of(gpu))  # the refusal was once
    assert [p.id for p in fake.pods()] == [result.instance_id]


def test_secret_env_values_with_quotes_reach_the_pod_and_no_message(fake: FakeRunPod, tmp_path: Path) -> None:
    provider = make(fake, tmp_path)
    secret = 'pa"ss\\word\nline2'
    pod = pod_of(command=("sh", "-c", 'printf %s "$API_TOKEN" > /root/token; sleep 600'))
    result = provider.provision(pod, request_of(pod, env={"API_TOKEN": secret}))
    assert secret not in repr(result)
    box = fake.box(result.instance_id)
    wait_for(lambda: box.file("/root/token").exists(), 30, what="the token file")
    assert box.file("/root/token").read_text() == secret


def test_translate_maps_runpods_words() -> None:
    bid = translate(sdk.query_error("Your bid is below the minimum bid price"))
    assert isinstance(bid, LowBid)
    assert isinstance(translate(sdk.query_error("Pod not found")), errors.NotFound)
    assert isinstance(translate(sdk.query_error("Insufficient balance")), errors.QuotaExceeded)
    assert isinstance(translate(ValueError("x")), errors.Unavailable)
    scope = RunPodProvider("r", {}).classify_provision_error(bid, accelerator="a40", tier=Tier.SPOT, region=None)
    assert scope.breadth is BlockBreadth.TIER and scope.tier is Tier.SPOT
