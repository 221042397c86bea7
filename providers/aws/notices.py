"""EC2's interruption notices as `providers.notices.Notice`s: EventBridge events read from the
SQS queue of the `interruption_queue` option, parsed by `source` and `detail-type`, kept only
for this owner's instances, and acked by deleting their message.

Called by `AwsProvider.notices`/`ack`. `parse_event` is pure; `NoticeReader` does the I/O, SQS
through `sqs`, the ownership check through `ec2` (one DescribeInstances per region per batch,
filtered by the owner tags, so a terminated instance EC2 still shows counts). A message it
cannot parse, or about no instance of this owner, is deleted at once and logged by its ids
only, never its body. Without a queue, `notices` is an empty long poll (it waits, says nothing).
Tests: tests/providers/aws/test_aws_notices.py.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from providers.aws import status
from providers.aws.ec2 import Ec2
from providers.aws.options import AwsOptions
from providers.aws.sqs import InterruptionQueue
from providers.notices import Notice, NoticeKind
from providers.owner import Owner

logger = logging.getLogger(__name__)

MAX_BODY = 256 * 1024  # bytes: SQS's largest message; a longer body is not parsed
SPOT_WARNING = timedelta(minutes=2)  # EC2 reclaims a spot instance two minutes after its warning
SPOT = ("aws.ec2", "EC2 Spot Instance Interruption Warning")
REBALANCE = ("aws.ec2", "EC2 Instance Rebalance Recommendation")
HEALTH = ("aws.health", "AWS Health Event")
STATE_CHANGE = ("aws.ec2", "EC2 Instance State-change Notification")
# (source, detail-type) -> kind: the four EventBridge rules of deploy/aws/interruption-queue.yaml.
EVENT_TYPES: Mapping[tuple[str, str], NoticeKind] = {
    SPOT: NoticeKind.SPOT_INTERRUPTION,
    REBALANCE: NoticeKind.REBALANCE,
    HEALTH: NoticeKind.MAINTENANCE,
    STATE_CHANGE: NoticeKind.STOPPING,
}
STOPPING_STATES = frozenset({"stopping", "stopped", "shutting-down", "terminated"})
# A state change the account caused is no notice: the VM powering itself off is the workload's
# own end (user-data shuts down after it, `terminate_on_exit`; its exit comes from the console),
# and a stop or terminate through the API is Nebula's own (or someone's in the account: `list`
# shows it). EC2's own (Server.*: a spot reclaim, a scheduled stop) or an unknown reason is one.
ACCOUNT_SHUTDOWN_REASONS = frozenset({"Client.InstanceInitiatedShutdown", "Client.UserInitiatedShutdown"})
_EC2_ID = re.compile(r"^i-[0-9a-f]{8,17}$")
_REGION = re.compile(r"^[a-z]{2}(?:-[a-z]+)+-\d$")
_LOG_CUT = 80
_FILTER_VALUES = 200  # values one DescribeInstances filter takes
_FORGET_AFTER = 2  # visibility timeouts: a receipt older than this has been handed out again


class Unparseable(ValueError):
    """A message body that is no EventBridge event this module reads."""


@dataclass(frozen=True)
class Event:
    """One EventBridge event that announces an interruption of `ec2_ids` in `region`."""

    id: str
    kind: NoticeKind
    region: str
    ec2_ids: tuple[str, ...]
    issued_at: datetime
    deadline: datetime | None
    detail: str


def _time(value: Any, what: str) -> datetime:
    """An ISO 8601 time (EventBridge's `time`) or an RFC 1123 one (AWS Health's `startTime`)."""
    if not isinstance(value, str) or not value:
        raise Unparseable(f"no {what}")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        try:
            parsed = parsedate_to_datetime(value)
        except (TypeError, ValueError) as exc:
            raise Unparseable(f"{what} is no time") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _instance(detail: Mapping[str, Any]) -> str:
    ec2_id = detail.get("instance-id")
    if not isinstance(ec2_id, str) or not _EC2_ID.match(ec2_id):
        raise Unparseable("no instance-id")
    return ec2_id


def parse_event(body: str) -> Event | None:
    """The interruption `body` announces; None for an event of a watched type that announces
    none (another service's health event, a state that takes nothing). Unparseable: not JSON,
    too long, not an EventBridge event, or of a type no rule sends."""
    if len(body) > MAX_BODY or len(body.encode(errors="replace")) > MAX_BODY:
        raise Unparseable(f"body longer than {MAX_BODY} bytes")
    try:
        event = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise Unparseable("not JSON") from exc
    if not isinstance(event, dict) or not isinstance(event.get("detail"), dict):
        raise Unparseable("not an EventBridge event")
    key = (event.get("source"), event.get("detail-type"))
    kind = EVENT_TYPES.get(key)  # type: ignore[arg-type]
    event_id, region = event.get("id"), event.get("region")
    if kind is None or not isinstance(event_id, str) or not event_id or not isinstance(region, str):
        raise Unparseable("not an event of the four the rules send")
    if not _REGION.match(region):
        raise Unparseable("no region")
    detail: dict[str, Any] = event["detail"]
    issued = _time(event.get("time"), "time")
    name = key[1]
    if kind is NoticeKind.MAINTENANCE:
        return _scheduled_change(event_id, region, issued, detail)
    one = (_instance(detail),)
    if kind is NoticeKind.SPOT_INTERRUPTION:
        action = str(detail.get("instance-action") or "terminate")[:_LOG_CUT]
        said = detail.get("instance-action-time")
        deadline = _time(said, "instance-action time") if said else issued + SPOT_WARNING
        text = f"{name}: instance-action {action} at {deadline.isoformat()}"
        return Event(event_id, kind, region, one, issued, deadline, text)
    if kind is NoticeKind.REBALANCE:
        return Event(event_id, kind, region, one, issued, None, f"{name} at {issued.isoformat()}")
    state = str(detail.get("state") or "").lower()
    if state not in STOPPING_STATES:
        return None
    return Event(event_id, kind, region, one, issued, None, f"{name}: {state} at {issued.isoformat()}")


def _scheduled_change(event_id: str, region: str, issued: datetime, detail: Mapping[str, Any]) -> Event | None:
    """An AWS Health event: EC2's scheduled changes only, about each affected instance."""
    if detail.get("service") != "EC2" or detail.get("eventTypeCategory") != "scheduledChange":
        return None
    entities = detail.get("affectedEntities") or []
    if not isinstance(entities, list):
        raise Unparseable("affectedEntities is no list")
    values = (entity.get("entityValue") for entity in entities if isinstance(entity, dict))
    ids = tuple(dict.fromkeys(value for value in values if isinstance(value, str) and _EC2_ID.match(value)))
    start = _time(detail.get("startTime"), "startTime")
    code = str(detail.get("eventTypeCode") or "scheduled change")[:_LOG_CUT]
    text = f"{HEALTH[1]}: {code} starting {start.isoformat()}"
    return Event(event_id, NoticeKind.MAINTENANCE, region, ids, issued, start, text)


def notice_id(event: Event, ec2_id: str) -> str:
    """The event's id; a health event about several instances names each notice by its instance."""
    return event.id if event.kind is not NoticeKind.MAINTENANCE else f"{event.id}/{ec2_id}"


class NoticeReader:
    """`notices`/`ack` of one provider: its queue (None: no notices), its owner's instances."""

    def __init__(
        self,
        ec2: Ec2,
        options: AwsOptions,
        owner: Owner,
        filters: Callable[[], list[dict[str, Any]]],
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ec2 = ec2
        self._options = options
        self._owner = owner
        self._filters = filters  # the owner-tag filters of `Inventory.filters`
        self._sleep = sleep
        self._clock = clock
        queue = options.interruption_queue
        self._queue = InterruptionQueue(options, queue) if queue else None
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[set[str], float]] = {}  # receipt -> notices not acked, read at

    def notices(self, wait: float) -> list[Notice]:
        """One ReceiveMessage; each message parsed, checked against this owner's instances, and
        deleted at once when it says nothing about them. Unavailable: SQS or EC2 not asked."""
        if self._queue is None:
            self._sleep(max(0.0, wait))
            return []
        messages = self._queue.receive(wait, visibility=self._options.interruption_visibility)
        events: list[tuple[dict[str, Any], Event]] = []
        for message in messages:
            event = self._parse(message)
            if event is not None:
                events.append((message, event))
        owned = self._owned(events)
        result: list[Notice] = []
        for message, event in events:
            receipt = str(message["ReceiptHandle"])
            found = [
                self._notice(event, ec2_id, receipt)
                for ec2_id in event.ec2_ids
                if (event.region, ec2_id) in owned and self._interrupts(event, owned[(event.region, ec2_id)])
            ]
            if not found:
                _tell(message, event.kind.value, "about no instance of this owner")
                self._queue.delete(receipt)
                continue
            with self._lock:
                self._pending[receipt] = ({notice.id for notice in found}, self._clock())
            result.extend(found)
        self._forget_stale()
        return result

    def ack(self, notice: Notice) -> None:
        """Delete the notice's message once every notice it carried is acked (idempotent). A receipt
        this reader no longer holds deletes nothing: the message comes again, and the ack of that
        delivery deletes it (a Health event's other instances are never lost with it)."""
        if self._queue is None or not notice.receipt:
            return
        with self._lock:
            held = self._pending.get(notice.receipt)
            if held is None:  # forgotten, or already deleted: a later delivery's receipt deletes it
                return
            held[0].discard(notice.id)
            if held[0]:
                return
            del self._pending[notice.receipt]
        self._queue.delete(notice.receipt)

    def _parse(self, message: dict[str, Any]) -> Event | None:
        """The message's event; a message that announces none is deleted here."""
        assert self._queue is not None
        body = message.get("Body")
        try:
            event = parse_event(body if isinstance(body, str) else "")
        except Exception as exc:  # noqa: BLE001 - a body no check foresaw is junk too, never a poison message
            why = str(exc) if isinstance(exc, Unparseable) else type(exc).__name__
            _tell(message, "", f"unparseable ({why})", warn=True)
            self._queue.delete(str(message["ReceiptHandle"]))
            return None
        if event is None:
            _tell(message, "", "announces no interruption")
            self._queue.delete(str(message["ReceiptHandle"]))
        return event

    def _owned(self, events: Sequence[tuple[dict[str, Any], Event]]) -> dict[tuple[str, str], dict[str, Any]]:
        """(region, EC2 id) -> EC2 data of the instances in `events` that are this owner's:
        one DescribeInstances per region (filters, so an id EC2 forgot is no error)."""
        wanted: dict[str, set[str]] = {}
        for _, event in events:
            if event.region in self._options.regions:
                wanted.setdefault(event.region, set()).update(event.ec2_ids)
        owned: dict[tuple[str, str], dict[str, Any]] = {}
        for region, ids in wanted.items():
            ordered = sorted(ids)
            chunks = [ordered[at : at + _FILTER_VALUES] for at in range(0, len(ordered), _FILTER_VALUES)]
            pages = [
                page
                for chunk in chunks
                for page in self._ec2.pages(
                    region, "describe_instances", Filters=[*self._filters(), {"Name": "instance-id", "Values": chunk}]
                )
            ]
            for page in pages:
                for reservation in page.get("Reservations") or ():
                    for data in reservation.get("Instances") or ():
                        if status.is_owned(data, self._owner.key):
                            owned[(region, str(data["InstanceId"]))] = data
        return owned

    @staticmethod
    def _interrupts(event: Event, data: dict[str, Any]) -> bool:
        if event.kind is not NoticeKind.STOPPING:
            return True
        return str((data.get("StateReason") or {}).get("Code") or "") not in ACCOUNT_SHUTDOWN_REASONS

    @staticmethod
    def _notice(event: Event, ec2_id: str, receipt: str) -> Notice:
        return Notice(
            id=notice_id(event, ec2_id),
            instance_id=status.instance_id(event.region, ec2_id),
            kind=event.kind,
            issued_at=event.issued_at,
            deadline=event.deadline,
            detail=event.detail,
            receipt=receipt,
        )

    def _forget_stale(self) -> None:
        """Receipts SQS has handed out again (their visibility passed) are no use to `ack`."""
        horizon = self._clock() - _FORGET_AFTER * self._options.interruption_visibility
        with self._lock:
            for receipt in [r for r, (_, at) in self._pending.items() if at < horizon]:
                del self._pending[receipt]


def _tell(message: dict[str, Any], kind: str, why: str, *, warn: bool = False) -> None:
    """One bounded log line about a deleted message: its SQS id and why, never its body (a
    warning for junk; debug for the rest: a shared account's state changes are many)."""
    message_id = str(message.get("MessageId") or "?")[:_LOG_CUT]
    what = f" ({kind})" if kind else ""
    (logger.warning if warn else logger.debug)(
        "interruption queue: deleted message %s%s: %s", message_id, what, why[:_LOG_CUT]
    )
