"""The graceful stop of a Modal sandbox's workload: the command `ModalProvider.stop_container`
runs through the sandbox's exec (Modal has no call that signals a sandbox; `terminate` kills it).

Pure. The command is POSIX sh, run inside the sandbox: SIGTERM to every process of the
sandbox's task (its environment holds the sandbox's `MODAL_TASK_ID`, which Modal sets in the
container; a sandbox without one is signalled nothing, and `terminate` ends it), then, `grace` seconds
later, SIGKILL to what still runs: the timer is this exec's own `sleep`, on Modal's side,
so the call returns once the exec started and a manager restart does not lose it. The stop
command and what it starts carry `STOP_MARKER` and are never signalled by it. The kernel's
exit then ends the sandbox: 143 (SIGTERM), 137 (SIGKILL) or the workload's own code.
Tests: tests/providers/modal/test_modal_provider_stop.py.
"""

from __future__ import annotations

import math

STOP_MARKER = "NEBULA_STOP"
# $1: the seconds between SIGTERM and SIGKILL (0: SIGKILL at once). `grep -z` reads each
# /proc/<pid>/environ as NUL-separated lines (one grep lists the task's processes); a
# process that ended meanwhile is skipped.
STOP_SCRIPT = (
    '[ -n "${MODAL_TASK_ID:-}" ] || exit 3; task="MODAL_TASK_ID=$MODAL_TASK_ID"; '
    'sig() { for f in $(grep -lzxF "$task" /proc/[0-9]*/environ 2>/dev/null); do '
    'p=${f#/proc/}; p=${p%/environ}; [ "$p" = "$$" ] && continue; '
    f'grep -qz "^{STOP_MARKER}=" "$f" 2>/dev/null && continue; '
    'kill -s "$1" "$p" 2>/dev/null; done; }; '
    'if [ "$1" -gt 0 ]; then sig TERM; sleep "$1"; fi; sig KILL'
)


def stop_argv(*, grace: float) -> list[str]:
    """The exec's command: SIGTERM now, SIGKILL after `grace` seconds (whole seconds,
    rounded up; at once for 0 or less)."""
    return ["sh", "-c", STOP_SCRIPT, "nebula-stop", str(max(0, math.ceil(grace)))]
