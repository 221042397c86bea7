"""`providers.aws` against moto's in-process EC2: idempotent provision (a crash after the
launch adopts), spot and on-demand parameters, list across three regions, the failover
classification of each EC2 code, error translation, and secrets kept out of logs."""

from __future__ import annotations

import gzip
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore import exceptions as boto_errors
from botocore.parsers import ResponseParserError
from moto import mock_aws

from providers import errors
from providers.aws import AwsProvider
from providers.aws.ec2 import translate
from providers.aws.status import TAG_CLAIM
from providers.base import BlockBreadth, InstanceId, LogOptions, PodSpec, ProvisionRequest, Tier
from providers.claim import claim_name

AMI = "ami-12c6146b"
REGIONS = ["us-east-1", "eu-west-1", "ap-northeast-1"]


@pytest.fixture
def aws() -> Iterator[None]:
    with mock_aws():
        yield


def make_provider(**options: Any) -> AwsProvider:
    values: dict[str, Any] = {"regions": REGIONS, "ami": AMI, "max_attempts": 1, "ssh": False}
    values.update(options)
    return AwsProvider("aws", values)


def make_pod(name: str = "trainer", **overrides: Any) -> PodSpec:
    values: dict[str, Any] = {
        "namespace": "ml", "name": name, "uid": str(uuid.uuid4()), "container": "main", "image": "pytorch/pytorch:2",
        "command": ("python", "-m", "train"), "args": ("--epochs", "3"), "ports": (8080,), "accelerator": "a10g",
        "gpu_count": 1,
    }  # fmt: skip
    values.update(overrides)
    return PodSpec(**values)


def request_for(pod: PodSpec, **overrides: Any) -> ProvisionRequest:
    return ProvisionRequest(claim=claim_name(pod.namespace, pod.name, pod.uid), **overrides)


def instances_with_claim(region: str, claim: str) -> list[dict[str, Any]]:
    ec2 = boto3.client("ec2", region_name=region)
    pages = ec2.get_paginator("describe_instances").paginate(Filters=[{"Name": f"tag:{TAG_CLAIM}", "Values": [claim]}])
    return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]


def capture(provider: AwsProvider, region: str, event: str) -> list[dict[str, Any]]:
    """Parameters of every call matching `event`, seen at the SDK boundary."""
    seen: list[dict[str, Any]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        seen.append(dict(params))

    provider._ec2.client(region).meta.events.register(f"provide-client-params.ec2.{event}", record)
    return seen


def fail_with(provider: AwsProvider, region: str, operation: str, exc: Exception, *, times: int = 1_000) -> None:
    """Make the SDK client raise `exc` for `operation` (the first `times` calls)."""
    client = provider._ec2.client(region)
    real = getattr(client, operation)
    left = [times]

    def raiser(**params: Any) -> Any:
        if left[0] > 0:
            left[0] -= 1
            raise exc
        return real(**params)

    setattr(client, operation, raiser)


def client_error(code: str, message: str = "refused", status: int = 400, operation: str = "RunInstances") -> Exception:
    return boto_errors.ClientError(
        {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}, operation
    )


# -- provision ----------------------------------------------------------------------------


def test_a_retry_after_a_crash_following_the_launch_adopts_the_first_instance(aws: None) -> None:
    pod = make_pod()
    request = request_for(pod)
    crashing = make_provider()
    client = crashing._ec2.client("us-east-1")
    real = client.run_instances

    def launch_then_crash(**params: Any) -> Any:
        real(**params)
        raise boto_errors.ReadTimeoutError(endpoint_url="https://ec2.us-east-1.amazonaws.com")

    client.run_instances = launch_then_crash
    with pytest.raises(errors.Unavailable):
        crashing.provision(pod, request)
    launched = instances_with_claim("us-east-1", request.claim)
    assert len(launched) == 1
    again = make_provider().provision(pod, request)
    assert again.instance_id == f"us-east-1/{launched[0]['InstanceId']}"
    assert again.credential is None
    assert len(instances_with_claim("us-east-1", request.claim)) == 1


def test_concurrent_provisions_of_one_claim_launch_one_instance(aws: None) -> None:
    provider = make_provider()
    pod = make_pod()
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(provider.provision(pod, request_for(pod)).instance_id))
               for _ in range(4)]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(set(results)) == 1 and len(results) == 4
    assert len(instances_with_claim("us-east-1", request_for(pod).claim)) == 1


