"""`stop_container` on the local provider with real process groups, as a kubelet stops a
container: TERM to the whole group, KILL at the end of the grace, the exit the kernel
reports (own code, 143, 137); a shorter second grace; terminate after a stop; and the start
window of a restarted container."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from providers.base import ClaimName, InstanceId, InstanceState, LogOptions, PodSpec, ProvisionRequest
from providers.local import LocalProvider, folder, pids, pod
from providers.local.reader import FolderReader
from providers.shape import ContainerFacts, ContainerState
from tests.support.factories import make_pod_spec
from tests.support.local_cleanup import kill_leftovers
from tests.support.polling import read_to_end, wait_for

CLAIM = ClaimName("ns-stop-abcdefghij")
POLL = 0.5  # the provider's poll interval here
SLACK = 2.0  # scheduling on a busy 2-core machine
# Loops in 0.05 s steps so a TERM to the group reaches a `sleep` at once.
BUSY = "echo up; while true; do sleep 0.05; done"


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[LocalProvider]:
    # A long grace_period: whatever a test sees end in less was not waiting on it.
    provider = LocalProvider("local", {"state_dir": str(tmp_path), "grace_period": 30, "poll_interval": POLL})
    yield provider
    for instance in provider.list():
        provider.terminate(instance.id)
    kill_leftovers(tmp_path)


def start(provider: LocalProvider, script: str) -> InstanceId:
    pod: PodSpec = make_pod_spec(container="main", args=(script,))
    instance_id = provider.provision(pod, ProvisionRequest(CLAIM)).instance_id
    wait_for(lambda: read_to_end(provider.logs(instance_id, LogOptions())).startswith(b"up\n"), what="up")
    return instance_id


def main_facts(provider: LocalProvider, instance_id: InstanceId) -> ContainerFacts:
    instance = provider.get(instance_id)
    assert instance is not None
    return instance.containers[0]


def ended(provider: LocalProvider, instance_id: InstanceId, timeout: float) -> ContainerFacts:
    """The container's facts once TERMINATED, within `timeout` seconds."""
    found: ContainerFacts = wait_for(
        lambda: (f := main_facts(provider, instance_id)).state is ContainerState.TERMINATED and f,
        timeout,
        what="the container terminated",
    )
    return found


def stop(provider: LocalProvider, instance_id: InstanceId, grace: float) -> float:
    """Ask for a stop; returns when it was asked (wall clock). The call never waits the grace."""
    asked = time.time()
    provider.stop_container(instance_id, "", grace=grace)
    assert time.time() - asked < min(grace, 1.0) + SLACK
    return asked


@pytest.mark.parametrize("code", [143, 0])
def test_a_workload_that_traps_term_finishes_its_work_and_its_own_exit_code_is_reported(
    provider: LocalProvider, tmp_path: Path, code: int
) -> None:
    done = tmp_path / "checkpoint"
    trap = f"trap 'sleep 2; echo saved > {done}; exit {code}' TERM; {BUSY}"
    instance_id = start(provider, trap)
    asked = stop(provider, instance_id, grace=10)
    facts = ended(provider, instance_id, 2 + POLL + SLACK)
    assert (facts.exit_code, facts.exit_reason) == (code, "Completed" if code == 0 else "Error")
    assert done.read_text() == "saved\n"  # the work after SIGTERM was done
    assert facts.finished_at is not None and facts.finished_at.timestamp() - asked >= 1.9


def test_term_reaches_the_whole_process_group_not_only_the_sh_c_leader(provider: LocalProvider, tmp_path: Path) -> None:
    """The `sh -c` leader forwards nothing: it waits for its child, which traps TERM. The
    child gets TERM only if the whole group is signalled; otherwise the leader waits on until
    KILL (137) and the child never writes its file."""
    child = tmp_path / "child"
    worker = f"(trap 'echo got-term > {child}; exit 0' TERM; while true; do sleep 0.05; done) &"
    instance_id = start(provider, f"trap 'wait; exit 143' TERM; {worker} echo up; wait")
    stop(provider, instance_id, grace=10)
    facts = ended(provider, instance_id, POLL + SLACK)
    assert (facts.exit_code, facts.exit_reason) == (143, "Error")
    assert child.read_text() == "got-term\n"


def test_a_workload_that_ignores_term_is_killed_with_137_at_the_end_of_the_grace(provider: LocalProvider) -> None:
    instance_id = start(provider, f"trap '' TERM; {BUSY}")
    asked = stop(provider, instance_id, grace=1)
    facts = ended(provider, instance_id, 1 + POLL + SLACK)
    assert facts.exit_code == 137
    assert facts.finished_at is not None and facts.finished_at.timestamp() - asked >= 0.9


