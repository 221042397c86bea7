"""How a workload's end reaches `Instance` on EC2 (moto): the exit marker user-data writes
to the serial console, read once per finished instance; Spot reclaims and outside stops
without one; the console kept after terminate; the capabilities that follow from a VM.

The VM's side (its console text, its shutdown) is set on moto's backend by
`tests.providers.aws.moto_ec2`; the provider reads it over EC2's wire protocol."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore import exceptions as boto_errors
from moto import mock_aws

from providers import errors
from providers.aws import AwsProvider
from providers.aws.exits import exit_code_in, needs_read
from providers.aws.keys import generate_key_pair
from providers.aws.status import ConsoleVerdict, instance_from
from providers.aws.userdata import Boot, render_script
from providers.base import Instance, InstanceId, InstanceState, LogOptions, Tier
from tests.providers.aws.moto_ec2 import (
    SHUTDOWN,
    SPOT_RECLAIM,
    count_calls,
    forget,
    make_pod,
    make_provider,
    request_for,
    serve_consoles,
    set_state,
    workload_exits,
    write_console,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsProvider]:
    with mock_aws():
        serve_consoles(monkeypatch)
        yield make_provider(now=lambda: NOW)


def launch(provider: AwsProvider, name: str = "trainer", **request: Any) -> InstanceId:
    pod = make_pod(name)
    return provider.provision(pod, request_for(pod, **request)).instance_id


def listed(provider: AwsProvider, instance_id: InstanceId) -> Instance:
    return next(i for i in provider.list() if i.id == instance_id)


@pytest.mark.parametrize("state", ["shutting-down", "terminated"])
def test_a_workload_that_exits_0_is_succeeded_with_code_0_once_the_vm_shuts_down(aws: AwsProvider, state: str) -> None:
    instance = launch(aws)
    workload_exits(instance, 0, state=state)
    seen = aws.get(instance)
    assert seen is not None and seen.state is InstanceState.SUCCEEDED
    assert (seen.exit_code, seen.exit_reason, seen.finished_at) == (0, "Completed", NOW)
    assert listed(aws, instance) == seen


@pytest.mark.parametrize("state", ["shutting-down", "terminated"])
def test_a_workload_that_exits_3_is_failed_with_code_3_once_the_vm_shuts_down(aws: AwsProvider, state: str) -> None:
    instance = launch(aws)
    workload_exits(instance, 3, state=state)
    seen = listed(aws, instance)
    assert seen == aws.get(instance)
    assert seen.state is InstanceState.FAILED and seen.exit_code == 3 and seen.exit_reason == "Error"
    assert "code 3" in seen.message


def test_the_end_time_is_ec2s_transition_time_when_ec2_gives_one(aws: AwsProvider) -> None:
    instance = launch(aws)
    workload_exits(instance, 0)
    set_state(instance, "terminated", reason=SHUTDOWN, transition="User initiated (2026-12-01 10:05:00 GMT)")
    seen = aws.get(instance)
    assert seen is not None and seen.finished_at == datetime(2026, 12, 1, 10, 5, tzinfo=UTC)


def test_the_console_is_read_once_per_instance_across_lists(aws: AwsProvider) -> None:
    finished = [launch(aws, f"done-{i}") for i in range(3)]
    running = launch(aws, "running")
    for code, instance in enumerate(finished):
        workload_exits(instance, code, state="terminated")
    reads = count_calls(aws)
    for _ in range(4):
        states = {i.id: i.state for i in aws.list()}
        assert states[running] is InstanceState.RUNNING
        assert [states[i] for i in finished] == [InstanceState.SUCCEEDED, InstanceState.FAILED, InstanceState.FAILED]
    aws.get(finished[0])
    assert reads["GetConsoleOutput"] == 3 and reads["DescribeInstances"] == 5
    forget(finished[0])  # EC2 stops showing a terminated instance after about an hour
    aws.list()
    assert len(aws._exits) == 2  # the cache holds only what the last list showed


def test_a_console_without_the_marker_is_read_once_more_when_the_instance_reaches_its_final_state(
    aws: AwsProvider,
) -> None:
    """EC2 posts the console after each transition: one read while shutting down may predate the marker."""
    instance = launch(aws)
    write_console(instance, "cloud-init: running user-data\r\n")
    set_state(instance, "shutting-down", reason=SHUTDOWN)
    reads = count_calls(aws)
    assert listed(aws, instance).state is InstanceState.TERMINATING
    assert listed(aws, instance).state is InstanceState.TERMINATING
    workload_exits(instance, 0, state="terminated")
    assert listed(aws, instance).state is InstanceState.SUCCEEDED
    listed(aws, instance)
    assert reads["GetConsoleOutput"] == 2


@pytest.mark.parametrize("state", ["shutting-down", "terminated"])
def test_a_spot_reclaim_without_a_marker_is_terminated_and_preempted(aws: AwsProvider, state: str) -> None:
    instance = launch(aws, capacity_type=Tier.SPOT)
    write_console(instance, "cloud-init: running user-data\r\n2026-12-01T10:00:00Z epoch 1\r\n")
    set_state(instance, state, reason=SPOT_RECLAIM, transition="Service initiated (2026-12-01 10:07:00 GMT)")
    seen = aws.get(instance)
    assert seen is not None and seen.state is InstanceState.TERMINATED and seen.preempted
    assert seen.exit_code is None and "Spot" in seen.message and "Server.SpotInstanceTermination" in seen.message
    assert seen.finished_at == datetime(2026, 12, 1, 10, 7, tzinfo=UTC)


def test_an_instance_stopped_or_terminated_outside_nebula_is_terminated_with_ec2s_reason(aws: AwsProvider) -> None:
    stopped, terminated = launch(aws, "stopped"), launch(aws, "terminated")
    ec2 = boto3.client("ec2", region_name="us-east-1")
    ec2.stop_instances(InstanceIds=[stopped.split("/")[1]])
    ec2.terminate_instances(InstanceIds=[terminated.split("/")[1]])
    for instance in (stopped, terminated):
        seen = aws.get(instance)
        assert seen is not None and seen.state is InstanceState.TERMINATED and not seen.preempted
        assert seen.exit_code is None and "Client.UserInitiatedShutdown" in seen.message


def test_a_console_ec2_cannot_serve_now_leaves_the_instance_terminating_until_it_can(aws: AwsProvider) -> None:
    instance = launch(aws)
    workload_exits(instance, 0, state="terminated")
    client = aws._ec2.client("us-east-1")
    real = client.get_console_output
    client.get_console_output = lambda **_: (_ for _ in ()).throw(
        boto_errors.EndpointConnectionError(endpoint_url="https://ec2.us-east-1.amazonaws.com")
    )
    assert listed(aws, instance).state is InstanceState.TERMINATING
    client.get_console_output = real
    assert listed(aws, instance).state is InstanceState.SUCCEEDED


@pytest.mark.parametrize(
    ("cached", "state", "read"),
    [
        (None, "running", False),
        (None, "pending", False),
        (None, "shutting-down", True),
        (None, "terminated", True),
        (ConsoleVerdict(0, "shutting-down", NOW), "terminated", False),
        (ConsoleVerdict(None, "shutting-down", NOW), "shutting-down", False),
        (ConsoleVerdict(None, "shutting-down", NOW), "terminated", True),
        (ConsoleVerdict(None, "stopping", NOW), "stopped", True),
        (ConsoleVerdict(None, "terminated", NOW), "terminated", False),
        (ConsoleVerdict(None, "stopped", NOW), "terminated", False),
    ],
)
def test_a_console_is_read_when_finished_and_again_only_if_no_marker_was_seen_before_the_final_state(
    cached: ConsoleVerdict | None, state: str, read: bool
) -> None:
    assert needs_read(cached, state) is read


@pytest.mark.parametrize(
    ("cached", "state", "read"),
    [
        (None, "running", True),
        (ConsoleVerdict(None, "running", NOW), "running", True),  # no marker yet: read again
        (ConsoleVerdict(143, "running", NOW), "running", False),  # the stopped workload's marker: final
        (ConsoleVerdict(143, "running", NOW), "shutting-down", False),
        (None, "pending", False),
    ],
)
def test_a_watched_running_instance_is_read_until_its_marker_shows(
    cached: ConsoleVerdict | None, state: str, read: bool
) -> None:
    """`stop_container` asked its workload to stop: EC2 shows it running a minute longer."""
    assert needs_read(cached, state, watched=True) is read


def described(state: str, reason: str = "", lifecycle: str | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "InstanceId": "i-0123456789abcdef0", "State": {"Name": state}, "LaunchTime": NOW,
        "Tags": [{"Key": "nebula.io/claim", "Value": "ml-trainer-abc"}],
        "StateReason": {"Code": reason, "Message": f"{reason}: details"} if reason else {},
    }  # fmt: skip
    if lifecycle:
        data["InstanceLifecycle"] = lifecycle
    return data


SPOT = "Server.SpotInstanceTermination"
USER = "Client.UserInitiatedShutdown"


@pytest.mark.parametrize(
    ("data", "verdict", "state", "exit_code", "preempted"),
    [
        (described("pending"), None, InstanceState.INITIALIZING, None, False),
        (described("running"), None, InstanceState.RUNNING, None, False),
        (described("running"), ConsoleVerdict(143, "running", NOW), InstanceState.FAILED, 143, False),  # stopped
        (described("shutting-down", USER), None, InstanceState.TERMINATING, None, False),
        (described("shutting-down", USER), ConsoleVerdict(0, "shutting-down", NOW), InstanceState.SUCCEEDED, 0, False),
        (described("terminated", USER), ConsoleVerdict(2, "terminated", NOW), InstanceState.FAILED, 2, False),
        (described("stopped", USER), ConsoleVerdict(0, "stopped", NOW), InstanceState.SUCCEEDED, 0, False),
        (described("shutting-down", USER), ConsoleVerdict(None, "shutting-down", NOW), InstanceState.TERMINATING,
         None, False),
        (described("terminated", USER), ConsoleVerdict(None, "terminated", NOW), InstanceState.TERMINATED, None, False),
        (described("stopped", USER), ConsoleVerdict(None, "stopped", NOW), InstanceState.TERMINATED, None, False),
        (described("shutting-down", SPOT, "spot"), ConsoleVerdict(None, "shutting-down", NOW),
         InstanceState.TERMINATED, None, True),
        (described("terminated", SPOT, "spot"), ConsoleVerdict(None, "terminated", NOW), InstanceState.TERMINATED,
         None, True),
        (described("terminated", SPOT, "spot"), ConsoleVerdict(0, "terminated", NOW), InstanceState.SUCCEEDED, 0,
         False),
        (described("terminated", SPOT, "spot"), None, InstanceState.TERMINATING, None, False),
    ],
)  # fmt: skip
def test_the_marker_decides_an_exit_and_without_it_the_ec2_state_and_reason_do(
    data: dict[str, Any], verdict: ConsoleVerdict | None, state: InstanceState, exit_code: int | None, preempted: bool
) -> None:
    instance = instance_from(data, "us-east-1", verdict)
    assert (instance.state, instance.exit_code, instance.preempted) == (state, exit_code, preempted)


def test_only_a_marker_line_of_its_own_counts_and_the_last_one_wins() -> None:
    assert exit_code_in(b"boot\r\nNEBULA-EXIT-CODE=0\r\n") == 0
    assert exit_code_in(b"NEBULA-EXIT-CODE=1\nmore\nNEBULA-EXIT-CODE=137\n") == 137
    assert exit_code_in(b"2026-12-01T10:00:00.1Z NEBULA-EXIT-CODE=0\r\n") is None  # a workload's own line
    assert exit_code_in(b"NEBULA-EXIT-CODE=\nNEBULA-EXIT-CODE=x1\n") is None
    assert exit_code_in(b"") is None


def test_the_user_data_writes_the_exit_marker_the_provider_reads(tmp_path: Path) -> None:
    boot = Boot(
        claim="ml-trainer-abc", ssh_user="ec2-user", authorized_keys=(generate_key_pair("a").public_line,),
        host_key=generate_key_pair().private_openssh, gpus=False, terminate_on_exit=True,
    )  # fmt: skip
    script = render_script(make_pod(), {}, boot)
    tail = script[script.index('echo "$code" > /var/log/nebula/workload.exit') :]
    assert re.search(r'\nmark "\$code"\n(sleep \d+; )?shutdown -h now\n', tail)
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash to run the marker function with")
    definition = next(line for line in script.splitlines() if line.startswith("mark()"))
    console = tmp_path / "console"
    program = definition.replace("/dev/console", str(console)) + "\nmark 3\n"
    subprocess.run([bash, "-c", program], check=True, timeout=30)
    assert exit_code_in(console.read_bytes()) == 3


def test_the_console_of_a_terminated_instance_stays_readable_and_previous_is_another_vm(aws: AwsProvider) -> None:
    instance = launch(aws)
    workload_exits(instance, 0)
    aws.terminate(instance)
    assert b"NEBULA-EXIT-CODE=0" in aws.logs(instance, LogOptions()).read()
    assert aws.logs(instance, LogOptions(follow=True)).read()  # the last snapshot, then the end
    with pytest.raises(errors.NotSupported, match="different VM"):
        aws.logs(instance, LogOptions(previous=True))
    forget(instance)
    with pytest.raises(errors.NotFound):
        aws.logs(instance, LogOptions())


def test_a_vm_is_replaced_on_restart_bills_after_exit_and_keeps_its_console_after_terminate() -> None:
    capabilities = make_provider().capabilities()
    assert capabilities.restarts_in_place is False
    assert capabilities.bills_after_exit is True
    assert capabilities.keeps_output_after_terminate is True
