"""The user-data script that turns a fresh EC2 instance into the Pod's containers.

Called by `AwsProvider.provision`. The script authorizes the connect keys, installs the
claim's host key, writes the Pod's volumes (`mounts`), runs the container with the host's
Docker (the ECS GPU AMI's), copies its stamped output to the serial console and to
`LOG_FILE`, and writes the exit marker (`EXIT_MARKER`) to the console before shutting down.
A Pod with init containers or several app containers runs them through `workload` instead
(per-container logs and `CONTAINER_MARKER` lines). The script carries env values and volume
contents in clear text: it is rendered, gzipped and sent, NEVER logged or put in an error.
Tests: tests/providers/aws/test_aws_boot.py, tests/providers/aws/test_aws_userdata.py.
"""

from __future__ import annotations

import gzip
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from providers import base
from providers.aws import mounts, workload
from providers.shape import Volume

LOG_DIR = workload.LOG_DIR
LOG_FILE = f"{LOG_DIR}/workload.log"  # `docker logs --timestamps` lines
EXIT_FILE = f"{LOG_DIR}/workload.exit"  # the exit code, written once the log is complete
CONTAINER = "nebula-workload"
# The console line `NEBULA-EXIT-CODE=<n>`, alone on its line, written after the workload
# exits and before the shutdown: the one machine-readable fact `exits` reads from the console.
EXIT_MARKER = "NEBULA-EXIT-CODE"
SHUTDOWN_DELAY_SECONDS = 60  # time to read the last logs before the instance goes
PULL_ATTEMPTS = 5


def runs_several(pod: base.PodSpec) -> bool:
    """The Pod has init containers or more than one app container: it runs through `workload`."""
    return bool(pod.init_containers) or len(pod.app_containers()) > 1


@dataclass(frozen=True, repr=False)
class Boot:
    """What the script needs besides the Pod. `host_key` is a private key: never log."""

    claim: str
    ssh_user: str
    authorized_keys: tuple[str, ...]  # public key lines
    host_key: bytes  # OpenSSH private host key
    gpus: bool
    terminate_on_exit: bool
    shutdown_delay: int = SHUTDOWN_DELAY_SECONDS

    def __repr__(self) -> str:
        return f"Boot(claim={self.claim!r})"


def docker_run(
    pod: base.PodSpec, env: Mapping[str, str], *, gpus: bool, volumes: Sequence[Volume] = (), root: str = ""
) -> list[str]:
    """The `docker run` argv for the Pod's one container (pure): its ports published, its mounts bound."""
    spec = pod.app_containers()[0]
    extra = [arg for port in spec.ports for arg in ("-p", f"{port}:{port}")]
    extra += mounts.mount_args(spec, volumes, root=root)
    return workload.container_run(spec, env, gpus=gpus, name=CONTAINER, extra=extra)


def _heredoc(marker: str, body: str) -> str:
    if any(line.strip() == marker for line in body.splitlines()):
        raise ValueError("a key contains the heredoc marker")
    return f"<<'{marker}'\n{body.rstrip()}\n{marker}"


def render_script(
    pod: base.PodSpec,
    env: Mapping[str, str],
    boot: Boot,
    *,
    container_env: Mapping[str, Mapping[str, str]] | None = None,
    volumes: Sequence[Volume] = (),
    root: str = "",
) -> str:
    """The bash script (pure). `env` is the first app container's, `container_env` every
    container's by name (`ProvisionRequest.env_for`); `root` stands for `/` (only tests,
    which run the script in a temporary folder, set it)."""
    images = list(dict.fromkeys(spec.image for spec in (*pod.init_containers, *pod.app_containers())))
    if runs_several(pod):
        envs = {
            spec.name: (container_env or {}).get(spec.name, env)
            for spec in (*pod.init_containers, *pod.app_containers())
        }
        run = workload.render_several(pod, envs, volumes, gpus=boot.gpus, root=root)
    else:
        run = _render_one(pod, env, volumes, gpus=boot.gpus, root=root)
    pulls = "\n".join(_pull(image) for image in images)
    finish = f"sleep {boot.shutdown_delay}; shutdown -h now" if boot.terminate_on_exit else "true"
    return f"""{_prelude(boot, root=root)}
{mounts.write_volumes(volumes, (*pod.init_containers, *pod.app_containers()), root=root)}
{pulls}
{run}
say "workload exited with code $code"
mark "$code"
{finish}
"""


