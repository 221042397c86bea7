"""The Pod contract in time, end to end on every provider (local, fake, AWS over SSH, Modal and
RunPod on their fakes): activeDeadlineSeconds (also across a manager restart), a grace period
a SIGTERM trap uses to finish its work, `kubectl delete --grace-period=3` of a workload that
ignores SIGTERM, and a preStop exec hook that runs before SIGTERM.

One rig per provider (tests/support/rigs/timebound.py), its scenarios run at once by `drive`;
each test reads what its Pod went through: every status the API server returned (a watch),
the files its workload wrote, the provider's own view of its instance.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from providers.fake import FakeProvider
from tests.support.polling import wait_for
from tests.support.rigs.timebound import DEADLINE, DEADLINE_MESSAGE, POLL, SLACK, WORK, Seen, TimeRig, drive, time_rig
from tests.support.rigs.timeclouds import CLOUDS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=list(CLOUDS))
def rig(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TimeRig]:
    alias = str(request.param)
    folder = tmp_path_factory.mktemp(f"time-{alias}")
    with CLOUDS[alias](folder) as build, time_rig(folder, build, files=alias != "fake") as running:
        drive(running)
        yield running


def ended(rig: TimeRig, name: str, timeout: float) -> tuple[float, Seen]:
    """Once the Pod is gone: seconds from its `kubectl delete` to its DELETED event, and the
    last status the API server returned (the DELETED event's object)."""
    rig.ran(name)
    gone = wait_for(lambda: rig.watch.gone_at(name), timeout, what=f"{name} gone")
    return gone - rig.deleted_at[name], rig.watch.history(name)[-1]


def exit_of(seen: Seen) -> int | None:
    terminated = seen.terminated()
    return None if terminated is None else terminated.get("exitCode")


def check_deadline(rig: TimeRig, name: str) -> float:
    """The Pod goes Failed/DeadlineExceeded within one poll (+ slack) of startTime + 5, with
    the kubelet's Event and no DisruptionTarget, and its instance is gone. Returns startTime."""
    started = rig.start_time(name)
    failed: Seen = wait_for(lambda: rig.watch.first(name, lambda s: s.phase == "Failed"), 60, what=f"{name} Failed")
    assert (failed.status.get("reason"), failed.status.get("message")) == ("DeadlineExceeded", DEADLINE_MESSAGE)
    assert started + DEADLINE <= failed.at <= started + DEADLINE + POLL + SLACK, failed.at - started
    assert not [c for c in failed.status.get("conditions") or [] if c.get("type") == "DisruptionTarget"]
    events = wait_for(lambda: rig.events(name, "DeadlineExceeded"), 10, what="the DeadlineExceeded Event")
    assert [(e["type"], e["message"]) for e in events] == [("Normal", DEADLINE_MESSAGE)]
    instance = rig.instance_of(name)
    wait_for(lambda: not rig.live(instance), 30, what=f"{name}'s instance gone")
    return started


def test_active_deadline_fails_the_pod_deadline_exceeded_within_one_poll_and_leaves_no_instance(rig: TimeRig) -> None:
    check_deadline(rig, "deadline")


def test_the_deadline_counts_from_start_time_across_a_manager_restart_in_its_middle(rig: TimeRig) -> None:
    started = check_deadline(rig, "deadline-restart")
    assert rig.restarted is not None
    began, restarted = rig.restarted
    assert started < began and restarted < started + DEADLINE, "the restart was not in the deadline's middle"
    failed = rig.watch.first("deadline-restart", lambda s: s.phase == "Failed")
    assert failed is not None and failed.at < began + DEADLINE  # counted from the restart it would be later


def test_a_60s_grace_lets_a_sigterm_trap_finish_15s_of_work_then_exit_143(rig: TimeRig) -> None:
    took, last = ended(rig, "checkpoint", 60 + 30)
    assert WORK <= took <= WORK + 2 * POLL + 2 * SLACK, took  # ~15 s, not the 60 s grace
    assert (exit_of(last), last.phase) == (143, "Failed"), last.status
    if rig.files:
        assert rig.lines("checkpoint") == ["term", "checkpoint"]


def test_delete_grace_period_3_kills_a_workload_ignoring_sigterm_with_137(rig: TimeRig) -> None:
    took, last = ended(rig, "stubborn", 30)
    assert 3 <= took <= 3 + POLL + SLACK, took
    assert (exit_of(last), last.phase) == (137, "Failed"), last.status


def test_a_prestop_exec_hook_runs_before_sigterm(rig: TimeRig) -> None:
    took, last = ended(rig, "hooked", 30)
    assert exit_of(last) == 143, last.status
    if rig.files:
        assert rig.lines("hooked") == ["prestop", "term"]
    else:  # the fake runs no shell: its call log orders the hook's exec before the stop
        assert isinstance(rig.provider, FakeProvider)
        calls = rig.provider.cloud.call_log()
        mine = [c.method for c in calls if f"id={rig.instance_of('hooked')}" in c.args.split()]
        assert "exec" in mine and "stop_container" in mine
        assert mine.index("exec") < mine.index("stop_container"), mine


def test_every_running_pod_status_carries_the_host_ip(rig: TimeRig) -> None:
    wait_for(lambda: rig.watch.gone_at("checkpoint"), 60 + 30, what="every scenario done")
    running = [seen for seen in rig.watch.all() if seen.phase == "Running"]
    assert running and all(seen.status.get("hostIP") == "127.0.0.1" for seen in running)
    assert all(seen.status.get("hostIPs") == [{"ip": "127.0.0.1"}] for seen in running)
