"""One `manage.py runvnode` process, started as a user starts it, with its output in a log file:
the part every multi-process rig shares (tests/support/rigs/managers.py's replicas,
tests/nebula_site/test_two_replicas.py, tests/nebula_site/test_spend_survives.py). Closing it
is SIGTERM, the graceful stop, and SIGKILL only if that does not end it in time."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path


class ManagerProcess:
    """`args` run in `cwd` with `env`; stdout and stderr appended to `log`."""

    def __init__(self, args: list[str], *, cwd: Path, env: dict[str, str], log: Path) -> None:
        self.args, self.cwd, self.env, self.log = args, cwd, env, log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.args, cwd=self.cwd, env=self.env, stdout=out, stderr=subprocess.STDOUT)

    def signal(self, sig: int) -> None:
        assert self.process is not None
        self.process.send_signal(sig)

    def end_with(self, sig: int, timeout: float = 30) -> None:
        """Send `sig` and wait for the process to exit (a handoff with SIGTERM, a crash with SIGKILL)."""
        self.signal(sig)
        assert self.process is not None
        self.process.wait(timeout)

    def kill(self) -> None:
        self.end_with(signal.SIGKILL)

    def close(self, timeout: float = 40) -> None:
        """End it if it still runs: resumed if stopped, then SIGTERM, then SIGKILL after `timeout`."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGCONT)
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
