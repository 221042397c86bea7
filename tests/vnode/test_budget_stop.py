"""The budget stop (vnode.phases.lifecycle, vnode.model.stopping): a Pod annotated
`nebula.io/stop-reason: BudgetExceeded` is stopped through the one stop path, its preStop hook
before the SIGTERM, `Failed/BudgetExceeded` with the annotation's message and `DisruptionTarget`
(as a kubelet marks a Pod it ends for the node's sake), a Warning Event, its instance terminated.
Another reason is ignored and logged once; a Pod already terminal is left alone. Over the
devcluster, within the grace and across a restart: tests/vnode/test_budget_stop_devcluster.py."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest

from kube import names
from providers.fake import FakeProvider
from tests.support.factories import make_pod
from tests.support.polling import wait_for
from tests.support.rigs.offline import adopt_provisioned, kept_fake_handler
from vnode.handler import Handler
from vnode.model import stopping

WHY = "pool gpu-a spent $300.12 today of $300.00 (UTC day)"
RUNNING = {
    "phase": "Running",
    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-05T01:00:00Z"}],
    "containerStatuses": [{"name": "main", "ready": True, "state": {"running": {}}}],
}


def test_a_budget_status_reads_failed_budget_exceeded_not_ready_with_the_kubelets_disruption_target() -> None:
    stopped = stopping.budget_status(RUNNING, message=WHY, now="2026-12-05T01:00:05Z")
    assert (stopped["phase"], stopped["reason"], stopped["message"]) == ("Failed", "BudgetExceeded", WHY)
    disruption, ready = stopped["conditions"]
    assert (disruption["type"], disruption["status"], disruption["reason"]) == (
        "DisruptionTarget",
        "True",
        "TerminationByKubelet",
    )
    assert disruption["message"] == WHY
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "PodFailed")
    assert stopped["containerStatuses"][0]["ready"] is False
    assert stopping.budget_status(stopped, message=WHY, now="2026-12-05T02:00:00Z") == stopped  # nothing new


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({}, None),
        ({names.STOP_REASON_ANNOTATION: " "}, None),
        ({names.STOP_REASON_ANNOTATION: "BudgetExceeded"}, ("BudgetExceeded", stopping.BUDGET_MESSAGE)),
        ({names.STOP_REASON_ANNOTATION: "BudgetExceeded", names.STOP_MESSAGE_ANNOTATION: WHY}, ("BudgetExceeded", WHY)),
        ({names.STOP_REASON_ANNOTATION: "Other", names.STOP_MESSAGE_ANNOTATION: "x"}, ("Other", "x")),
        (
            {names.STOP_REASON_ANNOTATION: "BudgetExceeded", names.STOP_MESSAGE_ANNOTATION: "y" * 5000},
            ("BudgetExceeded", "y" * 997 + "..."),
        ),
    ],
    ids=["none", "blank", "no-message", "message", "other-reason", "bounded"],
)
def test_a_stop_is_asked_by_the_pods_annotations_its_message_bounded(
    annotations: dict[str, str], expected: tuple[str, str] | None
) -> None:
    assert stopping.stop_asked(make_pod(annotations=annotations)) == expected


def _adopt(handler: Handler, name: str, annotations: dict[str, str], **fields: Any) -> tuple[str, dict[str, Any]]:
    pod = make_pod(
        name, namespace="default", uid=str(uuid.uuid4()), command=("sleep", "300"), annotations=annotations, **fields
    )
    return adopt_provisioned(handler, pod, running=True), pod


def _calls(handler: Handler, *methods: str) -> list[str]:
    assert isinstance(handler.provider, FakeProvider)
    return [c.method for c in handler.provider.cloud.call_log() if c.method in methods]


def test_a_pod_annotated_budget_exceeded_is_stopped_after_its_pre_stop_hook_and_its_instance_terminated() -> None:
    handler, writes, events = kept_fake_handler("budget")
    asked = {names.STOP_REASON_ANNOTATION: "BudgetExceeded", names.STOP_MESSAGE_ANNOTATION: WHY}
    hook = {"preStop": {"exec": {"command": ["echo", "draining"]}}}
    key, pod = _adopt(handler, "over", asked, container={"lifecycle": hook}, status={"phase": "Running"})
    assert handler.lifecycle.step_due(key)
    wait_for(lambda: handler.lifecycle.carry_out(key, pod) is None, what="the budget stop carried out")
    statuses = [body["status"] for path, body in writes.patches if path.endswith("/status")]
    first, final = statuses[0], statuses[-1]
    for status in (first, final):
        assert (status["phase"], status["reason"], status["message"]) == ("Failed", "BudgetExceeded", WHY)
        target = [c for c in status["conditions"] if c["type"] == "DisruptionTarget"]
        assert [(c["status"], c["reason"], c["message"]) for c in target] == [("True", "TerminationByKubelet", WHY)]
    assert "terminated" in final["containerStatuses"][0]["state"]
    handler.flush(key, pod)  # the entry's own Events
    told = [(kind, reason, message) for _, kind, reason, message in events.told]
    assert ("Warning", "BudgetExceeded", WHY) in told
    assert _calls(handler, "exec", "stop_container", "terminate") == ["exec", "stop_container", "terminate"]
    entry = handler.tracked(key)
    assert entry is not None and handler.lifecycle.budget_stop(entry) is None  # carried out once
    assert not handler.lifecycle.step_due(key)


def test_another_stop_reason_is_ignored_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    handler, _, _ = kept_fake_handler("budget")
    key, pod = _adopt(handler, "other", {names.STOP_REASON_ANNOTATION: "Maintenance"}, status={"phase": "Running"})
    with caplog.at_level(logging.WARNING, logger="vnode.phases.lifecycle"):
        assert not handler.lifecycle.step_due(key)
        assert handler.lifecycle.carry_out(key, pod) is None
    assert len([r for r in caplog.records if "Maintenance" in r.getMessage()]) == 1
    assert _calls(handler, "exec", "stop_container", "terminate") == []


def test_a_pod_already_terminal_is_left_alone() -> None:
    """A Succeeded Pod asked to stop: no stop, no Failed status; its still billing instance is
    only released (terminated) as any finished Pod's is."""
    handler, writes, events = kept_fake_handler("budget")
    asked = {names.STOP_REASON_ANNOTATION: "BudgetExceeded"}
    key, pod = _adopt(handler, "done", asked, status={"phase": "Succeeded"})
    entry = handler.tracked(key)
    assert entry is not None and handler.lifecycle.budget_stop(entry) is None
    wait_for(lambda: handler.lifecycle.carry_out(key, pod) is None, what="the release")
    handler.flush(key, pod)
    assert _calls(handler, "exec", "stop_container") == []
    assert not [b for p, b in writes.patches if p.endswith("/status") and b["status"].get("reason") == "BudgetExceeded"]
    assert not [e for e in events.told if e[2] == "BudgetExceeded"]
