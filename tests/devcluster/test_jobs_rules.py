"""The Job controller's pure rules (no threads, no server): back-off, podFailurePolicy
matching, which Pods count as failed, how many Pods to run, and condition bookkeeping."""

from __future__ import annotations

from typing import Any

from devcluster import jobstatus as rules


def job(**spec: Any) -> dict[str, Any]:
    base = {"parallelism": 1, "completions": 1, "backoffLimit": 6, "template": {"spec": {"restartPolicy": "Never"}}}
    return {"metadata": {"name": "j", "namespace": "ns", "uid": "u"}, "spec": {**base, **spec}}


def pod(phase: str = "Running", *, deleting: bool = False, node: str = "n1", **status: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "j-abcde", "namespace": "ns", "uid": "p"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase, **status}}


def exited(code: int, name: str = "main") -> dict[str, Any]:
    return {"name": name, "state": {"terminated": {"exitCode": code}}}


def test_backoff_doubles_from_the_base_and_is_capped() -> None:
    record = rules.BackoffRecord()
    assert record.remaining(100.0) == 0.0
    record.observe(succeeded=0, failed=1, now=100.0)
    assert record.remaining(100.0) == 10.0
    assert record.remaining(104.0) == 6.0
    record.observe(succeeded=0, failed=1, now=110.0)
    assert record.remaining(110.0) == 20.0
    record.observe(succeeded=0, failed=1, now=130.0)
    assert record.remaining(130.0) == 40.0
    assert record.remaining(130.0, base=0.5) == 2.0
    record.observe(succeeded=0, failed=10, now=200.0)
    assert record.remaining(200.0) == rules.MAX_BACKOFF == 360.0
    record.observe(succeeded=1, failed=0, now=210.0)  # a success resets the count
    assert record.remaining(210.0) == 0.0


def test_pod_failure_policy_matches_exit_codes_and_conditions() -> None:
    policy = {
        "rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
            {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1, 2]}},
        ]
    }
    j = job(podFailurePolicy=policy)
    disrupted = pod("Failed", conditions=[{"type": "DisruptionTarget", "status": "True"}])
    assert rules.match_failure_policy(j, disrupted) == (
        "Ignore",
        "Pod ns/j-abcde has condition DisruptionTarget matching Ignore rule at index 0",
    )
    assert rules.match_failure_policy(j, pod("Failed", containerStatuses=[exited(42)])) == (
        "FailJob",
        "Container main for pod ns/j-abcde failed with exit code 42 matching FailJob rule at index 1",
    )
    assert rules.match_failure_policy(j, pod("Failed", containerStatuses=[exited(42, "side")]))[0] == "Count"  # type: ignore[index]
    assert rules.match_failure_policy(j, pod("Failed", containerStatuses=[exited(1)])) is None
    assert rules.match_failure_policy(j, pod("Failed", containerStatuses=[exited(0)])) is None  # 0 never matches
    not_true = pod("Failed", conditions=[{"type": "DisruptionTarget", "status": "False"}])
    assert rules.match_failure_policy(j, not_true) is None


def test_which_pods_count_as_failed_depends_on_the_replacement_policy() -> None:
    plain, with_policy = job(podReplacementPolicy="TerminatingOrFailed"), job(podFailurePolicy={"rules": []})
    assert rules.is_failed(pod("Failed"), plain) and rules.is_failed(pod("Failed"), with_policy)
    assert rules.is_failed(pod("Running", deleting=True), plain)
    assert not rules.is_failed(pod("Running", deleting=True), with_policy)  # waits for phase Failed
    assert rules.is_failed(pod("Pending", deleting=True, node=""), with_policy)  # nothing will run it
    assert not rules.is_failed(pod("Succeeded", deleting=True), plain)
    assert rules.is_terminating(pod("Running", deleting=True)) and not rules.is_active(pod("Running", deleting=True))


def test_wanted_active_success_and_restarts_against_the_limit() -> None:
    assert rules.wanted_active(job(completions=5, parallelism=2), 0) == 2
    assert rules.wanted_active(job(completions=5, parallelism=2), 4) == 1
    assert rules.wanted_active(job(completions=None, parallelism=3), 0) == 3
    assert rules.wanted_active(job(completions=None, parallelism=3), 1) == 0
    assert rules.success_reached(job(completions=3), 3, 1)
    assert not rules.success_reached(job(completions=None), 1, 1)
    assert rules.success_reached(job(completions=None), 1, 0)
    on_failure = job(backoffLimit=2, template={"spec": {"restartPolicy": "OnFailure"}})
    restarted = pod(containerStatuses=[{"name": "main", "restartCount": 2}])
    assert rules.restarts_past_limit(on_failure, [restarted])
    assert not rules.restarts_past_limit(job(backoffLimit=2), [restarted])


def test_conditions_move_their_transition_time_only_on_a_change() -> None:
    status: dict[str, Any] = {}
    assert rules.set_condition(status, rules.condition("Suspended", "JobSuspended", "Job suspended", "t1"))
    assert not rules.set_condition(status, rules.condition("Suspended", "JobSuspended", "Job suspended", "t2"))
    assert status["conditions"][0]["lastTransitionTime"] == "t1"
    resumed = rules.condition("Suspended", "JobResumed", "Job resumed", "t3", "False")
    assert rules.set_condition(status, resumed)
    assert status["conditions"] == [resumed]
    assert not rules.finished(status)
    rules.set_condition(status, rules.condition("Complete", *rules.COMPLETIONS_REACHED, "t4"))
    assert rules.finished(status)
