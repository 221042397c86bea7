"""`providers.aws` sees only its owner's instances (moto, one account and region shared by
two clusters), and provision launches anew once the claim's instance has stopped running."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore import exceptions as boto_errors
from moto import mock_aws

from providers import errors
from providers.aws.ec2 import translate
from providers.aws.launch import client_token
from providers.aws.status import TAG_CLAIM, TAG_MANAGED, TAG_PROVIDER
from providers.base import InstanceId
from tests.providers.aws.moto_ec2 import (
    AMI,
    SHUTDOWN,
    count_calls,
    make_pod,
    make_provider,
    request_for,
    set_state,
    workload_exits,
)


@pytest.fixture
def aws() -> Iterator[None]:
    with mock_aws():
        yield


def ec2_state(instance_id: str) -> str:
    region, ec2_id = instance_id.split("/")
    described = boto3.client("ec2", region_name=region).describe_instances(InstanceIds=[ec2_id])
    return str(described["Reservations"][0]["Instances"][0]["State"]["Name"])


def tags_sent(params: dict[str, Any], resource: str) -> dict[str, str]:
    spec = next(s for s in params["TagSpecifications"] if s["ResourceType"] == resource)
    return {t["Key"]: t["Value"] for t in spec["Tags"]}


def capture_run_instances(provider: Any) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    provider._ec2.client("us-east-1").meta.events.register(
        "provide-client-params.ec2.RunInstances", lambda params, **_: seen.append(dict(params))
    )
    return seen


def test_two_clusters_sharing_an_account_never_touch_each_others_instances(aws: None) -> None:
    alpha, beta = make_provider("alpha"), make_provider("beta")  # same alias, same account and region
    pod = make_pod()
    ours = alpha.provision(pod, request_for(pod))
    theirs = beta.provision(pod, request_for(pod))  # the same claim: each owner launches its own
    assert ours.instance_id != theirs.instance_id and theirs.credential is not None
    assert [i.id for i in alpha.list()] == [ours.instance_id]
    assert [i.id for i in beta.list()] == [theirs.instance_id]
    assert alpha.get(theirs.instance_id) is None
    calls = count_calls(alpha)
    alpha.terminate(theirs.instance_id)
    assert calls["TerminateInstances"] == 0 and ec2_state(theirs.instance_id) == "running"
    again = beta.provision(pod, request_for(pod))
    assert again.instance_id == theirs.instance_id and again.credential is None
    alpha.terminate(ours.instance_id)
    assert ec2_state(ours.instance_id) == "terminated" and ec2_state(theirs.instance_id) == "running"


def test_a_pre_owner_instance_is_neither_listed_adopted_nor_terminated(aws: None) -> None:
    provider = make_provider()
    pod = make_pod()
    claim = request_for(pod).claim
    ec2 = boto3.client("ec2", region_name="us-east-1")
    old_tags = [{"Key": TAG_CLAIM, "Value": claim}, {"Key": TAG_MANAGED, "Value": "true"},
                {"Key": TAG_PROVIDER, "Value": "aws"}]  # fmt: skip
    launched = ec2.run_instances(
        ImageId=AMI, MinCount=1, MaxCount=1, TagSpecifications=[{"ResourceType": "instance", "Tags": old_tags}]
    )["Instances"][0]["InstanceId"]
    old = InstanceId(f"us-east-1/{launched}")
    assert provider.list() == []
    assert provider.get(old) is None
    calls = count_calls(provider)
    provider.terminate(old)
    assert calls["TerminateInstances"] == 0 and ec2_state(old) == "running"
    fresh = provider.provision(pod, request_for(pod))
    assert fresh.instance_id != old and fresh.credential is not None


def test_list_and_the_claim_lookup_let_ec2_filter_by_the_owner_tag(aws: None) -> None:
    provider = make_provider("alpha")
    sent: list[dict[str, Any]] = []
    provider._ec2.client("us-east-1").meta.events.register(
        "provide-client-params.ec2.DescribeInstances", lambda params, **_: sent.append(dict(params))
    )
    pod = make_pod()
    provider.provision(pod, request_for(pod))
    provider.list()
    owner_filter = {"Name": "tag:nebula.io/owner", "Values": ["alpha.aws"]}
    assert len(sent) == 2 and all(owner_filter in params["Filters"] for params in sent)


def test_every_launched_instance_and_its_volumes_carry_the_owner_tag(aws: None) -> None:
    provider = make_provider("alpha", "gpu-east")
    sent = capture_run_instances(provider)
    pod = make_pod()
    result = provider.provision(pod, request_for(pod))
    assert tags_sent(sent[0], "instance")["nebula.io/owner"] == "alpha.gpu-east"
    assert tags_sent(sent[0], "volume")["nebula.io/owner"] == "alpha.gpu-east"
    region, ec2_id = result.instance_id.split("/")
    described = boto3.client("ec2", region_name=region).describe_instances(InstanceIds=[ec2_id])
    tags = {t["Key"]: t["Value"] for t in described["Reservations"][0]["Instances"][0]["Tags"]}
    assert tags["nebula.io/owner"] == "alpha.gpu-east" and tags["nebula.io/claim"] == request_for(pod).claim


@pytest.mark.parametrize("state", ["shutting-down", "stopping", "stopped", "terminated"])
def test_provision_after_the_claims_instance_stopped_running_launches_a_new_one(aws: None, state: str) -> None:
    provider = make_provider()
    pod = make_pod()
    first = provider.provision(pod, request_for(pod))
    set_state(first.instance_id, state, reason=SHUTDOWN)
    second = provider.provision(pod, request_for(pod))
    assert second.instance_id != first.instance_id and second.credential is not None
    assert provider.provision(pod, request_for(pod)).instance_id == second.instance_id  # adopted, not a third
    assert {i.id for i in provider.list()} == {first.instance_id, second.instance_id}
    assert provider.list()[-1].id == second.instance_id  # oldest first: the replacement comes last


def test_each_launch_of_a_claim_sends_a_client_token_no_earlier_launch_of_it_sent(aws: None) -> None:
    """EC2 answers a reused token with the old (terminated) instance for 24 h at least."""
    provider = make_provider()
    sent = capture_run_instances(provider)
    pod = make_pod()
    for _ in range(3):
        result = provider.provision(pod, request_for(pod))
        workload_exits(result.instance_id, 1, state="terminated")
    tokens = [params["ClientToken"] for params in sent]
    assert len(tokens) == 3 and len(set(tokens)) == 3


def test_the_client_token_is_stable_within_the_hour_and_changes_with_earlier_runs_or_the_hour() -> None:
    at = datetime(2026, 12, 1, 10, 5, tzinfo=UTC)
    token = client_token("ml-trainer-abc", "g5.xlarge", earlier=["i-2", "i-1"], at=at)
    assert token == client_token("ml-trainer-abc", "g5.xlarge", earlier=["i-1", "i-2"], at=at.replace(minute=59))
    assert token != client_token("ml-trainer-abc", "g5.xlarge", earlier=["i-1"], at=at)
    assert token != client_token("ml-trainer-abc", "g5.xlarge", earlier=["i-1", "i-2"], at=at.replace(hour=11))
    assert token != client_token("ml-trainer-abc", "g5.2xlarge", earlier=["i-1", "i-2"], at=at)
    assert len(token) <= 64


def test_a_client_token_reused_with_other_parameters_is_retried_not_refused() -> None:
    """A launch racing ours sent the token first: retried, provision adopts its instance."""
    mismatch = boto_errors.ClientError(
        {"Error": {"Code": "IdempotentParameterMismatch", "Message": "token reused"},
         "ResponseMetadata": {"HTTPStatusCode": 400}}, "RunInstances",
    )  # fmt: skip
    translated = translate(mismatch, operation="run_instances", region="us-east-1")
    assert isinstance(translated, errors.Unavailable) and translated.retry_after
