"""The containers of a several-container Pod on EC2 (moto): the roster tags a launch
carries, the console's `NEBULA-CONTAINER` markers read back into `Instance.containers`
(while the instance runs, and after it shut down), and the instance's state they imply.

The VM's console is set on moto's backend (`tests.providers.aws.moto_ec2`); the provider
reads it over EC2's wire protocol. The lines are the ones the user-data writes
(tests/providers/aws/test_aws_userdata.py runs that script and parses its console)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from moto import mock_aws

from providers import errors
from providers.aws import AwsProvider, containers
from providers.aws.containers import RosterEntry
from providers.base import InstanceId, InstanceState
from providers.shape import ContainerSpec, ContainerState
from tests.providers.aws.moto_ec2 import (
    SHUTDOWN,
    count_calls,
    make_pod,
    make_provider,
    request_for,
    serve_consoles,
    set_state,
    write_console,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
T0 = 1796126400  # 2026-12-01T12:00:00Z
INIT = (ContainerSpec("fetch", "repo/fetch:1"), ContainerSpec("metrics", "repo/metrics:1", sidecar=True))
APPS = (ContainerSpec("main", "repo/train:1", command=("python",)), ContainerSpec("side", "repo/side:1"))


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsProvider]:
    with mock_aws():
        serve_consoles(monkeypatch)
        yield make_provider(now=lambda: NOW)


def launch_several(provider: AwsProvider, name: str = "server") -> InstanceId:
    pod = make_pod(name, containers=APPS, init_containers=INIT)
    return provider.provision(pod, request_for(pod)).instance_id


def marks(*lines: str) -> str:
    """Console text: boot noise, then `NEBULA-CONTAINER` lines, as the user-data writes them."""
    return "cloud-init: running user-data\r\n" + "".join(f"NEBULA-CONTAINER {line}\r\n" for line in lines)


def states(instance: Any) -> dict[str, tuple[ContainerState, int | None]]:
    return {fact.name: (fact.state, fact.exit_code) for fact in instance.containers}


def test_the_roster_names_every_container_in_start_order_across_as_many_tags_as_it_needs() -> None:
    pod = make_pod("server", containers=APPS, init_containers=INIT)
    entries = containers.roster(pod)
    assert [(e.name, e.kind) for e in entries] == [("fetch", "init"), ("metrics", "sidecar"), ("main", "app"),
                                                   ("side", "app")]  # fmt: skip
    assert containers.roster_tags(entries) == {"nebula.io/containers": "i:fetch s:metrics a:main a:side"}
    many = tuple(RosterEntry(f"container-{n:02d}-" + "x" * 50, "app") for n in range(10))
    tags = containers.roster_tags(many)
    assert len(tags) > 1 and all(len(value) <= 256 for value in tags.values())
    assert containers.roster_of(tags) == many
    assert containers.roster_tags(containers.roster(make_pod())) == {}  # one container: the instance is it


def test_each_containers_last_marker_wins_and_only_marker_lines_of_their_own_count() -> None:
    output = (
        f"NEBULA-CONTAINER fetch started {T0}\r\nNEBULA-CONTAINER fetch exited 0 {T0 + 5}\r\n"
        f"NEBULA-CONTAINER main started {T0 + 6}\n"
        f"main 2026-12-01T12:00:07.000000000Z NEBULA-CONTAINER main exited 9 {T0 + 7}\n"  # main's own output
        f"NEBULA-CONTAINER Side started {T0}\n"  # not a container name
    ).encode()
    events = containers.events_in(output)
    assert sorted(events) == ["fetch", "main"]
    assert events["fetch"].exit_code == 0 and events["fetch"].finished_at == datetime(2026, 12, 1, 12, 0, 5, tzinfo=UTC)
    assert events["main"].exit_code is None and events["main"].started_at == datetime(2026, 12, 1, 12, 0, 6, tzinfo=UTC)


def test_a_running_instance_is_initializing_until_every_app_container_started_then_running(aws: AwsProvider) -> None:
    instance = launch_several(aws)
    aws.get(instance)  # moto: pending -> running on describe
    write_console(instance, marks(f"fetch started {T0}"))
    seen = aws.get(instance)
    assert seen is not None and seen.state is InstanceState.INITIALIZING
    assert states(seen) == {"fetch": (ContainerState.RUNNING, None), "metrics": (ContainerState.WAITING, None),
                            "main": (ContainerState.WAITING, None), "side": (ContainerState.WAITING, None)}  # fmt: skip
    assert [fact.init for fact in seen.containers] == [True, True, False, False]
    write_console(instance, marks(f"fetch started {T0}", f"fetch exited 0 {T0 + 5}", f"metrics started {T0 + 5}",
                                  f"main started {T0 + 6}", f"side started {T0 + 6}"))  # fmt: skip
    seen = aws.get(instance)
    assert seen is not None and seen.state is InstanceState.RUNNING
    assert states(seen) == {"fetch": (ContainerState.TERMINATED, 0), "metrics": (ContainerState.RUNNING, None),
                            "main": (ContainerState.RUNNING, None), "side": (ContainerState.RUNNING, None)}  # fmt: skip
    main = next(fact for fact in seen.containers if fact.name == "main")
    assert main.started_at == datetime(2026, 12, 1, 12, 0, 6, tzinfo=UTC) and main.runs == 1


def test_one_app_container_ending_is_reported_while_the_others_run(aws: AwsProvider) -> None:
    instance = launch_several(aws)
    aws.get(instance)
    write_console(instance, marks(f"fetch exited 0 {T0}", f"metrics started {T0}", f"main started {T0}",
                                  f"side started {T0}", f"side exited 3 {T0 + 9}"))  # fmt: skip
    seen = aws.get(instance)
    assert seen is not None and seen.state is InstanceState.RUNNING
    side = next(fact for fact in seen.containers if fact.name == "side")
    assert (side.state, side.exit_code, side.finished_at) == (
        ContainerState.TERMINATED, 3, datetime(2026, 12, 1, 12, 0, 9, tzinfo=UTC),
    )  # fmt: skip


def test_the_workload_marker_ends_a_running_instance_and_the_shut_down_one_keeps_its_containers_facts(
    aws: AwsProvider,
) -> None:
    instance = launch_several(aws)
    aws.get(instance)
    ended = marks(f"fetch exited 0 {T0}", f"main started {T0}", f"side started {T0}", f"side exited 3 {T0 + 9}",
                  f"main exited 0 {T0 + 10}", f"metrics started {T0}", f"metrics exited 143 {T0 + 11}")  # fmt: skip
    write_console(instance, ended + "NEBULA-EXIT-CODE=3\r\n")
    seen = aws.get(instance)
    assert seen is not None and (seen.state, seen.exit_code) == (InstanceState.FAILED, 3)
    assert seen.finished_at == datetime(2026, 12, 1, 12, 0, 11, tzinfo=UTC)
    set_state(instance, "shutting-down", reason=SHUTDOWN)
    gone = aws.get(instance)
    assert gone is not None and (gone.state, gone.exit_code) == (InstanceState.FAILED, 3)
    assert states(gone) == {"fetch": (ContainerState.TERMINATED, 0), "metrics": (ContainerState.TERMINATED, 143),
                            "main": (ContainerState.TERMINATED, 0), "side": (ContainerState.TERMINATED, 3)}  # fmt: skip


def test_containers_still_running_when_the_instance_went_are_terminated_with_no_code(aws: AwsProvider) -> None:
    instance = launch_several(aws)
    aws.get(instance)
    write_console(instance, marks(f"fetch exited 0 {T0}", f"main started {T0}"))
    boto3.client("ec2", region_name="us-east-1").terminate_instances(InstanceIds=[instance.split("/")[1]])
    seen = aws.get(instance)
    assert seen is not None and seen.state is InstanceState.TERMINATED
    main = next(fact for fact in seen.containers if fact.name == "main")
    assert (main.state, main.exit_code) == (ContainerState.TERMINATED, None) and "stopped" in main.message
    assert states(seen)["side"] == (ContainerState.WAITING, None)  # it never started


def test_a_list_reads_the_consoles_of_running_several_container_instances_only(aws: AwsProvider) -> None:
    several = launch_several(aws)
    single = aws.provision(pod := make_pod("trainer"), request_for(pod)).instance_id
    aws.list()  # moto: pending -> running
    write_console(several, marks(f"fetch exited 0 {T0}", f"main started {T0}", f"side started {T0}"))
    reads = count_calls(aws)
    listed = {instance.id: instance for instance in aws.list()}
    assert reads["GetConsoleOutput"] == 1
    assert listed[single].containers == () and listed[single].state is InstanceState.RUNNING
    assert listed[several].state is InstanceState.RUNNING and len(listed[several].containers) == 4


def test_stopping_a_container_needs_it_on_the_roster_and_is_success_when_the_instance_no_longer_runs(
    aws: AwsProvider,
) -> None:
    instance = launch_several(aws)
    aws.get(instance)  # running; the provider's `ssh` option is off in these tests
    with pytest.raises(errors.NotFound):
        aws.stop_container(instance, "nope", grace=1)
    with pytest.raises(errors.Unavailable, match="no SSH endpoint"):
        aws.stop_container(instance, "side", grace=1)
    aws.terminate(instance)
    aws.stop_container(instance, "side", grace=1)
