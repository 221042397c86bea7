"""Remote usage over SSH (`providers.ssh.usage`) against the test sshd on this machine: one
command reads each root's process tree from /proc (descendants and reaped children counted,
memory summed); a root that prints no pid is left out; an unreachable host is Unavailable."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from providers.errors import Unavailable
from providers.ssh.usage import parse_answer, read_usage, usage_command
from providers.usage import Reading
from tests.support.servers.sshd import Sshd

# /proc gives a reaped child's CPU as cutime + cstime, each truncated to whole clock ticks (10 ms),
# so it reads up to two ticks under the child's precise process_time: the child burns 0.4 s for a
# reading asserted >= 0.3 s (a 0.3 s burn read 0.29 s once in three full runs side by side).
CHILD_BURNS = "import time\nwhile time.process_time() < 0.4: pass\n"
CHILD_HOLDS = "import time\nheld = b'y' * (16 << 20)\ntime.sleep(300)\n"
# The root reaps a child that burned 0.4 s of CPU, then starts one that holds 16 MiB.
ROOT = f"""
import subprocess, sys, time
subprocess.run([sys.executable, "-c", {CHILD_BURNS!r}], check=True)
holder = subprocess.Popen([sys.executable, "-c", {CHILD_HOLDS!r}])
time.sleep(1.0)
print("ready", flush=True)
time.sleep(300)
"""


@pytest.fixture
def tree() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", ROOT], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert process.stdout is not None and process.stdout.readline() == b"ready\n"
        yield process
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the group this fixture started, by its id
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def test_one_command_reads_each_roots_tree_from_the_remote_proc(sshd: Sshd, tree: subprocess.Popen[bytes]) -> None:
    readings = read_usage(sshd.target(), {"web": f"echo {tree.pid}", "gone": "true", "": f"echo {tree.pid}"})
    assert set(readings) == {"web", ""}  # "gone" printed no pid
    web = readings["web"]
    assert web.cpu_core_nanoseconds >= 300_000_000  # the reaped child's CPU
    assert web.working_set_bytes >= 16 << 20 and web.rss_bytes >= 16 << 20  # the live child's memory


def test_answers_parse_by_name_and_odd_lines_are_skipped() -> None:
    assert parse_answer("web 250 100 2048 1024\n- 100 100 1 1\nnoise\nx 1 2\n") == {
        "web": Reading(2_500_000_000, 2048 * 1024, 1024 * 1024),
        "": Reading(1_000_000_000, 1024, 1024),
    }
    argv = shlex.split(usage_command({"a": "echo 1", "": "echo 2"}))
    assert argv[:2] == ["sh", "-c"] and argv[3:] == ["sh", "a", "echo 1", "-", "echo 2"]


def test_an_unreachable_host_is_unavailable(sshd: Sshd) -> None:
    with pytest.raises(Unavailable):
        read_usage(sshd.target(port=1, connect_timeout=2.0), {"web": "echo 1"})
    assert read_usage(sshd.target(), {}) == {}
