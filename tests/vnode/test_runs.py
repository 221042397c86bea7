"""vnode.model.runs: restartPolicy and the kubelet's crash back-off, as pure tables."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from providers.base import ClaimName, Instance, InstanceId, InstanceState
from vnode.model.runs import BackoffPolicy, Ending, Runs, Step, ending_of, runs_again

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
POLICY = BackoffPolicy(initial=10.0, maximum=300.0, reset=600.0)


def ended(code: int, at: float = 0.0) -> Ending:
    return Ending(code, "Completed" if code == 0 else "Error", NOW, NOW + timedelta(seconds=at))


@pytest.mark.parametrize(
    ("policy", "code", "again"),
    [("Always", 0, True), ("Always", 3, True), ("OnFailure", 0, False), ("OnFailure", 3, True),
     ("OnFailure", None, True), ("Never", 0, False), ("Never", 3, False)],
)  # fmt: skip
def test_restart_policy_decides_whether_an_ended_run_runs_again(policy: str, code: int | None, again: bool) -> None:
    assert runs_again(policy, code) is again


def test_the_first_restart_is_at_once_then_10s_doubling_to_5_minutes() -> None:
    runs = Runs(policy="Always")
    waits = []
    at = 0.0
    for crash in range(8):
        runs.end(ended(1, at), seen_at=at, in_place=True, bills=False, policy=POLICY)
        assert runs.due is not None and runs.due.step is Step.RESTART
        waits.append(runs.due.at - at)
        at = runs.due.at
        runs.restarted(new_run=crash + 2, policy=POLICY)
        at += 1.0  # each run lasts a second
    assert waits == [0.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0]
    assert runs.restarts == 8


def test_a_run_longer_than_the_reset_starts_the_back_off_afresh() -> None:
    runs = Runs(policy="Always")
    runs.end(ended(1), seen_at=0.0, in_place=True, bills=False, policy=POLICY)
    runs.restarted(new_run=2, policy=POLICY)
    runs.end(ended(1, 5), seen_at=5.0, in_place=True, bills=False, policy=POLICY)
    assert runs.due is not None and runs.due.at == 15.0  # in back-off: 10 s
    runs.restarted(new_run=3, policy=POLICY)
    runs.end(ended(1, 700), seen_at=700.0, in_place=True, bills=False, policy=POLICY)
    assert runs.due is not None and runs.due.at == 700.0  # ran 10+ minutes: at once again


def test_the_waiting_message_is_the_kubelets_while_the_back_off_runs() -> None:
    runs = Runs(policy="Always")
    runs.end(ended(1), seen_at=0.0, in_place=True, bills=False, policy=POLICY)
    assert runs.waiting_message("main", "p_default(u1)", 0.0) is None  # restarts at once
    runs.restarted(new_run=2, policy=POLICY)
    runs.end(ended(1, 2), seen_at=2.0, in_place=True, bills=False, policy=POLICY)
    message = runs.waiting_message("main", "p_default(u1)", 3.0)
    assert message == "back-off 10s restarting failed container=main pod=p_default(u1)"
    assert runs.waiting_message("main", "p_default(u1)", 12.0) is None  # due now


def test_an_ended_run_under_never_finishes_the_pod_and_a_billing_instance_is_released() -> None:
    runs = Runs(policy="Never")
    runs.end(ended(3), seen_at=4.0, in_place=True, bills=True, policy=POLICY)
    assert runs.finished and runs.due is not None and (runs.due.step, runs.due.at) == (Step.RELEASE, 4.0)
    quiet = Runs(policy="OnFailure")
    quiet.end(ended(0), seen_at=4.0, in_place=True, bills=False, policy=POLICY)
    assert quiet.finished and quiet.due is None  # nothing bills: nothing to do


def test_a_provider_that_cannot_restart_in_place_gets_a_replacement() -> None:
    runs = Runs(policy="OnFailure")
    runs.end(ended(2), seen_at=0.0, in_place=False, bills=True, policy=POLICY)
    assert runs.due is not None and runs.due.step is Step.REPLACE


def test_restarting_records_the_last_termination_and_ignores_facts_of_older_runs() -> None:
    runs = Runs(policy="Always")
    runs.end(ended(3), seen_at=0.0, in_place=True, bills=False, policy=POLICY)
    runs.restarted(new_run=2, policy=POLICY)
    assert runs.last is not None and (runs.last["exitCode"], runs.last["reason"]) == (3, "Error")
    old = Instance(InstanceId("i"), ClaimName("c"), InstanceState.FAILED, NOW, exit_code=3, runs=1)
    assert runs.stale(old) and not runs.stale(
        Instance(InstanceId("i"), ClaimName("c"), InstanceState.RUNNING, NOW, runs=2)
    )


def test_the_counts_start_from_the_pods_own_status() -> None:
    pod = {
        "spec": {"restartPolicy": "OnFailure"},
        "status": {"containerStatuses": [{"restartCount": 4, "lastState": {"terminated": {"exitCode": 1}}}]},
    }
    runs = Runs.from_pod(pod)
    assert (runs.policy, runs.restarts, runs.last) == ("OnFailure", 4, {"exitCode": 1})
    assert Runs.from_pod({}).policy == "Always"


def test_an_ending_takes_the_providers_code_and_reason_or_derives_them() -> None:
    base = Instance(InstanceId("i"), ClaimName("c"), InstanceState.SUCCEEDED, NOW, finished_at=NOW)
    assert (ending_of(base, now=NOW).exit_code, ending_of(base, now=NOW).reason) == (0, "Completed")
    oom = Instance(InstanceId("i"), ClaimName("c"), InstanceState.FAILED, NOW, exit_code=137, exit_reason="OOMKilled")
    assert (ending_of(oom, now=NOW).exit_code, ending_of(oom, now=NOW).reason) == (137, "OOMKilled")
    unknown = Instance(InstanceId("i"), ClaimName("c"), InstanceState.FAILED, NOW)
    assert ending_of(unknown, now=NOW).exit_code == 137


@pytest.mark.parametrize(("seconds", "text"), [(0.3, "300ms"), (10.0, "10s"), (40.0, "40s"), (300.0, "5m0s")])
def test_the_back_off_reads_as_gos_duration(seconds: float, text: str) -> None:
    runs = Runs(policy="Always", backoff=seconds, backoff_from=0.0)
    runs.end(ended(1, 1), seen_at=1.0, in_place=True, bills=False, policy=POLICY)
    assert runs.waiting_message("c", "p", 1.0) == f"back-off {text} restarting failed container=c pod=p"
