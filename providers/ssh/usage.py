"""CPU and memory of processes on a remote host, read from its /proc over one SSH command.

Called by VM providers (`providers.aws`) through their `UsageSampler`, so a host is asked at
most once per sampling interval. For each named root (a shell command that prints one pid,
say `docker inspect -f '{{.State.Pid}}' web`) the remote script sums, over that process and
its descendants, utime+stime+cutime+cstime (children they reaped included), VmRSS (the
working set) and RssAnon (RSS). Reads only; the script changes nothing on the host.
Tests: tests/providers/ssh/test_ssh_usage.py.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from providers.ssh.loop import LoopThread
from providers.ssh.process import run_to_end
from providers.ssh.target import SshTarget
from providers.usage import NANO, Reading

# Args: pairs of (name, pid command). Prints `name ticks clk_tck rss_kb anon_kb` per root that runs.
SCRIPT = r"""
tck=$(getconf CLK_TCK 2>/dev/null || echo 100)
while [ $# -ge 2 ]; do
  name=$1; root=$(eval "$2" 2>/dev/null | head -n 1); shift 2
  case $root in ''|0|*[!0-9]*) continue ;; esac
  cat /proc/[0-9]*/stat 2>/dev/null | awk -v root="$root" -v name="$name" -v tck="$tck" '
    { line = $0; sub(/^.*\) /, "", line); split(line, f, " ")
      parent[$1] = f[2]; ticks[$1] = f[12] + f[13] + f[14] + f[15]; state[$1] = f[1] }
    END {
      if (!(root in parent)) exit
      inside[root] = 1; grew = 1
      while (grew) { grew = 0
        for (p in parent) if (!(p in inside) && (parent[p] in inside)) { inside[p] = 1; grew = 1 } }
      t = 0; rss = 0; anon = 0
      for (p in inside) { t += ticks[p]
        if (state[p] == "Z") continue
        file = "/proc/" p "/status"
        while ((getline l < file) > 0) { split(l, kv, " ")
          if (kv[1] == "VmRSS:") rss += kv[2]; else if (kv[1] == "RssAnon:") anon += kv[2] }
        close(file) }
      print name, t, tck, rss, anon
    }'
done
"""


def usage_command(roots: Mapping[str, str]) -> str:
    """The remote command line for `roots` (container name -> a command printing its pid)."""
    args = [part for name, pid in roots.items() for part in (name or "-", pid)]
    return shlex.join(["sh", "-c", SCRIPT, "sh", *args])


def parse_answer(text: str) -> dict[str, Reading]:
    """The script's lines as readings by name ("-" is the one unnamed container)."""
    readings: dict[str, Reading] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 5 or not all(p.isdigit() for p in parts[1:]):
            continue
        name, ticks, tck, rss, anon = parts[0], *map(int, parts[1:])
        readings["" if name == "-" else name] = Reading(ticks * NANO // max(tck, 1), rss * 1024, anon * 1024)
    return readings


def read_usage(
    target: SshTarget, roots: Mapping[str, str], *, timeout: float = 30.0, loop: LoopThread | None = None
) -> dict[str, Reading]:
    """One SSH command: the reading of every root that runs (a root that prints no pid, or
    whose process is gone, is left out). `Unavailable` when the host cannot be asked."""
    if not roots:
        return {}
    answer = run_to_end(target, usage_command(roots), timeout=timeout, what="the usage script", loop=loop)
    return parse_answer(answer)