def test_spot_launches_with_market_options_and_on_demand_without(aws: None) -> None:
    provider = make_provider()
    sent = capture(provider, "us-east-1", "RunInstances")
    spot_pod, od_pod = make_pod("spot"), make_pod("od")
    spot = provider.provision(spot_pod, request_for(spot_pod, capacity_type=Tier.SPOT))
    on_demand = provider.provision(od_pod, request_for(od_pod, capacity_type=Tier.ON_DEMAND))
    assert sent[0]["InstanceMarketOptions"] == {
        "MarketType": "spot",
        "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
    }
    assert "InstanceMarketOptions" not in sent[1]
    for params in sent:
        assert params["InstanceType"] == "g5.xlarge" and params["ImageId"] == AMI
        assert params["InstanceInitiatedShutdownBehavior"] == "terminate"
        tags = {t["Key"]: t["Value"] for t in params["TagSpecifications"][0]["Tags"]}
        assert tags["nebula.io/managed"] == "true" and tags["nebula.io/pod-namespace"] == "ml"
    spot_instance, od_instance = provider.get(spot.instance_id), provider.get(on_demand.instance_id)
    assert spot_instance is not None and spot_instance.capacity_type is Tier.SPOT
    assert od_instance is not None and od_instance.capacity_type is Tier.ON_DEMAND


def test_subnet_security_groups_and_profile_come_from_options(aws: None) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    group = ec2.describe_security_groups()["SecurityGroups"][0]["GroupId"]
    boto3.client("iam", region_name="us-east-1").create_instance_profile(InstanceProfileName="nebula-node")
    provider = make_provider(subnet={"us-east-1": subnet}, security_groups=[group], instance_profile="nebula-node")
    sent = capture(provider, "us-east-1", "RunInstances")
    provider.provision(make_pod(), request_for(make_pod()))
    assert sent[0]["SubnetId"] == subnet and sent[0]["SecurityGroupIds"] == [group]
    assert sent[0]["IamInstanceProfile"] == {"Name": "nebula-node"}


def test_the_credential_is_an_ed25519_key_authorized_by_the_user_data(aws: None) -> None:
    from cryptography.hazmat.primitives import serialization

    provider = make_provider()
    pod = make_pod()
    result = provider.provision(pod, request_for(pod))
    assert result.credential is not None
    private = serialization.load_ssh_private_key(result.credential.data["ssh-privatekey"], password=None)
    public = private.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    region, ec2_id = result.instance_id.split("/")
    attribute = boto3.client("ec2", region_name=region).describe_instance_attribute(
        InstanceId=ec2_id, Attribute="userData"
    )
    import base64

    script = gzip.decompress(base64.b64decode(attribute["UserData"]["Value"])).decode()
    assert public.decode() in script
    assert result.credential.data["username"] == b"ec2-user"
    assert result.endpoint and result.endpoint.endswith(".amazonaws.com")  # the public DNS name
    assert "PRIVATE" not in repr(result)


def test_an_insufficient_capacity_type_falls_through_to_the_next_alternate(aws: None) -> None:
    provider = make_provider()
    sent = capture(provider, "us-east-1", "RunInstances")
    fail_with(provider, "us-east-1", "run_instances", client_error("InsufficientInstanceCapacity"), times=1)
    result = provider.provision(make_pod(), request_for(make_pod()))
    instance = provider.get(result.instance_id)
    assert instance is not None
    assert [p["InstanceType"] for p in sent] == ["g5.2xlarge"]  # the raiser stood in for g5.xlarge


def test_unknown_accelerators_regions_and_missing_images_are_invalid(aws: None) -> None:
    provider = make_provider()
    with pytest.raises(errors.InvalidRequest):
        provider.provision(make_pod(accelerator="tpu-v5"), request_for(make_pod()))
    with pytest.raises(errors.InvalidRequest):
        provider.provision(make_pod(), request_for(make_pod(), region="sa-east-1"))
    with pytest.raises(errors.InvalidRequest):
        provider.provision(make_pod(image=""), request_for(make_pod()))
    with pytest.raises(errors.NoCapacity):  # sold elsewhere, not in this region
        provider.provision(make_pod(accelerator="a100-80gb", gpu_count=8), request_for(make_pod(), region="eu-west-1"))


# -- list, get, terminate -----------------------------------------------------------------------


def test_list_asks_each_of_three_regions_once_concurrently_and_finds_every_claim(aws: None) -> None:
    claims = {}
    for region in REGIONS:
        pod = make_pod(f"in-{region}")
        claims[request_for(pod).claim] = make_provider().provision(pod, request_for(pod, region=region)).instance_id
    fresh = make_provider()
    together = threading.Barrier(len(REGIONS), timeout=30)  # passes only if all regions are asked at once
    calls: dict[str, list[dict[str, Any]]] = {}

    def meet(**_: Any) -> None:
        together.wait()  # a before-call hook must return None, or botocore takes it for the answer

    for region in REGIONS:
        calls[region] = capture(fresh, region, "DescribeInstances")
        fresh._ec2.client(region).meta.events.register("before-call.ec2.DescribeInstances", meet)
    found = fresh.list()
    assert {i.claim: i.id for i in found} == claims
    assert {i.region for i in found} == set(REGIONS)
    assert {region: len(seen) for region, seen in calls.items()} == dict.fromkeys(REGIONS, 1)
    assert all({"Name": "tag:nebula.io/managed", "Values": ["true"]} in seen[0]["Filters"] for seen in calls.values())


