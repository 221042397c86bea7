"""Each provider says from which fact its vendor bills an instance (`Capabilities.billing_starts`,
docs/providers.md): EC2 from `running`, Modal per second of container time, RunPod from the Pod's
creation, local from creation at price 0, the fake as its scenario says (default Created)."""

from __future__ import annotations

import uuid

import pytest

from providers import base
from providers.aws import AwsProvider
from providers.fake import FakeProvider
from providers.fake.scenario import parse_scenario
from providers.local import LocalProvider
from providers.modal import ModalProvider
from providers.runpod import RunPodProvider

START, CREATE = base.BillingStart.STARTED, base.BillingStart.CREATED


@pytest.mark.parametrize(
    ("provider", "expected"),
    [
        (lambda: AwsProvider("aws", {"regions": ["us-east-1"], "ami": "ami-0"}), START),
        (lambda: ModalProvider("modal", {}), START),
        (lambda: RunPodProvider("runpod", {}), CREATE),
        (lambda: LocalProvider("local", {}), CREATE),
        (lambda: FakeProvider("fake", {"cloud": f"billing-{uuid.uuid4().hex}"}), CREATE),
    ],
    ids=["aws", "modal", "runpod", "local", "fake"],
)
def test_each_provider_says_when_its_vendor_starts_billing(provider: object, expected: base.BillingStart) -> None:
    assert callable(provider)
    assert provider().capabilities().billing_starts is expected


def test_the_fake_bills_from_the_fact_its_scenario_names_and_refuses_another_word() -> None:
    cloud = f"billing-{uuid.uuid4().hex}"
    started = FakeProvider("fake", {"cloud": cloud, "scenario": {"billing_starts": "started"}})
    assert started.capabilities().billing_starts is START
    assert parse_scenario({}).billing_starts is CREATE
    with pytest.raises(ValueError, match="billing_starts"):
        parse_scenario({"billing_starts": "Running"})
