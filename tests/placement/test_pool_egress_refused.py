"""The local, fake and aws providers refuse a NodePool egress mode they cannot enforce, in
`provision`, naming `spec.egress` and before creating anything; Open still provisions. The
fake's `egress` option declares modes it enforces, its call log records each request's
policy, and its wire carries the policy to the HTTP service."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws

from providers import errors
from providers.aws import AwsProvider
from providers.base import PodSpec, ProvisionRequest
from providers.claim import claim_name
from providers.egress import Egress, EgressMode, allowlist
from providers.fake import FakeProvider, wire
from providers.local.provider import LocalProvider
from tests.support.factories import make_pod_spec

BLOCKED = Egress(EgressMode.BLOCKED)
ALLOW = allowlist(["10.0.0.0/8", "pypi.org"])


def pod(**overrides: Any) -> PodSpec:
    """The trainer of namespace `ml` as its provider reads it; `overrides` as make_pod_spec's."""
    values = {"namespace": "ml", "name": "trainer", "container": "main", "image": "busybox:1"}
    return make_pod_spec(**{**values, "command": ("sleep", "30"), **overrides})


def request_for(spec: PodSpec, egress: Egress) -> ProvisionRequest:
    return ProvisionRequest(claim=claim_name(spec.namespace, spec.name, spec.uid), egress=egress)


def fake_scenario() -> dict[str, object]:
    return {"offerings": [{"accelerator": None, "gpu_count": 0, "tier": "OnDemand", "region": "us-east-1"}]}


@pytest.mark.parametrize("egress", [BLOCKED, ALLOW], ids=["Blocked", "Allowlist"])
def test_the_local_provider_refuses_egress_it_cannot_enforce_before_starting_anything(
    tmp_path: Path, egress: Egress
) -> None:
    provider = LocalProvider("local", {"state_dir": str(tmp_path), "grace_period": 1})
    spec = pod()
    with pytest.raises(errors.NotSupported) as raised:
        provider.provision(spec, request_for(spec, egress))
    assert str(raised.value) == f"spec.egress: local cannot enforce egress {egress.mode.value}; only Open"
    assert provider.list() == []
    assert not provider.root.exists() or not any(provider.root.iterdir())
    assert provider.capabilities().egress == frozenset({EgressMode.OPEN})


def test_the_fake_provider_refuses_undeclared_egress_and_records_the_policy_it_enforces() -> None:
    suffix = uuid.uuid4().hex[:8]
    plain = FakeProvider("plain", {"cloud": f"plain-{suffix}", "scenario": fake_scenario()})
    spec = pod()
    with pytest.raises(errors.NotSupported, match=r"^spec\.egress: plain cannot enforce egress Blocked; only Open$"):
        plain.provision(spec, request_for(spec, BLOCKED))
    assert plain.list() == []
    assert plain.cloud.call_counts().get("provision", 0) == 0

    sealed = FakeProvider(
        "sealed", {"cloud": f"sealed-{suffix}", "scenario": fake_scenario(), "egress": ["Open", "Blocked"]}
    )
    assert sealed.capabilities().egress == frozenset({EgressMode.OPEN, EgressMode.BLOCKED})
    with pytest.raises(errors.NotSupported, match="cannot enforce egress Allowlist; only Blocked, Open"):
        sealed.provision(spec, request_for(spec, ALLOW))
    result = sealed.provision(spec, request_for(spec, BLOCKED))
    assert [i.id for i in sealed.list()] == [result.instance_id]
    (call,) = sealed.cloud.call_log("provision")
    assert "egress=Blocked" in call.args


def test_the_fake_provider_rejects_an_unknown_egress_option() -> None:
    with pytest.raises(ValueError, match="'egress' modes \\['Sealed'\\] unknown"):
        FakeProvider("bad", {"egress": ["Sealed"]})


@pytest.fixture
def aws() -> Iterator[None]:
    with mock_aws():
        yield


def test_the_aws_provider_refuses_egress_before_launching_anything(aws: None) -> None:
    provider = AwsProvider("aws", {"regions": ["us-east-1"], "ami": "ami-12c6146b", "max_attempts": 1, "ssh": False})
    spec = pod(accelerator="a10g", gpu_count=1)
    with pytest.raises(errors.NotSupported, match=r"^spec\.egress: aws cannot enforce egress Blocked; only Open$"):
        provider.provision(spec, request_for(spec, BLOCKED))
    assert provider.list() == []  # nothing was launched (listed from moto's EC2)
    assert provider.capabilities().egress == frozenset({EgressMode.OPEN})
    launched = provider.provision(spec, request_for(spec, Egress()))  # Open still launches
    assert [i.id for i in provider.list()] == [launched.instance_id]


@pytest.mark.parametrize("egress", [Egress(), BLOCKED, ALLOW], ids=["Open", "Blocked", "Allowlist"])
def test_the_fake_wire_carries_the_requests_egress_to_the_http_service(egress: Egress) -> None:
    sent = request_for(pod(), egress)
    assert wire.request_from_json(json.loads(json.dumps(wire.request_to_json(sent)))).egress == egress
