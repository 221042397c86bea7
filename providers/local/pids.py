"""Process identity on Linux: a pid plus its start time, so a reused pid is not mistaken
for our process.

Used by the provider (liveness, signalling) and the supervisor (recording what it
started). Reads /proc only; never signals anything except through `signal_group`.
Tests: tests/providers/local/test_local.py.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass


@dataclass(frozen=True)
class ProcessIdentity:
    """`start_ticks` is field 22 of /proc/<pid>/stat: clock ticks after boot."""

    pid: int
    start_ticks: int

    def as_json(self) -> dict[str, int]:
        return {"pid": self.pid, "start_ticks": self.start_ticks}

    @classmethod
    def from_json(cls, data: object) -> ProcessIdentity | None:
        if not isinstance(data, dict):
            return None
        pid, ticks = data.get("pid"), data.get("start_ticks")
        if not isinstance(pid, int) or not isinstance(ticks, int) or pid <= 1:
            return None
        return cls(pid, ticks)


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (which may hold spaces)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name is in parentheses and may itself contain ')'.
    return raw[raw.rfind(b")") + 2 :].decode("ascii", "replace").split()


def identify(pid: int) -> ProcessIdentity | None:
    """The identity of the running process `pid`, or None if there is none."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20:
        return None
    return ProcessIdentity(pid, int(fields[19]))


def is_alive(identity: ProcessIdentity) -> bool:
    """True if the very process recorded in `identity` runs (a zombie counts as gone)."""
    fields = _stat_fields(identity.pid)
    if fields is None or len(fields) < 20:
        return False
    return fields[0] not in ("Z", "X") and int(fields[19]) == identity.start_ticks


def group_alive(leader: ProcessIdentity) -> bool:
    """True if the process group led by `leader` has a member.

    Linux does not hand out a pid while a process group of that id exists, so if the
    group's pid is held by a process with another start time, our group is gone.
    """
    current = identify(leader.pid)
    if current is not None and current.start_ticks != leader.start_ticks:
        return False
    try:
        os.killpg(leader.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def signal_group(leader: ProcessIdentity, signum: signal.Signals) -> bool:
    """Send `signum` to the group led by `leader` if it is still ours; False if gone."""
    if not group_alive(leader):
        return False
    try:
        os.killpg(leader.pid, signum)
    except ProcessLookupError:
        return False
    return True


def exit_code_from_returncode(returncode: int) -> int:
    """A Popen returncode the way a shell reports it: 128+N for death by signal N."""
    return 128 - returncode if returncode < 0 else returncode
