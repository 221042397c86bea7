"""The "unreachable" cause (vnode/model/reachability.py): a provider that does not answer for
three poll intervals and more fails no Pod and terminates nothing (I3), and each of its Pods
says why in its `nebula.io/ProviderReachable` condition; once it answers, the condition turns
True and the Pods run on, never having read as interrupted or failed."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kube import names
from kube.client import Kube, path_for
from providers.fake import FakeProvider
from tests.support.factories import make_pod
from tests.support.pods import get_pod, phase_of
from tests.support.polling import wait_for
from vnode.model.reachability import MAX_ERROR, Reachability, with_reachability
from vnode.runner import Runner

POLL = 0.2  # the test runners' poll interval (tests/support/rigs/runners.py)


def reachable_condition(kube: Kube, name: str) -> dict[str, Any] | None:
    conditions = ((get_pod(kube, name) or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == names.POD_CONDITION_PROVIDER_REACHABLE), None)


def test_an_unreachable_provider_for_three_poll_intervals_fails_no_pod_terminates_nothing_and_the_pods_say_why(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    start_runner(provider)
    pods = ["steady-a", "steady-b"]
    for name in pods:
        kube.create(path_for("pods", namespace="default"), make_pod(name, "gpu"))
    for name in pods:
        wait_for(lambda name=name: phase_of(kube, name) == "Running", what=f"{name} runs")
    assert all(reachable_condition(kube, name) is None for name in pods)  # nothing to say while it answers

    cloud = provider.cloud
    failed_before = len([c for c in cloud.call_log("list") if not c.outcome.startswith("ok")])
    cloud.outage()
    for name in pods:
        said = wait_for(lambda name=name: reachable_condition(kube, name), what=f"{name} says why")
        assert (said["status"], said["reason"]) == ("False", names.REASON_PROVIDER_UNREACHABLE)
        assert "gpu has not answered since" in said["message"] and "nothing is stopped" in said["message"]
    # Three poll intervals and more of failed lists: the outage is the provider's, not the Pods'.
    wait_for(
        lambda: len([c for c in cloud.call_log("list") if not c.outcome.startswith("ok")]) >= failed_before + 4,
        what="four failed lists (three poll intervals and more)",
    )
    assert [phase_of(kube, name) for name in pods] == ["Running", "Running"]
    assert not cloud.call_log("terminate") and len(cloud.call_log("provision")) == 2
    for name in pods:
        status = (get_pod(kube, name) or {}).get("status") or {}
        assert not status.get("reason") and status["phase"] == "Running"  # neither interrupted nor failed
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"  # the instance may well serve: we only cannot ask

    cloud.clear()
    for name in pods:
        wait_for(
            lambda name=name: (reachable_condition(kube, name) or {}).get("status") == "True",
            what=f"{name} says its provider answers again",
        )
        assert (reachable_condition(kube, name) or {}).get("reason") == names.REASON_PROVIDER_REACHABLE
    assert [phase_of(kube, name) for name in pods] == ["Running", "Running"]
    assert not cloud.call_log("terminate") and len(cloud.call_log("provision")) == 2


def test_the_providers_error_a_pod_carries_is_bounded() -> None:
    state = Reachability()
    state.failed("x" * 5000, datetime(2026, 12, 5, 12, 0, tzinfo=UTC))
    said = with_reachability({"phase": "Running"}, state, provider="gpu", now="2026-12-05T12:00:01Z")
    (condition,) = said["conditions"]
    assert condition["status"] == "False" and len(state.view()[1]) == MAX_ERROR
    assert "x" * MAX_ERROR not in condition["message"] and condition["message"].count("x") == MAX_ERROR - 3