def test_grace_zero_kills_at_once_without_term(provider: LocalProvider, tmp_path: Path) -> None:
    """A trap that would exit 143 never runs: SIGKILL comes first and alone."""
    instance_id = start(provider, f"trap 'echo trapped > {tmp_path / 'trap'}; exit 143' TERM; {BUSY}")
    asked = stop(provider, instance_id, grace=0)
    facts = ended(provider, instance_id, POLL + SLACK)
    assert facts.exit_code == 137 and not (tmp_path / "trap").exists()
    assert facts.finished_at is not None and facts.finished_at.timestamp() - asked < 1.0


def test_a_second_stop_with_a_shorter_grace_shortens_the_wait_and_a_longer_one_never_lengthens_it(
    provider: LocalProvider,
) -> None:
    instance_id = start(provider, f"trap '' TERM; {BUSY}")
    stop(provider, instance_id, grace=60)
    assert main_facts(provider, instance_id).state is ContainerState.RUNNING
    asked = stop(provider, instance_id, grace=1)  # a force delete after a graceful one
    stop(provider, instance_id, grace=120)  # never lengthens it
    facts = ended(provider, instance_id, 1 + POLL + SLACK)
    assert facts.exit_code == 137 and facts.finished_at is not None
    assert facts.finished_at.timestamp() - asked >= 0.9
    stop(provider, instance_id, grace=1)  # not running: success, nothing done


def test_terminate_after_a_stop_adds_no_grace_period_of_its_own(provider: LocalProvider) -> None:
    """grace_period (30 s here) is only for an instance nobody stopped: after a stop,
    terminate kills what still runs at once and removes what ended at once."""
    instance_id = start(provider, f"trap '' TERM; {BUSY}")
    stop(provider, instance_id, grace=60)
    provider.terminate(instance_id)
    wait_for(lambda: provider.get(instance_id) is None, POLL + SLACK, what="the instance gone")


def test_terminate_after_the_container_ended_removes_it_at_once(provider: LocalProvider) -> None:
    instance_id = start(provider, BUSY)
    stop(provider, instance_id, grace=5)
    assert ended(provider, instance_id, POLL + SLACK).exit_code == 143
    provider.terminate(instance_id)
    wait_for(lambda: provider.get(instance_id) is None, POLL + SLACK, what="the instance gone")


def test_a_restarted_container_reads_running_whenever_its_code_has_run(provider: LocalProvider, tmp_path: Path) -> None:
    """The start window: the new run is RUNNING before its code runs (containerd reports a
    started task before user code runs), never WAITING once its code did something."""
    ran = tmp_path / "ran"
    instance_id = start(provider, f"echo ran >> {ran}; echo up; exit 3")
    ended(provider, instance_id, 10)
    provider.restart(instance_id)
    seen: list[tuple[ContainerState, bool]] = []

    def second_run_ran() -> bool:
        again = ran.read_text().count("ran") == 2  # read first: the facts come after
        seen.append((main_facts(provider, instance_id).state, again))
        return again

    wait_for(second_run_ran, 10, interval=0.001, what="the second run's code")
    assert seen and all(state is not ContainerState.WAITING for state, again in seen if again)


def test_a_spawned_run_reads_running_before_its_leader_is_recorded(tmp_path: Path) -> None:
    """The records between the supervisor's spawn and its run record (the leader's
    identity): a restarted run whose supervisor lives reads RUNNING, started at the spawn."""
    path = tmp_path / CLAIM
    path.mkdir()
    me = pids.identify(os.getpid())
    assert me is not None
    folder.write_json_atomic(path / folder.SPEC_FILE, {"claim": CLAIM, "container": "main"})
    folder.write_json_atomic(path / folder.RUNS_FILE, {"runs": 2})
    folder.write_json_atomic(path / folder.LAUNCH_FILE, {"supervisor": me.as_json(), "run": 2})
    reader = FolderReader(path, owner_key="standalone.local")
    waiting = pod.instance_from(reader.observe_containers() or [])
    assert waiting is not None and waiting.containers[0].state is ContainerState.WAITING  # not spawned yet
    folder.write_json_atomic(path / folder.SPAWN_FILE, {"started_at": "2026-01-01T12:00:00.000000000Z", "run": 2})
    spawned = pod.instance_from(reader.observe_containers() or [])
    assert spawned is not None and spawned.state is InstanceState.RUNNING
    facts = spawned.containers[0]
    noon = datetime(2026, 1, 1, 12, tzinfo=UTC)
    assert (facts.state, facts.runs, facts.started_at) == (ContainerState.RUNNING, 2, noon)
