"""CPU and memory of a local container: its workload's process group, read from /proc.

Called by `LocalProvider.usage` through a `UsageSampler` (so at most once per interval per
container run). Reads /proc only; never signals. CPU is utime+stime of every live member of
the group plus cutime+cstime (the children each has reaped); the working set is the sum of
the members' VmRSS (shared pages count once per process), RSS the sum of their RssAnon.
Tests: tests/providers/local/test_local_usage.py.
"""

from __future__ import annotations

import os
from pathlib import Path

from providers.local.pids import ProcessIdentity, group_alive
from providers.usage import NANO, Reading

PROC = Path("/proc")
_TICKS = os.sysconf("SC_CLK_TCK")


def read_group(leader: ProcessIdentity, *, proc: Path = PROC) -> Reading | None:
    """The group's cumulative CPU and memory now; None when no member lives."""
    if not group_alive(leader):
        return None
    ticks, working_set, rss, members = 0, 0, 0, 0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(entry / "stat")
        # After the command name: [0] state, [2] pgrp, [11..14] utime stime cutime cstime.
        if fields is None or len(fields) < 15 or fields[2] != str(leader.pid):
            continue
        members += 1
        ticks += sum(int(value) for value in fields[11:15])
        if fields[0] not in ("Z", "X"):
            resident, anonymous = _memory(entry / "status")
            working_set, rss = working_set + resident, rss + anonymous
    if members == 0:
        return None
    return Reading(cpu_core_nanoseconds=ticks * NANO // _TICKS, working_set_bytes=working_set, rss_bytes=rss)


def _stat_fields(path: Path) -> list[str] | None:
    try:
        raw = path.read_bytes()
    except OSError:
        return None  # the process ended while we looked
    return raw[raw.rfind(b")") + 2 :].decode("ascii", "replace").split()


def _memory(path: Path) -> tuple[int, int]:
    """VmRSS and RssAnon of one process, in bytes (0 when it ended while we looked)."""
    resident = anonymous = 0
    try:
        text = path.read_text()
    except OSError:
        return 0, 0
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            resident = int(line.split()[1]) * 1024
        elif line.startswith("RssAnon:"):
            anonymous = int(line.split()[1]) * 1024
    return resident, anonymous
