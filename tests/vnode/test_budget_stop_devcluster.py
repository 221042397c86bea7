"""The budget stop over the devcluster, with the fake cloud: a running Pod annotated
`nebula.io/stop-reason: BudgetExceeded` (as placement's spend book annotates it) ends `Failed`,
reason `BudgetExceeded`, the annotation's message and `DisruptionTarget=True`, after its preStop
hook and within its grace, with a Warning Event, and its instance terminated (I10); annotated
while no manager ran, a restarted Runner carries it out."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kube import names
from kube.client import Kube, path_for
from providers.base import InstanceId, InstanceState
from providers.fake import FakeProvider
from tests.support.factories import make_pod
from tests.support.pods import get_pod, phase_of
from tests.support.polling import wait_for
from vnode.runner import Runner

WHY = "pool gpu-a spent $300.12 today of $300.00 (UTC day)"
GRACE = 5
SLACK = 3.0  # seconds past the grace: a poll (0.2 s), the look after the SIGTERM, loaded CPUs


def status_of(kube: Kube, name: str) -> dict[str, Any]:
    return dict((get_pod(kube, name) or {}).get("status") or {})


def warnings(kube: Kube, name: str) -> list[str]:
    events, _ = kube.list(path_for("events", namespace="default"), fieldSelector=f"involvedObject.name={name}")
    return [e["message"] for e in events if (e.get("type"), e.get("reason")) == ("Warning", "BudgetExceeded")]


def running_pod(kube: Kube, name: str) -> str:
    hook = {"preStop": {"exec": {"command": ["echo", "draining"]}}}
    pod = make_pod(name, "gpu", container={"lifecycle": hook}, terminationGracePeriodSeconds=GRACE)
    kube.create(path_for("pods", namespace="default"), pod)
    wait_for(lambda: phase_of(kube, name) == "Running", what=f"{name} Running")
    return str((get_pod(kube, name) or {})["metadata"]["annotations"][names.INSTANCE_ID_ANNOTATION])


def ask_stop(kube: Kube, name: str) -> float:
    asked = {names.STOP_REASON_ANNOTATION: "BudgetExceeded", names.STOP_MESSAGE_ANNOTATION: WHY}
    kube.patch(path_for("pods", namespace="default", name=name), {"metadata": {"annotations": asked}})
    return time.time()


def check_stopped(kube: Kube, provider: FakeProvider, name: str, instance: str, asked_at: float) -> None:
    status = wait_for(
        lambda: (lambda s: s if s.get("phase") == "Failed" else None)(status_of(kube, name)), what=f"{name} Failed"
    )
    assert (status.get("reason"), status.get("message")) == ("BudgetExceeded", WHY)
    target = [c for c in status.get("conditions") or [] if c.get("type") == "DisruptionTarget"]
    assert [(c["status"], c["reason"], c["message"]) for c in target] == [("True", "TerminationByKubelet", WHY)]
    wait_for(lambda: warnings(kube, name) == [WHY], what="one Warning BudgetExceeded Event")
    facts = wait_for(
        lambda: (lambda i: i if i is not None and i.state is InstanceState.TERMINATED else None)(
            provider.get(InstanceId(instance))
        ),
        what=f"{name}'s instance terminated",
    )
    assert facts is not None
    calls = [c for c in provider.cloud.call_log() if c.method in ("exec", "stop_container", "terminate")]
    assert [c.method for c in calls] == ["exec", "stop_container", "terminate"]  # the preStop hook first
    assert calls[-1].at - asked_at <= GRACE + SLACK  # within its grace
    final = wait_for(
        lambda: (lambda s: s if "terminated" in (s.get("containerStatuses") or [{}])[0].get("state", {}) else None)(
            status_of(kube, name)
        ),
        10,
        what="the container's end written",
    )
    assert final["phase"] == "Failed" and final["reason"] == "BudgetExceeded"


def test_a_pod_annotated_budget_exceeded_ends_failed_with_disruption_target_after_its_pre_stop_hook_within_its_grace(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    start_runner(provider)
    instance = running_pod(kube, "over")
    check_stopped(kube, provider, "over", instance, ask_stop(kube, "over"))


def test_a_budget_stop_asked_while_no_manager_ran_is_carried_out_by_the_restarted_runner(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    first = start_runner(provider)
    instance = running_pod(kube, "later")
    assert first.stop(timeout=5) == []
    asked_at = ask_stop(kube, "later")
    start_runner(FakeProvider("gpu", {"cloud": cloud_name}))
    check_stopped(kube, provider, "later", instance, asked_at)
