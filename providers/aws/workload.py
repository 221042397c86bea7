"""The user-data's run of a Pod with init containers or several app containers, each its own
Docker container `nebula-<container>` on the instance's host network (they share localhost,
as a Pod's containers do), with its bind mounts and its own env.

Called by `userdata.render_script`. Pure. The script runs the init containers in order, each
to exit 0 before the next (a failure ends the sequence: nothing after it runs in this
instance); native sidecars start in their place and keep running; then every app container
starts. Each container's stamped output goes to its log file, and, prefixed with its name,
to the console; its exit code to its exit record once the log is complete. Each start and
exit is a `CONTAINER_MARKER` console line, repeated every `HEARTBEAT_SECONDS` (the console
is a 64 KiB window, so a long run's first lines scroll out of it). Once every app container
has ended, nothing runs again in this instance (a restart replaces it), so the sidecars are
stopped, the workload's code (the first non-zero init or app code, else 0) is marked, and
the instance may shut down.
Tests: tests/providers/aws/test_aws_userdata.py.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from providers import base
from providers.aws import mounts
from providers.shape import ContainerSpec, Volume

LOG_DIR = "/var/log/nebula"
STATE_DIR = "/var/lib/nebula/containers"  # each container's marker lines, for the heartbeat
# One console line per container event: `NEBULA-CONTAINER <name> started <unix time>` and
# `NEBULA-CONTAINER <name> exited <code> <unix time>`; container names are lower case, and
# the containers' own console lines start with their name, so they cannot fake one.
CONTAINER_MARKER = "NEBULA-CONTAINER"
HEARTBEAT_SECONDS = 30
STOP_GRACE_SECONDS = 30  # `docker stop -t` for the sidecars once the app containers ended


def container_name(container: str) -> str:
    """The Docker name of a Pod's container when the Pod runs several (`nebula-<container>`)."""
    return f"nebula-{container}"


def container_log(container: str) -> str:
    """A container's stamped log file on the instance (`docker logs --timestamps` lines)."""
    return f"{LOG_DIR}/{container}.log"


def container_exit(container: str) -> str:
    """A container's exit record, written once its log is complete."""
    return f"{LOG_DIR}/{container}.exit"


def container_run(
    spec: ContainerSpec, env: Mapping[str, str], *, gpus: bool, name: str, extra: Sequence[str] = ()
) -> list[str]:
    """The `docker run -d` argv for one container (pure): `extra` (ports, network, mounts) comes before `-w`."""
    argv = ["docker", "run", "-d", "--name", name, "--log-driver", "json-file"]
    if gpus:
        argv += ["--gpus", "all"]
    argv += extra
    if spec.working_dir:
        argv += ["-w", spec.working_dir]
    for key in sorted(env):
        argv += ["-e", f"{key}={env[key]}"]
    if spec.command:
        argv += ["--entrypoint", spec.command[0]]
    return [*argv, spec.image, *spec.command[1:], *spec.args]


def _functions(*, root: str) -> str:
    logs = shlex.quote(f"{root}{LOG_DIR}")
    state = shlex.quote(f"{root}{STATE_DIR}")
    return f"""logs={logs}
state={state}
mkdir -p "$logs" "$state"
event() {{  # <name> started | <name> exited <code>
  local line
  line="{CONTAINER_MARKER} $* $(date +%s)"
  echo "$line" >> "$console" 2>/dev/null
  echo "$line" >> "$state/$1"
}}
launch() {{  # <name> <docker run argv...>: start it, or record that it could not start (125)
  local name=$1
  shift
  if "$@" >/dev/null; then event "$name" started; return 0; fi
  echo "nebula: the container could not be started" >> "$logs/$name.log"
  say "container $name could not be started"
  echo 125 > "$logs/$name.exit"
  event "$name" exited 125
  return 1
}}
supervise() {{  # <name>: its stamped output to its log and the console until it exits, then its exit
  local name=$1 follower code
  docker logs --timestamps --follow "nebula-$name" 2>&1 | tee -a "$logs/$name.log" \\
    | sed -u "s/^/$name /" >> "$console" &
  follower=$!
  code=$(docker wait "nebula-$name") || code=255
  wait "$follower"
  echo "${{code:-255}}" > "$logs/$name.exit"
  event "$name" exited "${{code:-255}}"
}}
( trap 'kill "$nap" 2>/dev/null; exit 0' TERM
  while :; do sleep {HEARTBEAT_SECONDS} & nap=$!; wait "$nap"; cat "$state"/* >> "$console" 2>/dev/null; done
) >/dev/null 2>&1 &
heartbeat=$!
code=0
sidecars=()
sidecar_names=()
apps=()"""


def render_several(
    pod: base.PodSpec, envs: Mapping[str, Mapping[str, str]], volumes: Sequence[Volume], *, gpus: bool, root: str = ""
) -> str:
    """The bash lines that run every container and leave the workload's code in `$code`.
    `envs`: each container's resolved env by name."""

    def run(spec: ContainerSpec) -> str:
        extra = ["--network", "host", *mounts.mount_args(spec, volumes, root=root)]
        argv = container_run(spec, envs.get(spec.name, {}), gpus=gpus, name=container_name(spec.name), extra=extra)
        return f"launch {shlex.quote(spec.name)} {shlex.join(argv)}"

    steps = [_functions(root=root)]
    for spec in pod.init_containers:
        name = shlex.quote(spec.name)
        if spec.sidecar:
            steps.append(f"""if [ "$code" = 0 ]; then
  if {run(spec)}; then supervise {name} & sidecars+=($!); sidecar_names+=({name}); else code=125; fi
fi""")
        else:
            steps.append(f"""if [ "$code" = 0 ]; then
  {run(spec)} && supervise {name}
  code=$(cat "$logs/"{name}.exit)
fi""")
    apps = pod.app_containers()
    starts = "\n".join(f"  {run(spec)} && {{ supervise {shlex.quote(spec.name)} & apps+=($!); }}" for spec in apps)
    names = " ".join(shlex.quote(spec.name) for spec in apps)
    steps.append(f"""if [ "$code" = 0 ]; then
{starts}
  if [ ${{#apps[@]}} -gt 0 ]; then wait "${{apps[@]}}"; fi
  for name in {names}; do
    ended=$(cat "$logs/$name.exit")
    if [ "$code" = 0 ] && [ "$ended" != 0 ]; then code=$ended; fi
  done
fi
for name in ${{sidecar_names[@]+"${{sidecar_names[@]}}"}}; do
  docker stop -t {STOP_GRACE_SECONDS} "nebula-$name" >/dev/null 2>&1
done
if [ ${{#sidecars[@]}} -gt 0 ]; then wait "${{sidecars[@]}}"; fi
kill "$heartbeat" 2>/dev/null
wait "$heartbeat" 2>/dev/null
cat "$state"/* >> "$console" 2>/dev/null""")
    return "\n".join(steps)
