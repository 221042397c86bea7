"""The user-data script that turns a fresh EC2 instance into the Pod's container.

Called by `AwsProvider.provision`. The script authorizes the connect keys, installs the
claim's host key, runs the container with the host's Docker (the ECS GPU AMI's), copies
its stamped output to the serial console and to `LOG_FILE`, and writes the exit marker
(`EXIT_MARKER`) to the console before shutting down. It carries env values
in clear text: it is rendered, gzipped and sent, NEVER logged or put in an error.
Tests: tests/providers/aws/test_aws_boot.py.
"""

from __future__ import annotations

import gzip
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from providers.base import PodSpec

LOG_DIR = "/var/log/nebula"
LOG_FILE = f"{LOG_DIR}/workload.log"  # `docker logs --timestamps` lines
EXIT_FILE = f"{LOG_DIR}/workload.exit"  # the exit code, written once the log is complete
CONTAINER = "nebula-workload"
# The console line `NEBULA-EXIT-CODE=<n>`, alone on its line, written after the workload
# exits and before the shutdown: the one machine-readable fact `exits` reads from the console.
EXIT_MARKER = "NEBULA-EXIT-CODE"
SHUTDOWN_DELAY_SECONDS = 60  # time to read the last logs before the instance goes
PULL_ATTEMPTS = 5


@dataclass(frozen=True, repr=False)
class Boot:
    """What the script needs besides the Pod. `host_key` is a private key: never log."""

    claim: str
    ssh_user: str
    authorized_keys: tuple[str, ...]  # public key lines
    host_key: bytes  # OpenSSH private host key
    gpus: bool
    terminate_on_exit: bool

    def __repr__(self) -> str:
        return f"Boot(claim={self.claim!r})"


def docker_run(pod: PodSpec, env: Mapping[str, str], *, gpus: bool) -> list[str]:
    """The `docker run` argv for the Pod's first container (pure)."""
    argv = ["docker", "run", "-d", "--name", CONTAINER, "--log-driver", "json-file"]
    if gpus:
        argv += ["--gpus", "all"]
    for port in pod.ports:
        argv += ["-p", f"{port}:{port}"]
    if pod.working_dir:
        argv += ["-w", pod.working_dir]
    for key in sorted(env):
        argv += ["-e", f"{key}={env[key]}"]
    if pod.command:
        argv += ["--entrypoint", pod.command[0]]
    return [*argv, pod.image, *pod.command[1:], *pod.args]


def _heredoc(marker: str, body: str) -> str:
    if any(line.strip() == marker for line in body.splitlines()):
        raise ValueError("a key contains the heredoc marker")
    return f"<<'{marker}'\n{body.rstrip()}\n{marker}"


def render_script(pod: PodSpec, env: Mapping[str, str], boot: Boot) -> str:
    """The bash script (pure; unit-tested as text)."""
    user = shlex.quote(boot.ssh_user)
    image = shlex.quote(pod.image)
    run = shlex.join(docker_run(pod, env, gpus=boot.gpus))
    finish = f"sleep {SHUTDOWN_DELAY_SECONDS}; shutdown -h now" if boot.terminate_on_exit else "true"
    return f"""#!/bin/bash
# Nebula: claim {boot.claim}. Runs the Pod's container; output to the serial console and {LOG_FILE}.
set -u
umask 022
mkdir -p {LOG_DIR}
say() {{ echo "nebula: $*" > /dev/console 2>/dev/null || echo "nebula: $*"; }}
mark() {{ echo "{EXIT_MARKER}=$1" > /dev/console 2>/dev/null || echo "{EXIT_MARKER}=$1"; }}

home=$(getent passwd {user} | cut -d: -f6)
if [ -n "$home" ]; then
  install -d -m 700 "$home/.ssh"
  cat >> "$home/.ssh/authorized_keys" {_heredoc("NEBULA_KEYS", chr(10).join(boot.authorized_keys))}
  chmod 600 "$home/.ssh/authorized_keys"
  chown -R {user}: "$home/.ssh"
fi

umask 077
cat > /etc/ssh/ssh_host_ed25519_key {_heredoc("NEBULA_HOST_KEY", boot.host_key.decode("ascii"))}
umask 022
ssh-keygen -y -f /etc/ssh/ssh_host_ed25519_key > /etc/ssh/ssh_host_ed25519_key.pub
systemctl restart sshd 2>/dev/null || service sshd restart 2>/dev/null || true

for attempt in $(seq {PULL_ATTEMPTS}); do
  docker pull {image} && break
  say "pull of {image} failed (attempt $attempt)"; sleep 10
done
if {run} >/dev/null; then
  docker logs --timestamps --follow {CONTAINER} 2>&1 | tee -a {LOG_FILE} > /dev/console &
  follower=$!
  code=$(docker wait {CONTAINER})
  wait "$follower"
else
  code=125
  echo "nebula: the container could not be started" >> {LOG_FILE}
  say "the container could not be started"
fi
echo "$code" > {EXIT_FILE}
say "workload exited with code $code"
mark "$code"
{finish}
"""


def render_user_data(pod: PodSpec, env: Mapping[str, str], boot: Boot) -> bytes:
    """The script gzipped (cloud-init unpacks it): it fits EC2's 16 KiB limit more easily and
    no env value appears verbatim in an SDK debug log of the request."""
    return gzip.compress(render_script(pod, env, boot).encode("utf-8"), mtime=0)
