"""Rigs for tests that run a VM's user-data on this machine: the script started for a
Pod, then told to stop and reaped, killed if it will not end. Used by the SSH provider's
usage tests; it starts nothing before it is entered and leaves no process behind."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from providers.base import PodSpec
from tests.providers.aws.vm_script import Vm, render


@contextmanager
def user_data_running(vm: Vm, pod: PodSpec) -> Iterator[subprocess.Popen[bytes]]:
    """The Pod's user-data running in `vm`; on exit its stop file is touched and it is reaped."""
    script = vm.start(render(vm, pod))
    try:
        yield script
    finally:
        Path(f"{vm.order}.stop").touch()
        try:
            script.wait(60)
        except subprocess.TimeoutExpired:
            script.send_signal(signal.SIGKILL)
            script.wait(10)
        assert script.stderr is not None
        script.stderr.close()
