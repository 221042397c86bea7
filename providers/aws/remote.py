"""How Nebula reaches an AWS instance's workload: over SSH (the operator key, the claim's
host key from its tag) to `docker exec` and the stamped log file; else the serial console.

Called by `AwsProvider.logs` and `exec`. Builds values only; the SSH work is
`providers.ssh`'s. Never logs a key.
Tests: tests/providers/aws/test_aws_boot.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from providers.aws.keys import KeyPair
from providers.aws.options import AwsOptions
from providers.aws.status import TAG_HOST_KEY, tags_of
from providers.aws.userdata import CONTAINER, EXIT_FILE, LOG_FILE
from providers.ssh import FileLog, SshTarget

WORKLOAD_LOG = FileLog(LOG_FILE, EXIT_FILE, stamped=True)


def exec_argv(command: Sequence[str], *, tty: bool, stdin: bool) -> list[str]:
    """The command run over SSH: into the container, as root (the login user has sudo on the AMI)."""
    flags = (["-i"] if stdin else []) + (["-t"] if tty else [])
    return ["sudo", "-n", "docker", "exec", *flags, CONTAINER, *command]


def ssh_target(data: dict[str, Any], endpoint: str, options: AwsOptions, key: KeyPair) -> SshTarget:
    """Where to log in; the host key comes from the instance's tag (None: not verified)."""
    host_key = tags_of(data).get(TAG_HOST_KEY) or None
    return SshTarget(
        host=endpoint, port=options.ssh_port, username=options.ssh_user, private_key=key.private_openssh,
        host_key=host_key, connect_timeout=options.connect_timeout,
    )  # fmt: skip
