"""`providers.aws` as a `NoticeSource` against moto's SQS, EventBridge and EC2: each of the four
EventBridge events yields its notice for this owner's instance and `ack` deletes it; an unacked
notice comes back after its visibility timeout; junk and other owners' notices are deleted
unseen; EventBridge rules made from deploy/aws/interruption-queue.yaml route real events to the
provider; a missing queue is `Unavailable` naming the option; SDK errors are translated."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore import exceptions as boto_errors
from moto import mock_aws

from providers import errors
from providers.aws import AwsProvider, notices
from providers.aws.options import parse_options
from providers.base import InstanceId, NoticeSource
from providers.notices import Notice, NoticeKind
from providers.owner import Owner
from tests.providers.aws.moto_ec2 import (
    AMI,
    SHUTDOWN,
    SPOT_RECLAIM,
    count_calls,
    make_pod,
    make_provider,
    request_for,
    set_state,
)
from tests.support.polling import wait_for

REGION = "us-east-1"
TEMPLATE = Path(__file__).resolve().parents[3] / "deploy" / "aws" / "interruption-queue.yaml"
ISSUED = datetime(2026, 12, 5, 10, 0, 0, tzinfo=UTC)
OTHER_ACCOUNT_INSTANCE = "i-0123456789abcdef0"


@pytest.fixture
def aws() -> Iterator[None]:
    with mock_aws():
        yield


def make_queue(name: str = "nebula-interruptions") -> str:
    return str(boto3.client("sqs", region_name=REGION).create_queue(QueueName=name)["QueueUrl"])


def on_queue(url: str) -> int:
    """Messages still on the queue, visible or not (what `ack` must have deleted)."""
    attributes = boto3.client("sqs", region_name=REGION).get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"])


def send(url: str, body: str) -> None:
    boto3.client("sqs", region_name=REGION).send_message(QueueUrl=url, MessageBody=body)


def launch(provider: AwsProvider, name: str = "trainer") -> InstanceId:
    pod = make_pod(name)
    return provider.provision(pod, request_for(pod)).instance_id


def ec2_id(instance_id: str) -> str:
    return instance_id.split("/")[1]


SOURCE = {
    NoticeKind.SPOT_INTERRUPTION: notices.SPOT,
    NoticeKind.REBALANCE: notices.REBALANCE,
    NoticeKind.MAINTENANCE: notices.HEALTH,
    NoticeKind.STOPPING: notices.STATE_CHANGE,
}


def detail_of(kind: NoticeKind, ids: list[str], **extra: Any) -> dict[str, Any]:
    """The `detail` EventBridge carries for `kind` about `ids` (AWS's schemas, version 0)."""
    if kind is NoticeKind.MAINTENANCE:
        return {
            "eventArn": f"arn:aws:health:{REGION}::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/x",
            "service": "EC2",
            "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
            "eventTypeCategory": "scheduledChange",
            "startTime": "Mon, 07 Dec 2026 11:00:00 GMT",
            "eventDescription": [{"language": "en_US", "latestDescription": "EC2 has detected degradation"}],
            "affectedEntities": [{"entityValue": one} for one in ids],
        } | extra
    if kind is NoticeKind.SPOT_INTERRUPTION:
        return {"instance-id": ids[0], "instance-action": "terminate"} | extra
    if kind is NoticeKind.STOPPING:
        return {"instance-id": ids[0], "state": "shutting-down"} | extra
    return {"instance-id": ids[0]} | extra


def envelope(kind: NoticeKind, ids: list[str], *, event_id: str | None = None, **extra: Any) -> str:
    """The message body EventBridge puts on the queue for `kind` about the EC2 `ids`."""
    source, detail_type = SOURCE[kind]
    return json.dumps(
        {
            "version": "0",
            "id": event_id or str(uuid.uuid4()),
            "detail-type": detail_type,
            "source": source,
            "account": "123456789012",
            "time": ISSUED.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": REGION,
            "resources": [f"arn:aws:ec2:{REGION}:123456789012:instance/{one}" for one in ids],
            "detail": detail_of(kind, ids, **extra),
        }
    )


EXPECTED = {
    NoticeKind.SPOT_INTERRUPTION: (
        ISSUED + timedelta(minutes=2),
        "EC2 Spot Instance Interruption Warning: instance-action terminate at 2026-12-05T10:02:00+00:00",
    ),
    NoticeKind.REBALANCE: (None, "EC2 Instance Rebalance Recommendation at 2026-12-05T10:00:00+00:00"),
    NoticeKind.MAINTENANCE: (
        datetime(2026, 12, 7, 11, 0, tzinfo=UTC),
        "AWS Health Event: AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED starting 2026-12-07T11:00:00+00:00",
    ),
    NoticeKind.STOPPING: (None, "EC2 Instance State-change Notification: shutting-down at 2026-12-05T10:00:00+00:00"),
}


# -- the four kinds ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(NoticeKind))
def test_each_kind_on_the_queue_is_a_notice_for_our_instance_and_ack_deletes_it(aws: None, kind: NoticeKind) -> None:
    url = make_queue()
    provider = make_provider(interruption_queue=url)
    assert isinstance(provider, NoticeSource)
    ours = launch(provider)
    event_id = str(uuid.uuid4())
    send(url, envelope(kind, [ec2_id(ours)], event_id=event_id))

    (notice,) = provider.notices(0)

    deadline, detail = EXPECTED[kind]
    want_id = event_id if kind is not NoticeKind.MAINTENANCE else f"{event_id}/{ec2_id(ours)}"
    assert (notice.id, notice.instance_id, notice.kind) == (want_id, ours, kind)
    assert (notice.issued_at, notice.deadline, notice.detail) == (ISSUED, deadline, detail)
    assert notice.receipt and on_queue(url) == 1
    provider.ack(notice)
    assert on_queue(url) == 0 and provider.notices(0) == []
    provider.ack(notice)  # idempotent: the message is gone already


def test_a_spot_warning_naming_its_action_time_takes_that_as_its_deadline(aws: None) -> None:
    url = make_queue()
    provider = make_provider(interruption_queue=url)
    ours = launch(provider)
    send(
        url, envelope(NoticeKind.SPOT_INTERRUPTION, [ec2_id(ours)], **{"instance-action-time": "2026-12-05T10:01:30Z"})
    )
    (notice,) = provider.notices(0)
    assert notice.deadline == datetime(2026, 12, 5, 10, 1, 30, tzinfo=UTC)


def test_a_health_event_gives_one_notice_per_instance_and_its_message_goes_with_the_last_ack(aws: None) -> None:
    url = make_queue()
    provider = make_provider(interruption_queue=url)
    first, second = launch(provider, "a"), launch(provider, "b")
    send(url, envelope(NoticeKind.MAINTENANCE, [ec2_id(first), ec2_id(second), OTHER_ACCOUNT_INSTANCE]))

    found = provider.notices(0)

    assert sorted(notice.instance_id for notice in found) == sorted([first, second])
    assert len({notice.id for notice in found}) == 2 and len({notice.receipt for notice in found}) == 1
    provider.ack(found[0])
    assert on_queue(url) == 1  # the other instance's notice is not handled yet
    provider.ack(found[1])
    assert on_queue(url) == 0


def test_a_batch_checks_ownership_with_one_describe_instances_per_region(aws: None) -> None:
    url = make_queue()
    provider = make_provider(interruption_queue=url)
    ours = [launch(provider, f"p{n}") for n in range(3)]
    for kind, instance in zip(
        [NoticeKind.SPOT_INTERRUPTION, NoticeKind.REBALANCE, NoticeKind.STOPPING], ours, strict=True
    ):
        send(url, envelope(kind, [ec2_id(instance)]))
    assert wait_for(lambda: on_queue(url) == 3, what="three messages queued")
    calls = count_calls(provider)
    receives: list[str] = []
    sqs_client = provider._notices._queue._connect()  # type: ignore[union-attr]
    sqs_client.meta.events.register("before-call.sqs.ReceiveMessage", lambda **_: receives.append("r"))
    found: list[Notice] = []

    def read() -> bool:
        found.extend(provider.notices(0))
        return len(found) == 3

    wait_for(read, timeout=10, what="three notices")
    assert sorted(n.instance_id for n in found) == sorted(ours)
    # One DescribeInstances per receive that brought messages (SQS may split a batch over receives).
    assert 1 <= calls["DescribeInstances"] <= len(receives)


def test_an_instance_shutting_itself_down_is_its_workloads_end_not_a_notice(aws: None) -> None:
    url = make_queue()
    provider = make_provider(interruption_queue=url)
    ours = launch(provider)
    set_state(ours, "shutting-down", reason=SHUTDOWN)  # user-data powered off after the workload
    send(url, envelope(NoticeKind.STOPPING, [ec2_id(ours)]))
    assert provider.notices(0) == [] and on_queue(url) == 0


def test_an_instance_ec2_terminated_is_still_ours_while_ec2_shows_it(aws: None) -> None:
    url = make_queue()
    provider = make_provider(interruption_queue=url)
    ours = launch(provider)
    set_state(ours, "terminated", reason=SPOT_RECLAIM)
    send(url, envelope(NoticeKind.STOPPING, [ec2_id(ours)], state="terminated"))
    (notice,) = provider.notices(0)
    assert notice.instance_id == ours and notice.detail.startswith("EC2 Instance State-change Notification: terminated")


def test_a_terminate_nebula_asked_for_is_no_notice(aws: None) -> None:
    url = make_queue()
    provider = make_provider(interruption_queue=url)
    ours = launch(provider)
    provider.terminate(ours)  # EC2's StateReason: Client.UserInitiatedShutdown
    send(url, envelope(NoticeKind.STOPPING, [ec2_id(ours)], state="shutting-down"))
    assert provider.notices(0) == [] and on_queue(url) == 0


# -- redelivery, junk and other owners -------------------------------------------------------------


def test_a_notice_not_acked_comes_back_after_its_visibility_timeout_with_the_same_id(
    aws: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import moto.sqs.models

    clock = [moto.sqs.models.unix_time_millis()]  # moto's SQS clock, moved by hand (no race with load)
    monkeypatch.setattr(moto.sqs.models, "unix_time_millis", lambda: clock[0])
    url = make_queue()
    provider = make_provider(interruption_queue=url, interruption_visibility=60)
    ours = launch(provider)
    send(url, envelope(NoticeKind.SPOT_INTERRUPTION, [ec2_id(ours)]))
    (first,) = provider.notices(0)
    clock[0] += 59_000
    assert provider.notices(0) == []  # hidden while its visibility timeout runs

    clock[0] += 2_000
    again = provider.notices(0)

    assert [notice.id for notice in again] == [first.id]
    provider.ack(again[0])
    assert on_queue(url) == 0


def test_junk_and_other_owners_notices_are_deleted_and_yield_nothing(
    aws: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = make_queue()
    alpha, beta = make_provider("alpha", interruption_queue=url), make_provider("beta")
    theirs = launch(beta)
    secret = "hunter2-not-for-logs"
    send(url, f"not json {secret}")
    send(url, json.dumps({"source": "aws.s3", "detail-type": "Object Created", "id": "x", "detail": {"k": secret}}))
    send(url, envelope(NoticeKind.SPOT_INTERRUPTION, [ec2_id(theirs)]))
    send(url, envelope(NoticeKind.REBALANCE, [OTHER_ACCOUNT_INSTANCE]))  # EC2 knows no such instance
    send(url, envelope(NoticeKind.STOPPING, [ec2_id(theirs)], state="running"))  # no interruption

    assert wait_for(lambda: on_queue(url) == 5, what="five messages queued")
    assert alpha.notices(0) == []

    assert on_queue(url) == 0
    deleted = [r.getMessage() for r in caplog.records if "interruption queue: deleted" in r.getMessage()]
    assert len(deleted) == 5
    assert all(secret not in line and len(line) < 300 for line in deleted)


def test_a_body_over_256_kib_is_not_parsed() -> None:
    body = envelope(NoticeKind.REBALANCE, [OTHER_ACCOUNT_INSTANCE])[:-1] + ', "pad": "' + "x" * 262_144 + '"}'
    with pytest.raises(notices.Unparseable, match="longer than"):
        notices.parse_event(body)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("[1, 2]", "not an EventBridge event"),
        (
            json.dumps({"source": "aws.ec2", "detail-type": "EC2 Spot Instance Interruption Warning", "detail": {}}),
            "not an event of the four",
        ),
        (envelope(NoticeKind.SPOT_INTERRUPTION, ["i-nothex"]), "no instance-id"),
        (envelope(NoticeKind.MAINTENANCE, [OTHER_ACCOUNT_INSTANCE], startTime="soon"), "startTime is no time"),
        (envelope(NoticeKind.MAINTENANCE, [OTHER_ACCOUNT_INSTANCE], affectedEntities=5), "affectedEntities is no list"),
        ("[" * 100_000, "not JSON"),
    ],
)
def test_malformed_events_are_unparseable(body: str, why: str) -> None:
    with pytest.raises(notices.Unparseable, match=why):
        notices.parse_event(body)


def test_events_of_a_watched_type_that_announce_no_interruption_parse_to_none() -> None:
    other_service = envelope(NoticeKind.MAINTENANCE, [OTHER_ACCOUNT_INSTANCE], service="RDS")
    issue = envelope(NoticeKind.MAINTENANCE, [OTHER_ACCOUNT_INSTANCE], eventTypeCategory="issue")
    running = envelope(NoticeKind.STOPPING, [OTHER_ACCOUNT_INSTANCE], state="running")
    assert [notices.parse_event(body) for body in (other_service, issue, running)] == [None, None, None]


# -- EventBridge, the queue's absence, the template ------------------------------------------------


def template_rules() -> dict[str, dict[str, Any]]:
    resources = yaml.safe_load(TEMPLATE.read_text())["Resources"]
    return {name: r["Properties"] for name, r in resources.items() if r["Type"] == "AWS::Events::Rule"}


def test_events_routed_by_the_templates_rules_through_eventbridge_reach_the_provider(aws: None) -> None:
    url = make_queue()
    sqs = boto3.client("sqs", region_name=REGION)
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events = boto3.client("events", region_name=REGION)
    for name, rule in template_rules().items():
        events.put_rule(Name=name, EventPattern=json.dumps(rule["EventPattern"]))
        events.put_targets(Rule=name, Targets=[{"Id": "queue", "Arn": arn}])
    provider = make_provider(interruption_queue="nebula-interruptions")  # by name: GetQueueUrl
    ours = launch(provider)
    entries = []
    for kind in NoticeKind:
        body = json.loads(envelope(kind, [ec2_id(ours)]))
        entries.append(
            {
                "Source": body["source"],
                "DetailType": body["detail-type"],
                "Detail": json.dumps(body["detail"]),
                "Resources": body["resources"],
                "Time": ISSUED,
            }
        )
    quiet = json.loads(envelope(NoticeKind.STOPPING, [ec2_id(ours)], state="pending"))  # no rule matches it
    entries.append({"Source": "aws.ec2", "DetailType": quiet["detail-type"], "Detail": json.dumps(quiet["detail"])})
    put = events.put_events(Entries=entries)
    assert put["FailedEntryCount"] == 0
    assert wait_for(lambda: on_queue(url) == 4, what="four events routed")  # the state `pending` matched no rule

    found: dict[NoticeKind, Notice] = {}

    def read() -> bool:
        found.update((notice.kind, notice) for notice in provider.notices(0))
        return len(found) == 4

    wait_for(read, timeout=10, what="the four notices through EventBridge")
    assert all(notice.instance_id == ours for notice in found.values())
    sent_ids = [entry["EventId"] for entry in put["Entries"]]
    assert found[NoticeKind.SPOT_INTERRUPTION].id == sent_ids[0]
    assert found[NoticeKind.MAINTENANCE].id == f"{sent_ids[2]}/{ec2_id(ours)}"
    for notice in found.values():
        provider.ack(notice)
    assert on_queue(url) == 0


@pytest.mark.parametrize("queue", ["nebula-missing", f"https://sqs.{REGION}.amazonaws.com/123456789012/nebula-missing"])
def test_a_queue_that_does_not_exist_is_unavailable_naming_the_option(aws: None, queue: str) -> None:
    provider = make_provider(interruption_queue=queue)
    with pytest.raises(errors.Unavailable, match="aws option 'interruption_queue'.*nebula-missing.*does not exist"):
        provider.notices(0)


def test_without_a_queue_notices_is_an_empty_long_poll(aws: None) -> None:
    waited: list[float] = []
    options = parse_options({"ami": AMI})
    provider = make_provider()
    reader = notices.NoticeReader(provider._ec2, options, Owner("c", "aws"), list, sleep=waited.append)
    assert reader.notices(2.5) == [] and waited == [2.5]
    assert provider.notices(0) == []  # and the provider says nothing without asking AWS


def test_the_templates_rules_cover_exactly_the_four_kinds_and_target_the_queue() -> None:
    template = yaml.safe_load(TEMPLATE.read_text())
    rules = template_rules()
    pairs = {(p["EventPattern"]["source"][0], p["EventPattern"]["detail-type"][0]) for p in rules.values()}
    assert pairs == set(notices.EVENT_TYPES) and len(rules) == 4
    assert all(p["Targets"][0]["Arn"] == {"Fn::GetAtt": ["InterruptionQueue", "Arn"]} for p in rules.values())
    patterns = {
        (p["EventPattern"]["source"][0], p["EventPattern"]["detail-type"][0]): p["EventPattern"] for p in rules.values()
    }
    assert set(patterns[notices.STATE_CHANGE]["detail"]["state"]) == notices.STOPPING_STATES
    assert patterns[notices.HEALTH]["detail"] == {"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]}
    statement = template["Resources"]["InterruptionQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"][0]
    assert statement["Action"] == "sqs:SendMessage"
    assert set(statement["Principal"]["Service"]) == {"events.amazonaws.com", "sqs.amazonaws.com"}


# -- errors and options -----------------------------------------------------------------------------


def sqs_fails(provider: AwsProvider, operation: str, exc: Exception) -> None:
    client = provider._notices._queue._connect()  # type: ignore[union-attr]

    def raiser(**_: Any) -> Any:
        raise exc

    setattr(client, operation, raiser)


def sqs_error(code: str, status: int = 400) -> Exception:
    return boto_errors.ClientError(
        {"Error": {"Code": code, "Message": "refused"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "ReceiveMessage",
    )


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (sqs_error("ServiceUnavailable", 503), errors.Unavailable),
        (sqs_error("RequestThrottled"), errors.Unavailable),
        (sqs_error("AccessDenied", 403), errors.Unauthorized),
        (boto_errors.EndpointConnectionError(endpoint_url="https://sqs"), errors.Unavailable),
        (boto_errors.NoCredentialsError(), errors.Unauthorized),
    ],
)
def test_sqs_errors_translate_as_the_providers_ec2_errors_do(aws: None, exc: Exception, expected: type) -> None:
    url = make_queue()
    provider = make_provider(interruption_queue=url)
    ours = launch(provider)
    send(url, envelope(NoticeKind.SPOT_INTERRUPTION, [ec2_id(ours)]))
    (notice,) = provider.notices(0)
    sqs_fails(provider, "receive_message", exc)
    sqs_fails(provider, "delete_message", exc)
    with pytest.raises(expected) as caught:
        provider.notices(0)
    assert str(caught.value).startswith("SQS receive_message in us-east-1") or "credentials" in str(caught.value)
    with pytest.raises(expected):
        provider.ack(notice)


def test_ack_of_a_receipt_sqs_no_longer_takes_is_success(aws: None) -> None:
    url = make_queue()
    provider = make_provider(interruption_queue=url)
    ours = launch(provider)
    stale = Notice("e", ours, NoticeKind.REBALANCE, ISSUED, receipt="not-a-receipt-handle")
    provider.ack(stale)  # SQS says ReceiptHandleIsInvalid: nothing left to delete


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"interruption_queue": ""}, "interruption_queue"),
        ({"interruption_queue": 7}, "interruption_queue"),
        ({"interruption_visibility": 1.5}, "whole seconds"),
        ({"interruption_visibility": 50_000}, "whole seconds"),
    ],
)
def test_bad_interruption_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_options({"ami": AMI, **options})


def test_the_queue_may_be_named_by_its_arn(aws: None) -> None:
    url = make_queue()
    provider = make_provider(interruption_queue=f"arn:aws:sqs:{REGION}:123456789012:nebula-interruptions")
    ours = launch(provider)
    send(url, envelope(NoticeKind.REBALANCE, [ec2_id(ours)]))
    (notice,) = provider.notices(0)
    assert notice.kind is NoticeKind.REBALANCE and notice.deadline is None
