"""The pod's start command: a wrapper that runs the Pod's program, stamps its output into a
log file, records its pid and exit code, then stays alive.

Called by `RunPodProvider.provision`. Pure. The script travels in env `NEBULA_WORKLOAD`
(env values are escaped GraphQL strings; `dockerArgs` stays one short fixed line). RunPod
restarts a container whose main process exits, so after the workload the wrapper sleeps
forever: the exit file is the workload's end, and the pod bills until Nebula terminates it.
Lines are `<RFC 3339 UTC, nanoseconds> <line>` (stdout and stderr merged, as
`docker logs --timestamps`); the exit file `<code> <unix time>` is written after the last line.
A restart of the container (RunPod moved it, or it crashed) finds the exit file and does not
run the workload again. The workload leads a process group of its own (`setsid`, where the
image has it), so `stop_command` signals it and what it started, never the wrapper.
Tests: tests/providers/runpod/test_runpod_provider.py.
"""

from __future__ import annotations

import math
import shlex

from providers import base

STATE_DIR = "/var/log/nebula"
LOG_FILE = f"{STATE_DIR}/workload.log"
EXIT_FILE = f"{STATE_DIR}/exit"
STARTED_FILE = f"{STATE_DIR}/started"
PID_FILE = f"{STATE_DIR}/pid"
ENV_FILE = f"{STATE_DIR}/env"  # the container's env (`export -p`, mode 600), for exec sessions
ENV_WORKLOAD = "NEBULA_WORKLOAD"
DOCKER_ARGS = "bash -c 'eval \"$NEBULA_WORKLOAD\"'"
# One SSH command: prints `started <unix>` and `exit <code> <unix>` lines for what exists.
PROBE = (
    f"[ -r {STARTED_FILE} ] && echo started $(cat {STARTED_FILE}); "
    f"[ -r {EXIT_FILE} ] && echo exit $(cat {EXIT_FILE}); exit 0"
)


def stop_command(*, grace: float) -> str:
    """The SSH command that stops the workload as a kubelet kills a container and returns at
    once: SIGTERM to its process group (its pid leads one when the image has `setsid`; else
    to its pid), SIGKILL `grace` seconds later (whole seconds, rounded up; at once for 0),
    from a detached process on the pod. Each signal only while no exit is recorded, so a
    pid the workload no longer holds is never signalled. Nothing is done once it ended."""
    wait = max(0, math.ceil(grace))
    body = (
        f"p=$(cat {PID_FILE}); sig() {{ [ -e {STATE_DIR}/.code ] || [ -e {EXIT_FILE} ] || "
        f'kill -s "$1" -- "-$p" 2>/dev/null || kill -s "$1" "$p" 2>/dev/null; }}; '
        + (f"sig TERM; sleep {wait}; sig KILL" if wait else "sig KILL")
    )
    return (
        f"[ -r {PID_FILE} ] && [ ! -e {EXIT_FILE} ] || exit 0; "
        f"nohup bash -c {shlex.quote(body)} > /dev/null 2>&1 < /dev/null & exit 0"
    )


def exec_argv(command: list[str]) -> list[str]:
    """An exec session's command: the container's env and working dir (an SSH session starts
    with sshd's env, not the container's; the wrapper saved both), then `command`."""
    return ["bash", "-c", f'. {ENV_FILE} 2>/dev/null; exec "$@"', "nebula-exec", *command]


def script(pod: base.PodSpec) -> str:
    """The wrapper (bash) for the Pod's first container."""
    argv = [*pod.command, *pod.args]
    if not argv:
        argv = ["sh"]  # an image's default command is not known here; see docs/providers/runpod.md
    cd = f"cd {shlex.quote(pod.working_dir)} || exit 126; " if pod.working_dir else ""
    exec_cd = (
        f"echo {shlex.quote('cd ' + shlex.quote(pod.working_dir) + ' 2>/dev/null')} >> {ENV_FILE}"
        if pod.working_dir
        else ":"
    )
    run = f"{cd}echo $$ > {PID_FILE}; exec {shlex.join(argv)}"
    return f"""d={STATE_DIR}
mkdir -p "$d"
(umask 077; unset NEBULA_WORKLOAD; export -p > {ENV_FILE}; {exec_cd})
if [ ! -e {EXIT_FILE} ]; then
  stamp() {{ while IFS= read -r line || [ -n "$line" ]; do
    printf '%s %s\\n' "$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)" "$line"; done; }}
  date -u +%s > {STARTED_FILE}
  lead=; command -v setsid > /dev/null && lead=setsid
  {{ $lead bash -c {shlex.quote(run)} 2>&1 < /dev/null; echo $? > "$d/.code"; }} | stamp >> {LOG_FILE}
  echo "$(cat "$d/.code") $(date -u +%s)" > "$d/.exit" && mv "$d/.exit" {EXIT_FILE}
fi
while :; do sleep 3600; done
"""