def _prelude(boot: Boot, *, root: str) -> str:
    user = shlex.quote(boot.ssh_user)
    log_dir = shlex.quote(f"{root}{LOG_DIR}")
    console = shlex.quote(f"{root}/dev/console")
    host_key = shlex.quote(f"{root}/etc/ssh/ssh_host_ed25519_key")
    return f"""#!/bin/bash
# Nebula: claim {boot.claim}. Runs the Pod's containers; output to the serial console and {LOG_DIR}.
set -u
umask 022
mkdir -p {log_dir}
console={console}
say() {{ echo "nebula: $*" >> {console} 2>/dev/null || echo "nebula: $*"; }}
mark() {{ echo "{EXIT_MARKER}=$1" >> {console} 2>/dev/null || echo "{EXIT_MARKER}=$1"; }}

home=$(getent passwd {user} | cut -d: -f6)
if [ -n "$home" ]; then
  install -d -m 700 "$home/.ssh"
  cat >> "$home/.ssh/authorized_keys" {_heredoc("NEBULA_KEYS", chr(10).join(boot.authorized_keys))}
  chmod 600 "$home/.ssh/authorized_keys"
  chown -R {user}: "$home/.ssh"
fi

umask 077
mkdir -p "$(dirname {host_key})"
cat > {host_key} {_heredoc("NEBULA_HOST_KEY", boot.host_key.decode("ascii"))}
umask 022
ssh-keygen -y -f {host_key} > {host_key}.pub
systemctl restart sshd 2>/dev/null || service sshd restart 2>/dev/null || true
"""


def _pull(image: str) -> str:
    quoted = shlex.quote(image)
    return f"""for attempt in $(seq {PULL_ATTEMPTS}); do
  docker pull {quoted} && break
  say "pull of {quoted} failed (attempt $attempt)"; sleep 10
done"""


def _render_one(pod: base.PodSpec, env: Mapping[str, str], volumes: Sequence[Volume], *, gpus: bool, root: str) -> str:
    """The one-container run: `nebula-workload`, its log in LOG_FILE, its exit in EXIT_FILE."""
    run = shlex.join(docker_run(pod, env, gpus=gpus, volumes=volumes, root=root))
    log_file, exit_file = shlex.quote(f"{root}{LOG_FILE}"), shlex.quote(f"{root}{EXIT_FILE}")
    return f"""if {run} >/dev/null; then
  docker logs --timestamps --follow {CONTAINER} 2>&1 | tee -a {log_file} > {shlex.quote(f"{root}/dev/console")} &
  follower=$!
  code=$(docker wait {CONTAINER})
  wait "$follower"
else
  code=125
  echo "nebula: the container could not be started" >> {log_file}
  say "the container could not be started"
fi
echo "$code" > {exit_file}"""


def render_user_data(
    pod: base.PodSpec,
    env: Mapping[str, str],
    boot: Boot,
    *,
    container_env: Mapping[str, Mapping[str, str]] | None = None,
    volumes: Sequence[Volume] = (),
) -> bytes:
    """The script gzipped (cloud-init unpacks it): it fits EC2's 16 KiB limit more easily and
    no env value appears verbatim in an SDK debug log of the request."""
    script = render_script(pod, env, boot, container_env=container_env, volumes=volumes)
    return gzip.compress(script.encode("utf-8"), mtime=0)
