"""What an AWS instance is told and shows: the rendered user-data (a real `bash -n`), the
serial-console logs (base64 or plain, follow), the catalog, and the SSH wiring values."""

from __future__ import annotations

import base64
import gzip
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws

from providers import errors
from providers.aws import AwsProvider, catalog, logs, remote
from providers.aws.keys import generate_key_pair
from providers.aws.userdata import Boot, docker_run, render_script, render_user_data
from providers.base import InstanceId, LogOptions, PodSpec, ProvisionRequest
from providers.claim import claim_name

SECRET = "s3cr3t 'quoted' $HOME value"


def make_pod(**overrides: Any) -> PodSpec:
    values: dict[str, Any] = {
        "namespace": "ml", "name": "trainer", "uid": "u-1", "container": "main", "image": "repo/train:1",
        "command": ("python", "-m", "train"), "args": ("--lr", "0.1"), "ports": (8080, 9090), "working_dir": "/work",
    }  # fmt: skip
    values.update(overrides)
    return PodSpec(**values)


def make_boot(**overrides: Any) -> Boot:
    values: dict[str, Any] = {
        "claim": "ml-trainer-abc", "ssh_user": "ec2-user", "authorized_keys": (generate_key_pair("a").public_line,),
        "host_key": generate_key_pair().private_openssh, "gpus": True, "terminate_on_exit": True,
    }  # fmt: skip
    values.update(overrides)
    return Boot(**values)


def test_docker_run_sets_entrypoint_args_ports_workdir_gpus_and_sorted_env() -> None:
    argv = docker_run(make_pod(), {"B": "2", "A": SECRET}, gpus=True)
    assert argv[:6] == ["docker", "run", "-d", "--name", "nebula-workload", "--log-driver"]
    assert argv[argv.index("--gpus") + 1] == "all"
    assert ["-p", "8080:8080", "-p", "9090:9090", "-w", "/work"] == argv[argv.index("-p") : argv.index("-w") + 2]
    assert argv.index(f"A={SECRET}") < argv.index("B=2")
    assert argv[argv.index("--entrypoint") + 1] == "python"
    assert argv[-5:] == ["repo/train:1", "-m", "train", "--lr", "0.1"]
    assert "--entrypoint" not in docker_run(make_pod(command=()), {}, gpus=False)
    assert "--gpus" not in docker_run(make_pod(), {}, gpus=False)


def test_the_script_is_valid_bash_quotes_env_and_sends_output_to_the_console() -> None:
    script = render_script(make_pod(), {"TOKEN": SECRET}, make_boot())
    assert script.startswith("#!/bin/bash\n")
    assert "'TOKEN=s3cr3t '\"'\"'quoted'\"'\"' $HOME value'" in script  # single-quoted: no expansion
    assert "| tee -a /var/log/nebula/workload.log > /dev/console" in script
    assert "docker logs --timestamps --follow nebula-workload" in script
    assert 'echo "$code" > /var/log/nebula/workload.exit' in script
    assert script.rstrip().endswith("shutdown -h now")
    assert "shutdown" not in render_script(make_pod(), {}, make_boot(terminate_on_exit=False))
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash to check the syntax with")
    checked = subprocess.run([bash, "-n"], input=script.encode(), capture_output=True, timeout=30)
    assert checked.returncode == 0, checked.stderr.decode()


def test_the_user_data_is_gzipped_and_carries_no_env_value_in_clear() -> None:
    data = render_user_data(make_pod(), {"TOKEN": SECRET}, make_boot())
    assert data[:2] == b"\x1f\x8b" and SECRET.encode() not in data
    assert SECRET.encode() not in base64.b64encode(data)
    assert "TOKEN" in gzip.decompress(data).decode()
    assert SECRET not in repr(make_boot())


def test_keys_that_could_end_the_heredoc_are_refused() -> None:
    with pytest.raises(ValueError):
        render_script(make_pod(), {}, make_boot(authorized_keys=("NEBULA_KEYS",)))


def test_exec_runs_in_the_container_with_the_flags_asked() -> None:
    assert remote.exec_argv(["sh"], tty=True, stdin=True) == [
        "sudo", "-n", "docker", "exec", "-i", "-t", "nebula-workload", "sh",
    ]  # fmt: skip
    assert remote.exec_argv(["ls", "-l"], tty=False, stdin=False)[-3:] == ["nebula-workload", "ls", "-l"]


