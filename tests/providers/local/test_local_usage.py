"""The local provider's usage from /proc (`providers.local.usage`), against real processes:
a process group's CPU (children it reaped included) and memory, and `LocalProvider.usage`
of a provisioned instance, per container."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from providers.base import InstanceId, ProvisionRequest
from providers.claim import claim_name
from providers.errors import NotFound
from providers.local import LocalProvider, pids
from providers.local.usage import read_group
from tests.support.factories import make_pod_spec
from tests.support.polling import wait_for

CHILD_BURNS = "import time\nwhile time.process_time() < 0.3: pass\n"
# The leader runs a child that burns 0.3 s of CPU, reaps it, says so, then holds 32 MiB.
LEADER = f"""
import subprocess, sys, time
subprocess.run([sys.executable, "-c", {CHILD_BURNS!r}], check=True)
held = b"x" * (32 << 20)
print("reaped", flush=True)
time.sleep(300)
"""


@pytest.fixture
def group() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", LEADER], stdout=subprocess.PIPE, start_new_session=True)
    try:
        yield process
    finally:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def test_a_group_counts_the_cpu_of_children_it_reaped_and_its_memory(group: subprocess.Popen[bytes]) -> None:
    assert group.stdout is not None and group.stdout.readline() == b"reaped\n"
    leader = pids.identify(group.pid)
    assert leader is not None
    reading = read_group(leader)
    assert reading is not None
    assert reading.cpu_core_nanoseconds >= 300_000_000  # the reaped child's 0.3 s (cutime)
    assert reading.working_set_bytes >= 32 << 20 and reading.rss_bytes >= 32 << 20


def test_a_group_with_no_member_reads_none(group: subprocess.Popen[bytes]) -> None:
    # Once its child is reaped, the leader is the group's one member (a stress run killed the
    # leader while the child still burned its CPU, and the group, rightly, still read).
    assert group.stdout is not None and group.stdout.readline() == b"reaped\n"
    leader = pids.identify(group.pid)
    assert leader is not None
    group.kill()
    group.wait()
    assert read_group(leader) is None
    assert read_group(pids.ProcessIdentity(leader.pid, leader.start_ticks + 1)) is None  # another process's pid


def test_local_usage_of_an_instance_is_per_container(tmp_path: Path) -> None:
    provider = LocalProvider("local", {"state_dir": str(tmp_path), "grace_period": 1, "usage_interval": 0.2})
    spec = make_pod_spec(
        container="app", command=(sys.executable, "-c", "held = b'x' * (24 << 20)\nimport time\ntime.sleep(300)")
    )
    request = ProvisionRequest(claim=claim_name("ns", f"u-{uuid.uuid4().hex[:6]}", spec.uid))
    result = provider.provision(spec, request)
    try:
        usage = wait_for(
            lambda: (u := provider.usage(result.instance_id)) and (u.total.memory_bytes or 0) >= 24 << 20 and u,
            30, 0.1, what="the instance's memory",
        )  # fmt: skip
        assert set(usage.containers) == {"app"}
        assert usage.containers["app"].cpu_core_nanoseconds is not None
        assert usage.containers["app"].sampled_at is not None
    finally:
        provider.terminate(result.instance_id)
    with pytest.raises(NotFound):
        provider.usage(InstanceId("local-nobody"))
