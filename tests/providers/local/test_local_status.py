"""The pure rule from an instance folder's records and liveness to an Instance fact."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from providers.base import InstanceState
from providers.local.status import Observation, instance_from, needs_launch

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
SPEC = {"claim": "c"}
LAUNCH = {"supervisor": {"pid": 10, "start_ticks": 1}}
RUN = {"started_at": "2026-01-01T11:59:00.000000000Z"}
EXIT_0 = {"exit_code": 0, "finished_at": "2026-01-01T11:59:30.000000000Z"}
EXIT_1 = {"exit_code": 1, "finished_at": "2026-01-01T11:59:30.000000000Z"}
EXIT_143 = {"exit_code": 143, "finished_at": "2026-01-01T11:59:50.000000000Z"}
ASKED = {"requested_at": "2026-01-01T11:59:40.000000000Z"}
LAUNCH_ERROR = {"message": "the supervisor for c failed to start (see supervisor.log)"}


def observe(age: float = 5.0, alive: tuple[bool, bool] = (False, False), **records: Any) -> Observation:
    fields: dict[str, Any] = {"spec": SPEC, "launch": LAUNCH, "run": RUN, "exit": None, "terminate": None}
    fields.update(records)
    return Observation(
        instance_id="local-c",
        claim="c",
        created_at=NOW - timedelta(seconds=age),
        supervisor_alive=alive[0],
        workload_alive=alive[1],
        **fields,
    )


@pytest.mark.parametrize(
    ("observation", "state", "exit_code"),
    [
        (observe(alive=(True, True)), InstanceState.RUNNING, None),
        (observe(alive=(False, True)), InstanceState.RUNNING, None),  # supervisor lost, workload lives
        (observe(alive=(True, False), run=None), InstanceState.INITIALIZING, None),
        (observe(launch=None, run=None), InstanceState.PROVISIONING, None),
        (observe(age=3600, launch=None, run=None), InstanceState.PROVISIONING, None),  # resumed, however old
        (observe(launch=None, run=None, launch_error=LAUNCH_ERROR), InstanceState.FAILED, None),
        (observe(exit=EXIT_0), InstanceState.SUCCEEDED, 0),
        (observe(exit=EXIT_1), InstanceState.FAILED, 1),
        (observe(), InstanceState.FAILED, None),  # gone without an exit record: a reboot
        (observe(alive=(True, True), terminate=ASKED), InstanceState.TERMINATING, None),
        (observe(alive=(True, False), terminate=ASKED, exit=EXIT_143), InstanceState.TERMINATED, 143),
        (observe(alive=(True, False), terminate=ASKED, exit=EXIT_1), InstanceState.FAILED, 1),  # exited before
    ],
)
def test_state_from_records(observation: Observation, state: InstanceState, exit_code: int | None) -> None:
    instance = instance_from(observation)
    assert instance is not None
    assert (instance.state, instance.exit_code) == (state, exit_code)
    assert instance.endpoint == "127.0.0.1" and instance.region == "local"


def test_terminated_and_nothing_alive_is_gone() -> None:
    assert instance_from(observe(terminate=ASKED)) is None
    assert instance_from(observe(terminate=ASKED, exit=EXIT_0)) is None


def test_times_come_from_the_records() -> None:
    instance = instance_from(observe(exit=EXIT_0))
    assert instance is not None
    assert instance.started_at == datetime(2026, 1, 1, 11, 59, tzinfo=UTC)
    assert instance.finished_at == datetime(2026, 1, 1, 11, 59, 30, tzinfo=UTC)
    assert instance.created_at == NOW - timedelta(seconds=5)


@pytest.mark.parametrize(
    ("observation", "expected"),
    [
        (observe(launch=None, run=None), True),  # the manager stopped between the folder and the launch
        (observe(age=3600, launch=None, run=None), True),
        (observe(launch=None, run=None, alive=(False, True)), False),  # something runs: never start another
        (observe(run=None), False),  # a supervisor was launched
        (observe(launch=None), False),  # the workload was started
        (observe(launch=None, run=None, exit=EXIT_0), False),
        (observe(launch=None, run=None, terminate=ASKED), False),  # terminate won the race: nothing to run
        (observe(launch=None, run=None, launch_error=LAUNCH_ERROR), False),  # resumption already failed
        (observe(launch=None, run=None, spec=None), False),  # not a folder we can launch
    ],
)
def test_only_a_launch_that_never_began_needs_one(observation: Observation, expected: bool) -> None:
    assert needs_launch(observation) is expected


def test_a_failed_resumption_says_why() -> None:
    instance = instance_from(observe(launch=None, run=None, launch_error=LAUNCH_ERROR))
    assert instance is not None and instance.state is InstanceState.FAILED
    assert instance.message == "the workload was never started: " + LAUNCH_ERROR["message"]


@pytest.mark.parametrize(
    ("observation", "reason"),
    [
        (observe(exit=EXIT_0), "Completed"),
        (observe(exit=EXIT_1), "Error"),
        (observe(exit={"exit_code": 137, "finished_at": EXIT_1["finished_at"]}), "Error"),  # killed by signal 9
        (observe(alive=(True, False), terminate=ASKED, exit=EXIT_143), "Error"),
        (observe(), ""),  # gone without a recorded exit code: nothing to name
        (observe(alive=(True, True)), ""),
    ],
)
def test_exit_reason_is_completed_for_code_zero_and_error_for_any_other(observation: Observation, reason: str) -> None:
    instance = instance_from(observation)
    assert instance is not None and instance.exit_reason == reason


def test_runs_come_from_the_observation() -> None:
    instance = instance_from(observe(exit=EXIT_0, runs=3))
    assert instance is not None and instance.runs == 3
    fresh = instance_from(observe(exit=EXIT_0))
    assert fresh is not None and fresh.runs == 1