def test_the_catalog_lists_the_families_with_a_primary_first() -> None:
    entries = catalog.load_catalog()
    assert {e.family for e in entries} >= {"g4dn", "g5", "g6", "g6e", "p4d", "p4de", "p5"}
    found = catalog.candidates(entries, accelerator="nvidia-a10g", gpu_count=1, region="us-east-1")
    assert found[0].instance_type == "g5.xlarge" and len(found) > 1
    assert [e.on_demand_price for e in found] == sorted(e.on_demand_price for e in found)
    big = catalog.candidates(
        entries, accelerator="a10g", gpu_count=1, region="us-east-1", cpu=30, memory_bytes=100 << 30
    )
    assert big[0].instance_type == "g5.8xlarge"
    h100 = catalog.candidates(entries, accelerator="H100", gpu_count=8, region="us-east-1")
    assert [e.instance_type for e in h100] == ["p5.48xlarge"]
    assert catalog.candidates(entries, accelerator=None, gpu_count=0, region="us-east-1")[0].gpu_count == 0


# -- the serial console ----------------------------------------------------------------------------


def test_console_output_is_base64_decoded_with_a_plain_text_fallback() -> None:
    assert logs.decode_console(base64.b64encode(b"boot ok\n").decode()) == b"boot ok\n"
    assert logs.decode_console("Linux version 2.6 (plain)") == b"Linux version 2.6 (plain)"
    assert logs.decode_console(None) == b""


def test_appended_finds_what_a_rolling_console_window_added() -> None:
    assert logs.appended(b"", b"abc") == b"abc"
    assert logs.appended(b"line1\nline2\n", b"line1\nline2\nline3\n") == b"line3\n"
    old = b"".join(b"line %d\n" % i for i in range(100))
    new = old[500:] + b"fresh\n"
    assert logs.appended(old, new) == b"fresh\n"


@pytest.fixture
def aws() -> Iterator[AwsProvider]:
    with mock_aws():
        yield AwsProvider("aws", {"regions": ["us-east-1"], "ami": "ami-12c6146b", "max_attempts": 1, "ssh": False,
                                  "poll_interval": 0.05})  # fmt: skip


def provision(provider: AwsProvider) -> InstanceId:
    pod = make_pod(uid=str(uuid.uuid4()))
    return provider.provision(pod, ProvisionRequest(claim=claim_name(pod.namespace, pod.name, pod.uid))).instance_id


def test_without_ssh_logs_come_from_the_console_and_follow_ends_when_the_instance_stops_running(
    aws: AwsProvider,
) -> None:
    instance = provision(aws)
    snapshot = aws.logs(instance, LogOptions(tail_lines=2)).read()
    assert snapshot and len(snapshot.splitlines()) == 2
    followed = aws.logs(instance, LogOptions(follow=True))
    assert followed.read()
    aws.terminate(instance)
    assert followed.read() == b""
    assert aws.logs(instance, LogOptions()).read() == aws.logs(instance, LogOptions(follow=True)).read()
    with pytest.raises(errors.NotFound):
        aws.logs(InstanceId("us-east-1/i-0123456789abcdef0"), LogOptions())


def test_console_logs_refuse_timestamps_and_exec_needs_ssh(aws: AwsProvider) -> None:
    instance = provision(aws)
    with pytest.raises(errors.NotSupported):
        aws.logs(instance, LogOptions(timestamps=True))
    with pytest.raises(errors.NotSupported):
        aws.logs(instance, LogOptions(previous=True))
    aws.get(instance)  # moto: pending -> running on describe
    with pytest.raises(errors.NotSupported):
        aws.exec(instance, ["ls"], tty=False, stdin=False)
    with pytest.raises(errors.NotFound):
        aws.exec(InstanceId("us-east-1/i-0123456789abcdef0"), ["ls"], tty=False, stdin=False)


def test_port_forward_needs_ssh_and_a_running_instance(aws: AwsProvider) -> None:
    instance = provision(aws)
    aws.get(instance)  # moto: pending -> running on describe
    with pytest.raises(errors.NotSupported, match="no SSH endpoint"):
        aws.port_forward(instance, 8080)
    with pytest.raises(errors.NotFound):
        aws.port_forward(InstanceId("us-east-1/i-0123456789abcdef0"), 8080)