def test_list_fails_whole_when_one_region_fails(aws: None) -> None:
    provider = make_provider()
    fail_with(provider, "eu-west-1", "get_paginator", boto_errors.EndpointConnectionError(endpoint_url="x"))
    with pytest.raises(errors.Unavailable):
        provider.list()


def test_instances_of_another_provider_or_outside_nebula_are_invisible(aws: None) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    foreign = ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    other = AwsProvider("aws-two", {"regions": REGIONS, "ami": AMI, "ssh": False})
    pod = make_pod()
    theirs = other.provision(pod, request_for(pod))
    provider = make_provider()
    assert provider.list() == []
    assert provider.get(InstanceId(f"us-east-1/{foreign}")) is None
    provider.terminate(InstanceId(f"us-east-1/{foreign}"))
    provider.terminate(theirs.instance_id)
    assert (
        ec2.describe_instances(InstanceIds=[foreign])["Reservations"][0]["Instances"][0]["State"]["Name"] == "running"
    )
    assert other.get(theirs.instance_id) is not None


# -- classification and translation --------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "tier", "breadth", "blocked_tier"),
    [
        ("InsufficientInstanceCapacity", Tier.ON_DEMAND, BlockBreadth.OFFERING, Tier.ON_DEMAND),
        ("InsufficientInstanceCapacity", Tier.SPOT, BlockBreadth.OFFERING, Tier.SPOT),
        ("InsufficientHostCapacity", Tier.ON_DEMAND, BlockBreadth.OFFERING, Tier.ON_DEMAND),
        ("Unsupported", Tier.SPOT, BlockBreadth.OFFERING, Tier.SPOT),
        ("SpotMaxPriceTooLow", Tier.SPOT, BlockBreadth.TIER, Tier.SPOT),
        ("UnauthorizedOperation", Tier.ON_DEMAND, BlockBreadth.PROVIDER, None),
        ("AuthFailure", Tier.SPOT, BlockBreadth.PROVIDER, None),
        ("OptInRequired", Tier.ON_DEMAND, BlockBreadth.PROVIDER, None),
        ("InstanceLimitExceeded", Tier.ON_DEMAND, BlockBreadth.PROVIDER, None),
        ("VcpuLimitExceeded", Tier.ON_DEMAND, BlockBreadth.PROVIDER, None),
        ("MaxSpotInstanceCountExceeded", Tier.SPOT, BlockBreadth.PROVIDER, None),
    ],
)
def test_each_refusal_code_blocks_as_wide_as_the_failover_table_says(
    aws: None, code: str, tier: Tier, breadth: BlockBreadth, blocked_tier: Tier | None
) -> None:
    provider = make_provider()
    fail_with(provider, "eu-west-1", "run_instances", client_error(code))
    pod = make_pod()
    with pytest.raises(errors.Refused) as caught:
        provider.provision(pod, request_for(pod, capacity_type=tier, region="eu-west-1"))
    scope = provider.classify_provision_error(caught.value, accelerator="A10G", tier=tier, region="eu-west-1")
    assert scope.breadth is breadth and scope.tier == blocked_tier and scope.provider == "aws"
    if breadth is BlockBreadth.OFFERING:
        assert (scope.accelerator, scope.region) == ("A10G", "eu-west-1")
    assert code in scope.reason


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (client_error("RequestLimitExceeded", status=503), errors.Unavailable),
        (client_error("InternalError", status=500), errors.Unavailable),
        (client_error("InvalidAMIID.NotFound"), errors.InvalidRequest),
        (client_error("InvalidInstanceID.Malformed"), errors.NotFound),
        (boto_errors.NoCredentialsError(), errors.Unauthorized),
        (boto_errors.EndpointConnectionError(endpoint_url="https://ec2"), errors.Unavailable),
        (boto_errors.ConnectTimeoutError(endpoint_url="https://ec2"), errors.Unavailable),
        (boto_errors.ParamValidationError(report="bad"), errors.InvalidRequest),
        (NotImplementedError("moto does not do this"), errors.Unavailable),
    ],
)
def test_sdk_exceptions_translate_to_provider_errors(exc: Exception, expected: type[Exception]) -> None:
    assert isinstance(translate(exc, operation="run_instances", region="us-east-1"), expected)


