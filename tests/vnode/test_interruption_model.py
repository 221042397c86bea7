"""The interruption model (vnode/model/interruption.py): the record a Pod keeps of a notice,
the grace of an interrupted Pod, and the status it ends with."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kube import names
from providers.base import InstanceId, Notice, NoticeKind
from vnode.model.interruption import (
    MAX_RECORD,
    SHUTDOWN_MESSAGE,
    grace_for,
    noted,
    noted_on,
    record_of,
)
from vnode.model.stopping import disrupted_status

AT = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
NOTICE = Notice(
    "evt-1", InstanceId("i-0abc"), NoticeKind.SPOT_INTERRUPTION, AT, deadline=AT + timedelta(minutes=2),
    detail="EC2 Spot Instance Interruption Warning: terminate", receipt="secret-receipt-handle",
)  # fmt: skip


def pod_with(record: str) -> dict[str, Any]:
    return {"metadata": {"annotations": {names.INTERRUPTION_ANNOTATION: record}}}


def test_the_record_on_the_pod_reads_back_as_the_notice_without_its_receipt() -> None:
    value = noted(NOTICE, "aws")
    record = record_of(value)
    assert "secret-receipt-handle" not in record  # the queue's handle is the provider's, never the Pod's
    assert noted_on(pod_with(record)) == value
    assert value.reason == names.REASON_SPOT_INTERRUPTED


@pytest.mark.parametrize(
    "record",
    ["", "{", "[]", '{"kind": "Nope", "id": "x", "issuedAt": "2026-12-05T12:00:00Z"}',
     '{"kind": "SpotInterruption", "id": "x"}', '{"kind": "SpotInterruption", "id": "x", "issuedAt": "yesterday"}',
     '{"kind": "SpotInterruption", "id": "x", "issuedAt": "2026-12-05T12:00:00Z", "deadline": 7}',
     "x" * (MAX_RECORD + 1)],
)  # fmt: skip
def test_a_record_that_does_not_read_is_ignored_never_acted_on(record: str) -> None:
    assert noted_on(pod_with(record)) is None


def test_the_grace_is_the_smaller_of_the_pods_and_the_time_left_never_negative() -> None:
    value = noted(NOTICE, "aws")
    assert grace_for(30.0, value, AT) == 30.0
    assert grace_for(600.0, value, AT) == 120.0
    assert grace_for(600.0, value, AT + timedelta(seconds=100)) == 20.0
    assert grace_for(30.0, value, AT + timedelta(minutes=5)) == 0.0
    stopping = noted(Notice("e", InstanceId("i"), NoticeKind.STOPPING, AT), "aws")
    assert grace_for(45.0, stopping, AT) == 45.0  # no deadline named: the Pod's own


def test_an_interrupted_pod_ends_failed_as_a_graceful_node_shutdown_ends_it_with_its_cause_as_reason() -> None:
    value = noted(NOTICE, "aws")
    running = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-05T11:00:00Z"}],
        "containerStatuses": [{"name": "main", "ready": True}],
    }
    now = "2026-12-05T12:00:01Z"
    ended = disrupted_status(running, reason=value.reason, message=value.message(), now=now)
    assert (ended["phase"], ended["reason"]) == ("Failed", "SpotInterrupted")
    assert ended["message"].startswith(SHUTDOWN_MESSAGE) and "i-0abc" in ended["message"]
    assert "2026-12-05T12:02:00Z" in ended["message"] and "aws gave notice of a spot interruption" in ended["message"]
    target = next(c for c in ended["conditions"] if c["type"] == "DisruptionTarget")
    assert (target["status"], target["reason"]) == ("True", "TerminationByKubelet")
    assert target["message"] == ended["message"]
    ready = next(c for c in ended["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PodFailed")
    assert ended["containerStatuses"][0]["ready"] is False
    again = disrupted_status(ended, reason=value.reason, message=value.message(), now="2026-12-05T12:05:00Z")
    assert again == ended  # applied again, nothing moves (no status write, no moved transition time)