SDK_FAILURES: list[Callable[[], Exception]] = [
    lambda: client_error("UnauthorizedOperation"),
    lambda: client_error("Whatever.Unknown"),
    lambda: client_error("ServiceUnavailable", status=503),
    lambda: boto_errors.ReadTimeoutError(endpoint_url="https://ec2"),
    lambda: boto_errors.NoCredentialsError(),
    lambda: ResponseParserError("html"),
]


@pytest.mark.parametrize("failure", SDK_FAILURES)
def test_no_botocore_exception_escapes_any_method(aws: None, failure: Callable[[], Exception]) -> None:
    provider = make_provider(regions=["us-east-1"])
    pod = make_pod()
    kept = provider.provision(pod, request_for(pod)).instance_id
    for operation in ("run_instances", "describe_instances", "terminate_instances", "get_paginator",
                      "describe_spot_price_history", "get_console_output"):  # fmt: skip
        fail_with(provider, "us-east-1", operation, failure())
    other = make_pod("other")
    calls: list[Callable[[], object]] = [
        lambda: provider.provision(other, request_for(other)),
        lambda: provider.get(kept),
        lambda: provider.terminate(kept),
        provider.list,
        provider.offerings,
        lambda: provider.logs(kept, LogOptions()).read(),
        lambda: provider.exec(kept, ["true"], tty=False, stdin=False),
    ]
    for call in calls:
        try:
            call()
        except errors.ProviderError:
            pass


# -- secrets --------------------------------------------------------------------------------------


def test_no_env_value_reaches_a_log_line_or_an_error(aws: None, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "hunter2-very-secret-token"
    provider = make_provider()
    pod = make_pod()
    provider.provision(pod, request_for(pod, env={"API_TOKEN": secret}))
    fail_with(provider, "us-east-1", "run_instances", client_error("InvalidParameterValue", f"bad value {secret}"))
    other = make_pod("other")
    with pytest.raises(errors.InvalidRequest) as caught:
        provider.provision(other, request_for(other, env={"API_TOKEN": secret}))
    assert secret not in str(caught.value) and "[REDACTED]" in str(caught.value)
    assert caplog.records, "DEBUG logging was on: the SDK logs its requests"
    assert not [r for r in caplog.records if secret in r.getMessage()]


# -- offerings and regions ---------------------------------------------------------------------------


def test_offerings_carry_catalog_prices_and_spot_prices_when_reachable(aws: None) -> None:
    offerings = make_provider().offerings()
    a10g = [o for o in offerings if o.accelerator == "A10G" and o.gpu_count == 1 and o.region == "us-east-1"]
    assert {o.tier for o in a10g} == {Tier.ON_DEMAND, Tier.SPOT}
    assert all(o.instance_type == "g5.xlarge" for o in a10g)
    on_demand = next(o for o in a10g if o.tier is Tier.ON_DEMAND)
    assert on_demand.hourly_price == pytest.approx(1.006)
    assert next(o for o in a10g if o.tier is Tier.SPOT).hourly_price is not None
    assert any(o.accelerator is None and o.gpu_count == 0 for o in offerings)


def test_spot_prices_are_unknown_when_ec2_cannot_say(aws: None) -> None:
    provider = make_provider(regions=["us-east-1"])
    fail_with(provider, "us-east-1", "get_paginator", client_error("UnauthorizedOperation"))
    spot = [o for o in provider.offerings() if o.tier is Tier.SPOT]
    assert spot and all(o.hourly_price is None for o in spot)


def test_expand_regions_maps_groups_to_the_providers_regions() -> None:
    provider = AwsProvider("aws", {"regions": ["us-east-1", "us-west-2", "eu-west-1", "ap-northeast-1"], "ami": AMI})
    assert provider.expand_regions(["eu", "us"]) == ["eu-west-1", "us-east-1", "us-west-2"]
    assert provider.expand_regions(["ap", "us-west-2", "us"]) == ["ap-northeast-1", "us-west-2", "us-east-1"]
    assert provider.expand_regions(["*"]) == ["us-east-1", "us-west-2", "eu-west-1", "ap-northeast-1"]
    assert provider.expand_regions(["sa", "mars-1"]) == []


def test_options_are_checked_without_io() -> None:
    with pytest.raises(ValueError, match="ami"):
        AwsProvider("aws", {"regions": ["us-east-1"]})
    with pytest.raises(ValueError, match="unknown"):
        AwsProvider("aws", {"ami": AMI, "regoins": ["us-east-1"]})
